"""Parse, chunk and embed an ingest's new files on a Ray cluster (`MDVDB_EXECUTOR=ray[:ADDRESS]`).

The same batches as the local pool (pipeline/workers.py: 128 (path, sha) pairs each), the same
task (`prepare_batch`), the same answers: only where they run changes. A pool of actors, each
holding the embedding model once (Ray's batch-inference pattern: the model is loaded in the
actor's constructor, batches stream through it), takes the batches; the driver (this process)
keeps everything that makes the result exactly the local build: doit's stages, the SHA-256
caches, the writer lock, and the order in which batches are written (as sent, whatever order
they finish in).

Files reach the actors in one of two ways (`MDVDB_EXECUTOR_FILES`): `paths`, each actor reads
`root/path` itself (the folder is on a filesystem every node mounts at the same path: a local
cluster, NFS, a shared volume), or `bytes`, the driver reads them and ships them in the task.
Either way the actor checks each file's SHA-256 against discover's, so a node that sees another
version of a file reports it as changed rather than indexing it.

A worker that dies (killed, out of memory, a node lost) is restarted and its batch retried by
Ray (`RETRIES`); past that the run stops with one line and the previous index is intact, and
the next run picks up where this one stopped (every batch written is in the caches).

Nothing here imports `ray` until a run asks for it: it is an optional extra
(`pip install 'markdown-vdb[ray]'`). A cluster started for the run has no dashboard, no usage
statistics and listens on this machine only; it is shut down at the end of the run.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pipeline.workers import (
    Batch,
    EmbedSpec,
    ExecutorUnavailable,
    Spec,
    WorkerDied,
    batches_of,
    prepare_batch,
    read_file,
)

if TYPE_CHECKING:
    from kernel.config import Config

# Restarts of a dead actor, and retries of the batch it held: a worker killed once does not
# lose the run; one that dies again and again (a batch that kills it) stops it.
RETRIES = 2
# Batches queued per actor: one running, one waiting, so an actor never waits on the driver.
IN_FLIGHT_PER_ACTOR = 2
# Seconds to reach a cluster's address before saying it is unreachable (ray.init itself would
# retry for about a minute).
CONNECT_TIMEOUT = 5.0
# The object store of a cluster started for the run: batches are small (128 files in, their
# chunks and vectors out), and the machine is someone's laptop or a CI runner.
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
# Test hook: "N" makes every actor exit in its Nth batch; "N:FILE" only the first to get there
# (it creates FILE), so the run survives by a retry.
EXIT_HOOK = "MDVDB_TEST_RAY_EXIT_AT_BATCH"

_last_run = {"actors": 0, "start_seconds": 0.0}


def address_of(config: Config) -> str | None:
    """The cluster's address, or None for a cluster started for the run."""
    kind, _, address = config.executor.partition(":")
    return address or None


def files_mode(config: Config) -> str:
    """paths or bytes: `auto` trusts a shared filesystem only on a cluster of this machine."""
    if config.executor_files != "auto":
        return config.executor_files
    return "paths" if address_of(config) is None else "bytes"


