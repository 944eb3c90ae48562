"""Parse, chunk and embed an ingest's new files on a Ray cluster (`MDVDB_EXECUTOR=ray[:ADDRESS]`):
the local pool's batches (`pipeline.workers.prepare_batch`) on actors each holding the model
once, the driver keeping the stages, caches, lock and batch order (docs/scale-out.md,
"Running on a Ray cluster"). `ray` is imported only when a run asks for it."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from kernel.lifeline import Guard
from pipeline.workers import (
    Batch,
    EmbedSpec,
    ExecutorUnavailable,
    Spec,
    WorkerDied,
    batches_of,
    in_order,
    prepare_batch,
    read_file,
    spec_of,
)

if TYPE_CHECKING:
    from kernel.config import Config

RETRIES = 2  # restarts of a dead actor, and retries of the batch it held
IN_FLIGHT_PER_ACTOR = 2  # batches queued per actor: one running, one waiting
CONNECT_TIMEOUT = 5.0  # seconds to reach a cluster's address (ray.init would retry a minute)
# Seconds for the first actor to start, then for the others once one is up: a pool asked for
# more CPUs than the cluster has free runs with the actors that started.
START_SECONDS = 300.0
GRACE_SECONDS = 30.0
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024  # a cluster started for the run: small batches
# Tests only: each batch waits in its actor until this file exists (at most HOLD_SECONDS).
HOLD = "MDVDB_TEST_RAY_HOLD"
HOLD_SECONDS = 120.0


@dataclass
class PoolRun:
    """What one run's pool of actors reported, filled by `prepare` for the parse stage."""

    actors: int = 0
    start_seconds: float = 0.0  # connecting (or starting a cluster) until every actor is up
    reports: list[dict] = field(default_factory=list)  # each actor's `ActorReport`, as a dict


@dataclass(frozen=True)
class EncoderEmbed:
    """The transformer encoder an actor loads: the pinned model's name or a model folder's
    absolute path, and the weights' revision the driver's cache key holds."""

    model: str
    dimensions: int
    revision: str


@dataclass(frozen=True)
class PoolPlan:
    """How many actors, and the resources each asks Ray for."""

    actors: int
    num_cpus: float
    num_gpus: float


@dataclass(frozen=True)
class ActorReport:
    """What an actor says once its model is loaded: where it runs and what it holds."""

    node: str
    node_id: str  # Ray's id of the node: several nodes of one machine share its address
    pid: int
    version: str
    model: str  # the model it loaded (a model folder: path@weights digest; "": none)
    num_gpus: float  # what it asked Ray for
    gpu_ids: tuple  # the GPUs Ray gave it
    device: str  # where its model runs: cpu, or the onnxruntime execution provider
    batch_size: int  # texts per model call (the encoder; 0: WordLlama, a table lookup)
    batches: int = 0  # batches this process prepared (a restarted actor starts again at 0)
    texts: int = 0  # chunk texts it embedded


def embed_spec(provider: object) -> EmbedSpec | EncoderEmbed | None:
    """The model the actors load: every local model (a remote provider stays with the embed
    stage)."""
    from pipeline.workers import embed_spec as pool_spec

    spec = pool_spec(provider)
    if spec is not None:
        return spec
    from kernel.providers.minilm import MODEL_NAME, MiniLMProvider

    if type(provider) is not MiniLMProvider:
        return None
    from kernel.providers import encoder_onnx
    from kernel.providers.minilm import warn_slow_runtime

    if not encoder_onnx.available():  # said here: the actors' stderr never reaches the user
        warn_slow_runtime(provider.model)
    named = provider.model.lower() == MODEL_NAME
    return EncoderEmbed(
        provider.model if named else str(provider.folder),
        provider.dimensions,
        provider.revision,
    )


