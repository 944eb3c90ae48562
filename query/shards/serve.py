"""The shards of a sharded index on Ray Serve: shard-group deployments (`ShardGroup`) answer
the `ShardPart` calls, one request per group a round; `SessionAffinity` keeps a staged query's
rounds on one replica, and a lost session is replayed by the router. Serve carries the calls:
nothing here listens on a port of ours (docs/scale-out.md, "Serving on Ray Serve")."""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kernel import index_format, shards
from query.shards.part import CALLS, ShardPart

__all__ = [
    "DEFAULT_APP",
    "ShardGroup",
    "ServePart",
    "connect",
    "group_name",
    "groups_of",
    "serve_parts",
]

DEFAULT_APP = "mdvdb"
RETRIES = 3  # a call whose replica died is sent this many more times
TIMEOUT = 60.0
# The calls' names and arguments: a router refuses groups of another protocol (another
# mdvdb release) in one line rather than failing inside a query. Raise it with any change.
PROTOCOL = 3
SHARD_FILE = re.compile(r"shard-(\d{3})-g(\d{6})\.index")


class ShardServeError(index_format.IndexFormatError):
    """Shard groups that cannot be reached or answer an error; one line."""


def group_name(group: int) -> str:
    return f"shards-{group}"


def groups_of(shard_count: int, groups: int) -> list[list[int]]:
    """The shards each group serves: shard s in group s mod `groups`."""
    count = max(1, min(groups, shard_count))
    return [list(range(g, shard_count, count)) for g in range(count)]


class ShardGroup:
    """A Serve deployment's body: the calls of some shards of one sharded index."""

    def __init__(self, folder: str, served: Sequence[int], shard_count: int, groups: int):
        self.folder = Path(folder)
        self.served = frozenset(int(s) for s in served)
        self.shard_count = shard_count
        self.groups = groups
        self.keep = 2 * len(self.served) + 2  # two generations of each, and a spare
        self._parts: OrderedDict[str, ShardPart] = OrderedDict()
        self._lock = threading.Lock()
        self.requests = self.replays = 0  # calls answered; staged rounds replayed first
        # the shards of one round side by side: NumPy drops the GIL in the heavy parts
        self._pool = ThreadPoolExecutor(max(1, min(len(self.served), os.cpu_count() or 1)))

    def hello(self) -> dict[str, Any]:
        """What a router checks before it sends calls, and what this replica has done."""
        import ray

        return {
            "protocol": PROTOCOL,
            "shards": sorted(self.served),
            "shard_count": self.shard_count,
            "groups": self.groups,
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
            "requests": self.requests,
            "replays": self.replays,
        }

    def part(self, name: str) -> ShardPart:
        """The part of a shard file by its name (mapped on first use; the last few kept)."""
        match = SHARD_FILE.fullmatch(name) if isinstance(name, str) else None
        if match is None or int(match.group(1)) not in self.served:
            raise ValueError(f"not a shard file this group serves: {name!r}")
        with self._lock:
            found = self._parts.get(name)
            if found is None:
                found = self._parts[name] = ShardPart.load(self.folder / name)
                while len(self._parts) > self.keep:
                    self._parts.popitem(last=False)
            self._parts.move_to_end(name)
            return found

    def calls(self, key: str, calls: list[dict]) -> list[dict]:
        """Each call's {"value"} or {"error"}, in order (`key`: the query's session, which
        `SessionAffinity` routes by)."""

        def one(call: dict) -> dict:
            try:
                name, args = call["call"], call.get("args") or []
                if name not in CALLS:
                    raise ValueError(f"unknown shard call {name!r}")
                with self._lock:
                    self.requests += 1
                    self.replays += name == "stage" and len(args) > 3 and args[3] is not None
                return {"value": self.part(call["file"]).call(name, *args)}
            except (ValueError, TypeError, KeyError, index_format.IndexFormatError) as exc:
                return {"error": str(exc).splitlines()[0] if str(exc) else repr(exc)}

        if len(calls) == 1:
            return [one(calls[0])]
        return list(self._pool.map(one, calls))


def connect(address: str) -> None:
    """Join the Ray cluster at `address` as a driver (once per process); inside a Ray
    worker (the ingress deployment), or with `auto` once connected, nothing to do."""
    import logging

    import ray

    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if address not in ("auto", current) and ":" in address and "://" not in address:
            raise ShardServeError(
                f"this process is connected to Ray at {current}, not {address}: one cluster "
                "a process"
            )
        return
    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # its INFO lines on stderr
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ShardServeError(f"Ray at {address}: {first}") from None