def check(config: Config) -> None:
    """Before the run takes the lock: the extra is installed, the folder did not choose the
    cluster, and the address answers. Raises ExecutorUnavailable (one line, nothing written)."""
    origin = config.origin("MDVDB_EXECUTOR")
    _quiet_ray()
    if address_of(config) is not None:
        _token_auth()  # read by `import ray`
    try:
        import ray  # noqa: F401 - the run needs it; a broken install fails here, not mid-run
    except ImportError:
        raise ExecutorUnavailable(
            f"MDVDB_EXECUTOR={config.executor} (from {origin}) needs Ray: "
            "pip install 'markdown-vdb[ray]'; the previous index is intact"
        ) from None
    address = address_of(config)
    if address is None:
        return
    if config.from_folder("MDVDB_EXECUTOR") and not config.trusted:
        # The folder's own config would send its files to a machine it names.
        raise ExecutorUnavailable(
            f"MDVDB_EXECUTOR={config.executor} comes from {origin}: a folder does not choose "
            "the cluster its files are sent to (set it in your environment or pass --executor)"
        )
    host_port = _host_port(address)
    if host_port is None:
        return  # `auto`, or a form only Ray knows: ray.init reports it
    try:
        socket.create_connection(host_port, timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise ExecutorUnavailable(
            f"cannot reach the Ray cluster at {address} (MDVDB_EXECUTOR from {origin}): "
            f"{exc.strerror or exc}; the previous index is intact"
        ) from None


def _host_port(address: str) -> tuple[str, int] | None:
    rest = address.removeprefix("ray://")
    host, colon, port = rest.rpartition(":")
    if not colon or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


class Preparer:
    """One actor: the embedding model, loaded once, and the batches sent to it."""

    def __init__(self, spec: Spec, exit_at: str) -> None:
        from kernel.version import __version__

        self.spec = spec
        self.version = __version__
        self.batches = 0
        self.exit_at = exit_at
        if spec.embed is not None:
            from pipeline.workers import _provider

            _provider(spec.embed)  # the model, once per actor

    def ready(self) -> str:
        """The mdvdb version this worker runs (the driver refuses another one)."""
        return self.version

    def prepare(self, items: list[tuple[str, str]], contents: list[bytes | str] | None) -> Batch:
        self.batches += 1
        if self.exit_at:
            _maybe_exit(self.exit_at, self.batches)
        return prepare_batch(self.spec, items, contents)


def _maybe_exit(hook: str, batch: int) -> None:
    at, _, once = hook.partition(":")
    if batch != int(at):
        return
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    os._exit(17)


def processes_for(config: Config, files: int) -> int:
    """The actors the last run of this process used (what the report calls its workers)."""
    return int(_last_run["actors"])


def start_seconds() -> float:
    """The last run's Ray start-up: connecting (or starting a cluster) until every actor
    holds its model; the rest of the parse stage is the work."""
    return float(_last_run["start_seconds"])


def prepare(
    config: Config,
    todo: list[tuple[str, str]],
    embed: EmbedSpec | None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[Batch]:
    """`pipeline.workers.prepare` on Ray: the batches of `todo` in order, computed by a pool
    of actors. Nothing to do starts no cluster."""
    import time

    from kernel.version import __version__

    _last_run.update(actors=0, start_seconds=0.0)
    if not todo:
        return
    spec = Spec(str(config.root), config.chunk_max_tokens, config.chunk_overlap_tokens, embed)
    batches = batches_of(todo)
    started = time.perf_counter()
    ray = _start(config)
    try:
        import ray.exceptions

        actors = _pool(ray, config, spec, len(batches))
        versions = set(ray.get([actor.ready.remote() for actor in actors]))
        if versions != {__version__}:
            raise WorkerDied(
                f"the Ray workers run mdvdb {', '.join(sorted(versions))}, this is "
                f"{__version__}: install the same version on every node"
            )
        _last_run["start_seconds"] = time.perf_counter() - started
        yield from _stream(ray, config, actors, batches, progress)
    except ray.exceptions.RayError as exc:
        raise WorkerDied(
            f"a Ray worker failed ({type(exc).__name__}) after {RETRIES} retries; the previous "
            "index is intact and the batches done are kept for the next run"
        ) from None
    finally:
        ray.shutdown()


def _start(config: Config):
    """`ray`, connected to the cluster of MDVDB_EXECUTOR (or to one started for the run)."""
    _quiet_ray()
    import logging

    import ray

    from pipeline.workers import worker_count

    address = address_of(config)
    options = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.ERROR,
        "configure_logging": True,
    }
    try:
        if address is None:
            local = {"num_cpus": worker_count(config), **options}
            local["object_store_memory"] = LOCAL_OBJECT_STORE_BYTES
            try:
                ray.init(address="local", **local)
            except Exception:  # noqa: BLE001 - Ray gives its raylet 30 s, fixed: once more
                ray.shutdown()
                ray.init(address="local", **local)
        else:
            _token_auth()
            ray.init(address=address, **options)
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds; each is one line here
        ray.shutdown()
        where = "a local Ray cluster" if address is None else f"the Ray cluster at {address}"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExecutorUnavailable(
            f"cannot start {where}: {first}; the previous index is intact"
        ) from None
    return ray


def _pool(ray, config: Config, spec: Spec, batches: int) -> list:
    """One actor per CPU of the cluster (or MDVDB_WORKERS), never more than batches."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    size = max(1, min(config.workers or cpus, batches))
    _last_run["actors"] = size
    actor = ray.remote(Preparer).options(num_cpus=1, max_restarts=RETRIES, max_task_retries=RETRIES)
    return [actor.remote(spec, os.environ.get(EXIT_HOOK, "")) for _ in range(size)]


def _stream(
    ray,
    config: Config,
    actors: list,
    batches: list[list[tuple[str, str]]],
    progress: Callable[[int], None] | None,
) -> Iterator[Batch]:
    """Keep every actor busy, hand results back in order, refill before each is written."""
    from collections import deque

    ship = files_mode(config) == "bytes"
    queued = [0] * len(actors)
    pending: deque = deque()
    todo = iter(batches)
    done = 0

    def submit(items: list[tuple[str, str]]) -> None:
        contents = [read_file(spec_root, path) for path, _ in items] if ship else None
        n = min(range(len(actors)), key=queued.__getitem__)  # the least busy actor
        queued[n] += 1
        pending.append((actors[n].prepare.remote(items, contents), n, len(items)))

    spec_root = str(config.root)
    for items in todo:
        submit(items)
        if len(pending) >= len(actors) * IN_FLIGHT_PER_ACTOR:
            break
    while pending:
        ref, n, size = pending.popleft()
        batch = ray.get(ref)
        queued[n] -= 1
        for items in todo:  # refill before writing, so the actors never wait
            submit(items)
            break
        yield batch
        done += size
        if progress:
            progress(done)


def _quiet_ray() -> None:
    """No usage statistics, no prompts: set before `import ray` reads them."""
    for name, value in (
        ("RAY_USAGE_STATS_ENABLED", "0"),
        ("RAY_USAGE_STATS_PROMPT_ENABLED", "0"),
        ("RAY_DISABLE_IMPORT_WARNING", "1"),
        ("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):
        os.environ.setdefault(name, value)


def _token_auth() -> None:
    """Ray turns token authentication on by itself for a cluster it starts when the user has
    a token (`ray get-auth-token --generate`, ~/.ray/auth_token), but a driver given an
    address sends none unless RAY_AUTH_MODE says so: say so when a token is there."""
    from pathlib import Path

    if "RAY_AUTH_MODE" in os.environ:
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(path):
        os.environ["RAY_AUTH_MODE"] = "token"


__all__ = ["check", "prepare", "processes_for"]