def plan_pool(
    resources: Mapping[str, float], workers: int, batches: int, wants_gpu: bool
) -> PoolPlan:
    """The pool for a cluster's resources: one actor per CPU (or MDVDB_WORKERS), never more
    than batches; for a GPU model on a cluster with GPUs, one per GPU or an even share."""
    gpus = int(resources.get("GPU", 0)) if wants_gpu else 0
    if gpus >= 1:
        size = max(1, min(workers or gpus, batches))
        per_gpu = -(-size // gpus)
        return PoolPlan(size, 1.0, 1.0 / per_gpu)
    cpus = int(resources.get("CPU", 1))
    return PoolPlan(max(1, min(workers or cpus, batches)), 1.0, 0.0)


def execution_providers(gpu_ids: Sequence, available: Sequence[str]) -> tuple[str, ...]:
    """The onnxruntime providers an encoder actor runs on: CUDA first when it has a GPU."""
    if gpu_ids and "CUDAExecutionProvider" in available:
        return ("CUDAExecutionProvider", "CPUExecutionProvider")
    return ("CPUExecutionProvider",)


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
    cluster, and the address answers (else ExecutorUnavailable, nothing written)."""
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

    def __init__(
        self, spec: Spec, encoder: EncoderEmbed | None, batch_size: int, num_gpus: float, hold: str
    ) -> None:
        import ray

        from kernel.version import __version__

        self.spec, self.encoder, self.hold = spec, encoder, hold
        self.batch_size = batch_size if encoder is not None else 0
        gpu_ids = tuple(str(g) for g in ray.get_gpu_ids())
        model, device, self.provider = "", "cpu", None
        if spec.embed is not None:
            from pipeline.workers import _provider

            _provider(spec.embed)  # the model, once per actor
            model = spec.embed.model
        elif encoder is not None:
            self.provider, device = _load_encoder(encoder, gpu_ids)
            model = _model_name(encoder.model, self.provider.revision)
        self.report = ActorReport(
            node=ray.util.get_node_ip_address(),
            node_id=ray.get_runtime_context().get_node_id(),
            pid=os.getpid(),
            version=__version__,
            model=model,
            num_gpus=num_gpus,
            gpu_ids=gpu_ids,
            device=device,
            batch_size=self.batch_size,
        )

    def ready(self) -> dict:
        """This actor's report (the driver refuses another mdvdb version or model)."""
        return asdict(self.report)

    def prepare(self, items: list[tuple[str, str]], contents: list[bytes | str] | None) -> Batch:
        if self.hold:
            _wait_for(self.hold)
        batch = prepare_batch(self.spec, items, contents)
        if self.provider is not None:
            _embed_records(self.provider, self.batch_size, batch)
        self.report = replace(
            self.report,
            batches=self.report.batches + 1,
            texts=self.report.texts + len(batch.vector_shas),
        )
        return batch


def _model_name(model: str, revision: str) -> str:
    """The encoder as an actor reports it: its name, and a model folder's weights digest."""
    return f"{model}@{revision}" if revision else model


def _load_encoder(spec: EncoderEmbed, gpu_ids: tuple):
    """The encoder, once per actor: on a GPU Ray gave it when onnxruntime can use one, its
    threads sized to the actor's CPUs."""
    from kernel.providers import encoder_onnx
    from kernel.providers.minilm import MiniLMProvider, read_spec

    provider = MiniLMProvider(spec.model, spec.dimensions)
    device = "cpu"
    if encoder_onnx.available():
        import onnxruntime as ort

        chosen = execution_providers(gpu_ids, ort.get_available_providers())
        if chosen[0] != "CPUExecutionProvider":
            folder = provider.folder
            graph = encoder_onnx.ensure_graph(folder, read_spec(folder))
            provider.encoder = encoder_onnx.OnnxEncoder(graph, read_spec(folder), providers=chosen)
            device = provider.encoder.session.get_providers()[0]
    encoder = provider.encoder  # loaded now, not by the first batch
    if hasattr(encoder, "workers"):
        encoder.workers = _assigned_cpus()  # the onnx encoder would start one thread per core
    return provider, device


def _assigned_cpus() -> int:
    import ray

    return int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1)) or 1


def _embed_records(provider, batch_size: int, batch: Batch) -> None:
    """Embed the chunk texts of a batch's records and fill its vectors as `prepare_batch`
    does for WordLlama (files with an unusable vector are left to the embed stage)."""
    import json

    import numpy as np

    texts: dict[bytes, str] = {}
    files: list[tuple[str, list[bytes]]] = []
    for sha, data in batch.records:
        mine = []
        for chunk in json.loads(data)["chunks"]:
            key = bytes.fromhex(chunk["sha256"])
            mine.append(key)
            texts.setdefault(key, chunk["embed_text"])
        files.append((sha, mine))
    if not texts:
        return
    strings = list(texts.values())
    step = max(1, batch_size)
    vectors = np.concatenate(
        [provider.embed(strings[i : i + step]) for i in range(0, len(strings), step)]
    )
    batch.add_vectors(list(texts), vectors, files)