class ServePart:
    """A `ShardPart` in a shard group: the same calls, on the pinned shard file."""

    remote = True  # query.shards.reader.fan_out gives remote calls a wider pool

    def __init__(self, handle, group: str, name: str):
        self.handle = handle
        self.group = group
        self.name = name

    def call(self, name: str, *args):
        return ServePart.call_each([self], name, [args])[0]

    @staticmethod
    def call_each(parts: Sequence[ServePart], name: str, args: Sequence[Sequence]) -> list:
        """`name` on each part with its own arguments: one request per group, sent to
        every group before any answer is read (query.shards.reader.call_each)."""
        if name not in CALLS:
            raise ValueError(f"unknown shard call {name!r}")
        key = str(args[0][0]) if name == "stage" and args and args[0] else ""
        groups: dict[str, list[int]] = {}
        for i, part in enumerate(parts):
            groups.setdefault(part.group, []).append(i)
        requests = {
            group: [{"file": parts[i].name, "call": name, "args": list(args[i])} for i in at]
            for group, at in groups.items()
        }
        handles = {parts[at[0]].group: parts[at[0]].handle for at in groups.values()}
        sent = {g: handles[g].calls.remote(key, requests[g]) for g in groups}
        out: list[Any] = [None] * len(parts)
        for group, at in groups.items():
            answers = _answered(handles[group], group, key, requests[group], sent[group])
            for i, answer in zip(at, answers, strict=True):
                if "error" in answer:
                    raise ShardServeError(f"shard group {group}: {answer['error']}")
                value = answer.get("value")
                out[i] = tuple(value) if name == "feedback_postings" else value
        return out


def _answered(handle, group: str, key: str, request: list[dict], response) -> list[dict]:
    """A group's answers; sent again (to another replica) while its replica dies."""
    from ray import exceptions

    lost = (exceptions.RayActorError, exceptions.ActorUnavailableError)
    for attempt in range(RETRIES + 1):
        try:
            answers = response.result(timeout_s=TIMEOUT)
        except lost as exc:
            if attempt == RETRIES:
                kind = type(exc).__name__
                raise ShardServeError(
                    f"shard group {group}: its replicas failed ({kind}) {RETRIES + 1} times"
                ) from None
            time.sleep(0.05 * 2**attempt)
            response = handle.calls.remote(key, request)
            continue
        except exceptions.GetTimeoutError:
            raise ShardServeError(f"shard group {group}: no answer in {TIMEOUT:.0f} s") from None
        if not isinstance(answers, list) or len(answers) != len(request):
            raise ShardServeError(f"shard group {group}: malformed reply")
        return answers
    raise AssertionError("unreachable")


def serve_parts(address: str, app: str, manifest: shards.Manifest) -> list[ServePart]:
    """One `ServePart` per shard of the manifest, at the group that serves it."""
    from ray import serve

    connect(address)
    try:
        running = app in serve.status().applications
    except Exception:  # no Serve controller on that cluster: Serve's own types
        running = False
    if not running:
        raise ShardServeError(
            f"no Serve app {app!r} at Ray {address} (is `mdvdb serve --ray` running there?)"
        )
    owner: dict[int, tuple[Any, str]] = {}
    group, groups = 0, 1
    while group < groups:
        name = group_name(group)
        handle = serve.get_deployment_handle(name, app_name=app)
        hello = _hello(handle, f"Serve app {app!r} at Ray {address}, {name}")
        _check(hello, name, manifest)
        groups = int(hello.get("groups") or 1)
        for shard in hello.get("shards") or []:
            owner.setdefault(int(shard), (handle, name))
        group += 1
    missing = [e.shard for e in manifest.entries if e.shard not in owner]
    if missing:
        listed = ", ".join(map(str, missing))
        raise ShardServeError(f"no shard group of Serve app {app!r} serves shard(s) {listed}")
    return [ServePart(*owner[e.shard], e.name) for e in manifest.entries]


def _hello(handle, where: str, seconds: float = 30.0) -> Any:
    """A group's hello; asked again for a while, since a handle made right after the app
    came up can fail before its router has the deployment (seen under load)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return handle.hello.remote().result(timeout_s=TIMEOUT)
        except Exception as exc:  # Serve's and Ray's own types
            if time.monotonic() > deadline:
                first = str(exc).splitlines()[0] if str(exc) else ""
                raise ShardServeError(f"{where}: {type(exc).__name__} {first}") from None
            time.sleep(0.5)


def _check(hello: Any, name: str, manifest: shards.Manifest) -> None:
    hello = hello if isinstance(hello, dict) else {}
    if hello.get("protocol") != PROTOCOL:
        raise ShardServeError(
            f"shard group {name} speaks protocol {hello.get('protocol')}, this mdvdb "
            f"{PROTOCOL}: deploy the same mdvdb release the readers run"
        )
    if hello.get("shard_count") != manifest.shards:
        raise ShardServeError(
            f"shard group {name} serves an index of {hello.get('shard_count')} shards, "
            f"this one has {manifest.shards}"
        )
