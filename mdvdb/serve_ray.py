"""`mdvdb serve --ray`: a sharded index served by Ray Serve, a deployment per shard group
(`query.ShardGroup`) and an HTTP ingress (`SearchIngress`) that takes the MCP `search` tool's
arguments and answers as `mdvdb search --json`. `build` is also a Serve application builder
(`serve run ... mdvdb.serve_ray:build root=... groups=2`): docs/scale-out.md, "Serving on Ray
Serve"."""

from __future__ import annotations

import asyncio
import hmac
import signal
import threading
import time
from contextlib import suppress
from dataclasses import replace
from typing import Any

from kernel import shards

__all__ = ["SearchIngress", "build", "request_fields", "run"]

ROUTER_CLASS = "query.shards.affinity:SessionAffinity"
TOKEN_NAME = "serve-http.token"  # the endpoint's bearer token in the state folder
MAX_ONGOING = 32  # requests a replica takes at once (the rounds of concurrent queries)


class RequestProblem(ValueError):
    """A request body the ingress refuses (HTTP 400)."""


def request_fields(body: Any) -> dict[str, Any]:
    """The MCP `search` tool's arguments as `SearchRequest` fields, types and bounds checked."""
    from query import OPTIONS

    if not isinstance(body, dict):
        raise RequestProblem("expected a JSON object of search arguments")
    known = {option.mcp_name: option for option in OPTIONS}
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise RequestProblem(f"unknown argument(s): {', '.join(unknown)}")
    fields = {}
    for name, option in known.items():
        if name not in body:
            fields[option.name] = [] if option.spec.repeat == "many" else option.default
            continue
        value = body[name]
        if option.spec.repeat == "many":
            value = [] if value is None else value
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise RequestProblem(f"{name}: expected a list of strings")
        elif value is not None and not _is(value, option.spec.value):
            raise RequestProblem(f"{name}: expected {option.spec.value.__name__}")
        problem = None if option.spec.repeat == "many" else option.bound_problem(value, name)
        if problem:
            raise RequestProblem(problem)
        if option.spec.choices and value is not None and value not in option.spec.choices:
            raise RequestProblem(f"{name}: expected one of {', '.join(option.spec.choices)}")
        fields[option.name] = value
    scoped = ("query", "filters", "paths", "sources", "tag", "category", "since", "before")
    if not any(fields[n] for n in scoped):
        raise RequestProblem("give a query, filters, tag, category, paths, sources or since")
    return fields


def _is(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind) and not isinstance(value, bool)


class SearchIngress:
    """The application's HTTP ingress: POST the search arguments, get the `--json` answer."""

    def __init__(self, root: str, token: str, *groups: Any):
        from ray import serve

        from kernel.config import load_config
        from query import open_index

        del groups  # bound so that Serve deploys them with the app; the reader finds them
        app = serve.get_replica_context().app_name  # `mdvdb serve --ray`'s, or `serve run`'s
        config = replace(load_config(root), ray_serve="auto", ray_serve_app=app)
        self.index = open_index(config=config)
        self.expected = f"Bearer {token}".encode() if token else b""

    def answer(self, body: Any) -> tuple[int, dict[str, Any]]:
        """(HTTP status, the document): 200 and `mdvdb search --json`'s, or an error."""
        from mdvdb.cli.errors import USER_ERRORS, CliError
        from mdvdb.cli.search import json_answer, search_outcome

        try:
            wanted, outcome = search_outcome(self.index, request_fields(body))
            return 200, json_answer(self.index, wanted, outcome)
        except (RequestProblem, CliError) as exc:
            return 400, {"error": str(exc)}
        except Exception as exc:  # the library's one-line errors; anything else is ours
            if type(exc).__name__ not in USER_ERRORS:
                raise
            return 500, {"error": str(exc).splitlines()[0]}

    async def __call__(self, request) -> Any:
        from starlette.responses import Response

        from mdvdb.cli.errors import json_text

        status, data = 405, {"error": "POST the search arguments as JSON"}
        given = request.headers.get("authorization", "").encode()
        if self.expected and not hmac.compare_digest(given, self.expected):
            body = json_text({"error": "missing or wrong bearer token (mdvdb serve --help)"})
            headers = {"www-authenticate": 'Bearer realm="mdvdb"'}
            return Response(body, 401, headers=headers, media_type="application/json")
        if request.method == "POST":
            try:
                body = await request.json()
            except ValueError:
                status, data = 400, {"error": "the body is not JSON"}
            else:
                status, data = await asyncio.to_thread(self.answer, body)
        return Response(json_text(data), status, media_type="application/json")