def _wait_for(path: str) -> None:
    """Tests only (HOLD): block this batch until `path` exists."""
    import time

    deadline = time.monotonic() + HOLD_SECONDS
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def prepare(
    config: Config,
    todo: list[tuple[str, str]],
    embed: EmbedSpec | EncoderEmbed | None,
    progress: Callable[[int], None] | None = None,
    pool: PoolRun | None = None,
) -> Iterator[Batch]:
    """`pipeline.workers.prepare` on Ray: the batches of `todo` in order, computed by a pool
    of actors (nothing to do starts no cluster); `pool` gets what the actors reported."""
    import time

    pool = pool if pool is not None else PoolRun()
    if not todo:
        return
    encoder = embed if isinstance(embed, EncoderEmbed) else None
    spec = spec_of(config, embed if isinstance(embed, EmbedSpec) else None)
    batches = batches_of(todo)
    started = time.perf_counter()
    # A local cluster started for the run dies with it, SIGKILL included (`Guard`).
    guard = Guard() if address_of(config) is None else None
    try:
        with guard.marking() if guard is not None else nullcontext():
            ray = _start(config)
    except BaseException:
        if guard is not None:
            guard.close()
        raise
    try:
        import ray.exceptions

        actors, reports = _started(ray, _pool(ray, config, spec, encoder, len(batches)))
        pool.actors = len(actors)
        _check_actors(reports, encoder)
        pool.reports = reports
        pool.start_seconds = time.perf_counter() - started
        yield from _stream(ray, config, spec, actors, batches, progress)
        pool.reports = ray.get([actor.ready.remote() for actor in actors])
    except ray.exceptions.RayError as exc:
        raise WorkerDied(
            f"a Ray worker failed ({type(exc).__name__}) after {RETRIES} retries; the previous "
            "index is intact and the batches done are kept for the next run"
        ) from None
    finally:
        ray.shutdown()
        if guard is not None:
            guard.close()


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


def _pool(ray, config: Config, spec: Spec, encoder: EncoderEmbed | None, batches: int) -> list:
    """The actors of `plan_pool` for this cluster, each loading the model once."""
    plan = plan_pool(ray.cluster_resources(), config.workers, batches, encoder is not None)
    actor = ray.remote(Preparer).options(
        num_cpus=plan.num_cpus,
        num_gpus=plan.num_gpus,
        max_restarts=RETRIES,
        max_task_retries=RETRIES,
    )
    hold = os.environ.get(HOLD, "")
    size = config.embedding_batch_size
    return [actor.remote(spec, encoder, size, plan.num_gpus, hold) for _ in range(plan.actors)]


def _started(ray, actors: list) -> tuple[list, list[dict]]:
    """The actors that start within GRACE_SECONDS of the first, and their reports (the rest
    are killed)."""
    refs = [actor.ready.remote() for actor in actors]
    up, waiting = ray.wait(refs, num_returns=1, timeout=START_SECONDS)
    if not up:
        raise WorkerDied(
            f"no Ray worker started within {START_SECONDS:.0f} s (does the cluster have a free "
            "CPU?); the previous index is intact"
        )
    if waiting:
        _, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=GRACE_SECONDS)
    kept = [n for n, ref in enumerate(refs) if ref not in waiting]
    for n in set(range(len(actors))) - set(kept):
        ray.kill(actors[n])
    return [actors[n] for n in kept], ray.get([refs[n] for n in kept])


def _check_actors(reports: list[dict], encoder: EncoderEmbed | None) -> None:
    """Every actor runs this mdvdb and, for a model folder, the driver's weights."""
    from kernel.version import __version__

    versions = {report["version"] for report in reports}
    if versions != {__version__}:
        raise WorkerDied(
            f"the Ray workers run mdvdb {', '.join(sorted(versions))}, this is "
            f"{__version__}: install the same version on every node"
        )
    if encoder is not None:
        expected = _model_name(encoder.model, encoder.revision)
        models = {report["model"] for report in reports}
        if models != {expected}:
            raise WorkerDied(
                f"the Ray workers hold the model {', '.join(sorted(models))}, this run "
                f"{expected}: the same model files on every node"
            )


def _stream(
    ray,
    config: Config,
    spec: Spec,
    actors: list,
    batches: list[list[tuple[str, str]]],
    progress: Callable[[int], None] | None,
) -> Iterator[Batch]:
    """Keep every actor busy (the least busy one gets the next batch), results in order."""
    ship = files_mode(config) == "bytes"
    queued = [0] * len(actors)

    def submit(items: list[tuple[str, str]]) -> tuple:
        contents = [read_file(spec, path) for path, _ in items] if ship else None
        n = min(range(len(actors)), key=queued.__getitem__)
        queued[n] += 1
        return actors[n].prepare.remote(items, contents), n

    def result(handle: tuple) -> Batch:
        ref, n = handle
        batch = ray.get(ref)
        queued[n] -= 1
        return batch

    in_flight = len(actors) * IN_FLIGHT_PER_ACTOR
    return in_order(batches, submit, result, in_flight, progress)


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
    """A driver given an address sends no auth token unless RAY_AUTH_MODE says so: say so
    when the user has a token."""
    from pathlib import Path

    if "RAY_AUTH_MODE" in os.environ:
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(path):
        os.environ["RAY_AUTH_MODE"] = "token"


__all__ = ["PoolRun", "check", "embed_spec", "plan_pool", "prepare"]