def build(args: dict[str, str]):
    """The Serve application for the sharded index of folder `root`: `groups` shard groups
    (default: one per shard) of `replicas` replicas needing `cpus` CPUs each; with
    `token_file`, every request needs that bearer token (without it the endpoint is open,
    for a platform's own authenticating ingress in front)."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from kernel.config import load_config
    from query import ShardGroup, shard_group_name, shard_groups

    config = load_config(args["root"])
    manifest = shards.read_manifest(config.shards_path)
    if manifest is None:
        raise ValueError(f"no sharded index at {config.shards_path}: set MDVDB_SHARDS and ingest")
    served = shard_groups(manifest.shards, int(args.get("groups") or manifest.shards))
    router = RequestRouterConfig(request_router_class=ROUTER_CLASS)
    bound = []
    for group, members in enumerate(served):
        deployment = serve.deployment(
            ShardGroup,
            name=shard_group_name(group),
            num_replicas=int(args.get("replicas") or 1),
            ray_actor_options={"num_cpus": float(args.get("cpus") or 1)},
            max_ongoing_requests=MAX_ONGOING,
            request_router_config=router,
        )
        bound.append(
            deployment.bind(str(config.shards_path), members, manifest.shards, len(served))
        )
    ingress = serve.deployment(
        SearchIngress, name="search", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64
    )
    token = ""
    if args.get("token_file"):
        from mdvdb.mcp_server import http_token

        token, _ = http_token(config, args["token_file"])
    return ingress.bind(str(config.root), token, *bound)


def run(config, address: str, listen: tuple[str, int], groups, replicas, cpus, token_file: str):
    """Deploy the application on the cluster at `address` (`local`: a Ray started here) and
    keep it up until SIGTERM or Ctrl-C; then delete it."""
    import ray
    from ray import serve

    from mdvdb.cli.errors import line
    from query import shard_groups

    local = address == "local"
    ray.init(address=address, log_to_driver=False, logging_level="ERROR")  # local: a new one
    try:
        serve.start(http_options={"host": listen[0], "port": listen[1]})
        app = config.ray_serve_app
        args = {"root": str(config.root), "groups": str(groups or "")}
        args.update(replicas=str(replicas), cpus=str(cpus), token_file=token_file)
        serve.run(build(args), name=app, route_prefix=f"/{app}", blocking=False)
        url = f"http://{listen[0]}:{listen[1]}/{app}"
        _probe(url, token_file)
        manifest = shards.read_manifest(config.shards_path)
        count = len(shard_groups(manifest.shards, groups or manifest.shards))
        gcs = ray.get_runtime_context().gcs_address
        line(
            f"serve: {count} shard group(s) x {replicas} replica(s) of {config.root} on Ray "
            f"{gcs}; search at {url} (bearer token: {token_file})"
        )
        _wait_for_signal()
        serve.delete(app)
    finally:
        if local:
            serve.shutdown()
        ray.shutdown()


def _probe(url: str, token_file: str, seconds: float = 60.0) -> None:
    """The ingress answers at `url`, or a one-line error (Serve's HTTP proxy could not bind
    the port, or another application holds the route)."""
    from pathlib import Path

    import httpx

    token = Path(token_file).read_text(encoding="utf-8").strip()
    headers = {"authorization": f"Bearer {token}"}
    deadline = time.monotonic() + seconds
    while True:
        with suppress(httpx.HTTPError):
            if "POST the search" in httpx.get(url, headers=headers, timeout=5.0).text:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the search endpoint {url} does not answer (is the port in use?)")
        time.sleep(0.5)


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    while not stop.wait(0.5):
        pass
