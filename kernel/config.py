"""Configuration: shell environment > `.markdownvdb` (dotenv style) > built-in defaults.

Every setting is declared once in `SETTINGS`; a bad value is a `ConfigError` naming the
variable and its origin. Imported on every CLI call, so it imports nothing heavy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kernel import dotenv
from kernel.dotenv import CONFIG_FILE, parse_dotenv

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing on every CLI call
if TYPE_CHECKING:
    from typing import Any

# A file of this name in the project root switches search off without uninstalling anything.
OFF_FILE = ".mdvdb-off"
# Optional frontmatter schema overlay at the project root (documentation, never enforced).
SCHEMA_OVERLAY_FILE = ".markdownvdb.schema.yml"
PROVIDERS = ("local", "openai", "ollama", "custom")
SEARCH_MODES = ("hybrid", "semantic", "lexical")
# Results of a search and matches of a grep when nobody says how many, on every front end
# (MDVDB_SEARCH_DEFAULT_LIMIT overrides it for search).
DEFAULT_LIMIT = 10

# The longest a request may wait for an answer, and the most shards an index may have.
MAX_TIMEOUT = 600.0
MAX_SHARDS = 1024

# Per-provider defaults for model and dimensions (the spec's defaults for openai).
PROVIDER_DEFAULTS: dict[str, tuple[str, int]] = {
    "local": ("wordllama-l2-supercat", 256),
    "openai": ("text-embedding-3-small", 1536),
    "ollama": ("nomic-embed-text", 768),
    "custom": ("default", 0),  # 0: take the dimension the endpoint returns on first call
}
# Opt-in local transformer encoders (kernel/providers/minilm.py) under provider=local; any
# other non-WordLlama model is a BERT-style model folder (dimensions 0: the model's own).
LOCAL_ENCODERS: dict[str, int] = {"all-minilm-l6-v2": 384}


def local_model_is_encoder(model: str | None) -> bool:
    """provider=local runs WordLlama for wordllama-* models, else the transformer encoder."""
    return bool(model) and not str(model).lower().startswith("wordllama")


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the variable and its origin."""


def _shown(raw: str) -> str:
    """A value as an error line shows it: a folder's 5,000-digit number is not echoed."""
    raw = raw.strip()
    return repr(raw) if len(raw) <= 40 else f"a value of {len(raw)} characters"


@dataclass(frozen=True)
class Number:
    """A numeric setting's parser and its range (docs/security.md, "Every input bounded").
    `above`: `low` itself is refused (a duration must be more than 0)."""

    kind: type  # int or float
    low: float
    high: float
    above: bool = False

    def __call__(self, raw: str) -> Any:
        text = raw.strip()
        word = "an integer" if self.kind is int else "a number"
        if len(text) > 40:  # no number in range is this long; int() of 5,000 digits would
            # tell the user to call sys.set_int_max_str_digits()
            raise ValueError(f"expected {word} {self.bounds()}, got {_shown(raw)}")
        try:
            value = self.kind(text)
        except ValueError:
            raise ValueError(f"expected {word}, got {_shown(raw)}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"expected a finite number, got {_shown(raw)}")
        if value < self.low or value > self.high or (self.above and value == self.low):
            raise ValueError(f"must be {self.bounds()}, got {_shown(raw)}")
        return value

    def bounds(self) -> str:
        low, high = (
            f"{v:g}" if self.kind is float else f"{int(v):,}" for v in (self.low, self.high)
        )
        if self.above:
            return f"more than {low} and at most {high}"
        return f"between {low} and {high}"


def _int(low: int, high: int) -> Number:
    return Number(int, low, high)


def _float(low: float, high: float) -> Number:
    return Number(float, low, high)


def _seconds(high: float) -> Number:
    """A duration in seconds: more than 0, at most `high`."""
    return Number(float, 0.0, high, above=True)


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _list(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


# Linux's PATH_MAX and NAME_MAX: a longer path is refused before any work.
MAX_PATH_CHARS = 4096
MAX_NAME_CHARS = 255


def _path(raw: str) -> str:
    """A relative or absolute path; no NUL, at most PATH_MAX long, each part at most
    NAME_MAX."""
    value = raw.strip()
    if "\x00" in value:
        raise ValueError("a path with a NUL character")
    if len(value) > MAX_PATH_CHARS:
        raise ValueError(f"a path of {len(value)} characters (the limit is {MAX_PATH_CHARS})")
    longest = max((len(part) for part in value.split("/")), default=0)
    if longest > MAX_NAME_CHARS:
        raise ValueError(f"a path part of {longest} characters (the limit is {MAX_NAME_CHARS})")
    return value


def _paths(raw: str) -> list[str]:
    return [_path(part) for part in _list(raw)]


def _weights(raw: str) -> dict[str, float]:
    """`label=number` pairs separated by commas, e.g. `high=1.1,low=0.9`."""
    weights: dict[str, float] = {}
    for part in _list(raw):
        label, sep, number = part.partition("=")
        if not sep or not label.strip():
            raise ValueError(f"expected label=number pairs, got {part!r}")
        try:
            weight = Number(float, 0.0, 100.0, above=True)(number)
        except ValueError as exc:
            raise ValueError(f"weight for {label.strip()!r}: {exc}") from None
        weights[label.strip().lower()] = weight
    return weights


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def _str(raw: str) -> str:
    return raw.strip()


def _app_name(raw: str) -> str:
    """A Serve application's name: letters, digits, `-`, `_` and `.`."""
    name = raw.strip()
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ValueError(f"expected a name of letters, digits, -, _ or ., got {raw!r}")
    return name


@dataclass(frozen=True)
class NamedSource:
    """A source folder with its name and an optional description (MDVDB_SOURCES); an entry of
    MDVDB_SOURCE_DIRS is named by its folder (`docs/`: `docs`), with no description."""

    name: str
    path: str  # as configured, relative to the root or absolute
    description: str = ""


def source_id(raw: str) -> str:
    """A source folder's name when the user gives none: its path as configured, without
    `./` or a trailing slash (`./docs/` -> `docs`; the root -> `.`)."""
    cleaned = raw.strip().replace("\\", "/").rstrip("/")
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    return cleaned or "."


def _sources(raw: str) -> tuple[NamedSource, ...]:
    """`NAME:PATH[:DESCRIPTION]` entries separated by commas (`\\,` is a comma inside a
    description): `docs:docs:Product documentation,notes:notes:My notes`."""
    out: list[NamedSource] = []
    for entry in _escaped_split(raw):
        name, sep, rest = entry.partition(":")
        path, _, description = rest.partition(":")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ValueError(f"expected NAME:PATH[:DESCRIPTION], got {_shown(entry)}")
        if not all(c.isalnum() or c in "_.-" for c in name) or len(name) > 64:
            raise ValueError(f"a source name is letters, digits, _ . - (64 at most), got {name!r}")
        if any(s.name.casefold() == name.casefold() for s in out):
            raise ValueError(f"the source name {name!r} is given twice")
        out.append(NamedSource(name, _path(path), description.strip()))
    if not out:
        raise ValueError("no source given")
    return tuple(out)


def _escaped_split(raw: str) -> list[str]:
    """Comma-separated parts, `\\,` kept as a comma; blank parts dropped."""
    parts, current, chars = [], [], iter(raw)
    for ch in chars:
        if ch == "\\":
            current.append(next(chars, "\\"))
        elif ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _half_life(raw: str) -> float:
    """A recency half-life in seconds (`90d`); `off`: no decay (kernel.dates)."""
    from kernel.dates import DateError, half_life

    try:
        return half_life(raw)
    except DateError as exc:
        raise ValueError(str(exc)) from None


def _executor(raw: str) -> str:
    """local, ray (a Ray cluster started for the run) or ray:ADDRESS (an existing one)."""
    kind, colon, address = raw.strip().partition(":")
    if kind.lower() in ("local", "ray") and not colon:
        return kind.lower()
    if kind.lower() == "ray" and address.strip():
        return f"ray:{address.strip()}"
    raise ValueError(f"expected local, ray or ray:ADDRESS, got {raw!r}")


@dataclass(frozen=True)
class Setting:
    """One setting: its environment variable, Config attribute, parser, default and help."""

    env: str
    attr: str
    parse: Callable[[str], Any]
    default: str | None  # raw default, parsed like a user value; None = unset
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting("MDVDB_SOURCE_DIRS", "source_dirs", _paths, ".", "Comma-separated folders to index"),
    Setting(
        "MDVDB_SOURCES",
        "sources",
        _sources,
        None,
        "Named source folders instead of MDVDB_SOURCE_DIRS: NAME:PATH[:DESCRIPTION],... "
        "(`docs:docs:Product documentation,notes:notes`); search results carry the name",
    ),
    Setting("MDVDB_INDEX_FILE", "index_file", _path, dotenv.DEFAULT_INDEX_FILE, "The index file"),
    Setting(
        "MDVDB_STATE_DIR",
        "state_dir",
        _path,
        ".markdownvdb.state",
        "Caches and the doit DB (deleting it only costs a rebuild)",
    ),
    Setting("MDVDB_IGNORE_PATTERNS", "ignore_patterns", _list, "", "Extra gitignore-style globs"),
    Setting(
        "MDVDB_FOLLOW_SYMLINKS_OUTSIDE_ROOT",
        "follow_outside_root",
        _bool,
        "false",
        "Allow symlinks that point outside the project root",
    ),
    # Indexing costs ~36 bytes of memory per byte of a file (docs/security.md, "Round two").
    Setting(
        "MDVDB_MAX_FILE_BYTES",
        "max_file_bytes",
        _int(1, 1 << 30),
        str(10 << 20),
        "Bigger source files are reported and skipped by ingest",
    ),
    Setting(
        "MDVDB_EMBEDDING_PROVIDER",
        "embedding_provider",
        _choice(*PROVIDERS),
        "local",
        "local | openai | ollama | custom",
    ),
    Setting(
        "MDVDB_EMBEDDING_MODEL",
        "embedding_model",
        _str,
        None,
        "Model name; with provider=local: wordllama-l2-supercat, all-minilm-l6-v2 or a folder",
    ),
    Setting(
        "MDVDB_EMBEDDING_DIMENSIONS", "embedding_dimensions", _int(0, 65_536), None, "Vector size"
    ),
    Setting(
        "MDVDB_EMBEDDING_BATCH_SIZE", "embedding_batch_size", _int(1, 4096), "64", "Texts a request"
    ),
    Setting(
        "MDVDB_EMBEDDING_CONCURRENCY",
        "embedding_concurrency",
        _int(1, 64),
        "4",
        "Batches in flight at once (remote providers)",
    ),
    Setting(
        "MDVDB_EMBEDDING_TIMEOUT",
        "embedding_timeout",
        _seconds(MAX_TIMEOUT),
        "60",
        "Seconds before a retry",
    ),
    Setting(
        "MDVDB_EMBEDDING_MAX_RETRIES", "embedding_max_retries", _int(0, 20), "5", "Retries a batch"
    ),
    Setting(
        "MDVDB_EMBEDDING_RETRY_DELAY",
        "embedding_retry_delay",
        _float(0.0, 60.0),
        "0.5",
        "Seconds before the first retry (doubles each retry, with jitter)",
    ),
    Setting(
        "MDVDB_EMBEDDING_RETRY_MAX_DELAY",
        "embedding_retry_max_delay",
        _float(0.0, MAX_TIMEOUT),
        "30",
        "Longest wait between retries unless the server's Retry-After asks for more",
    ),
    Setting(
        "MDVDB_EMBEDDING_MAX_INPUT_TOKENS",
        "embedding_max_input_tokens",
        _int(0, 1_048_576),
        "0",
        "Longest text the model takes; longer ones are split (0: the provider's default)",
    ),
    Setting(
        "MDVDB_EMBEDDING_ENDPOINT", "embedding_endpoint", _str, None, "URL for provider=custom"
    ),
    Setting(
        "MDVDB_WORKERS",
        "workers",
        _int(0, 256),
        "0",
        "Processes that parse, chunk and embed an ingest (0: one per CPU; 1: no pool)",
    ),
    Setting(
        "MDVDB_EXECUTOR",
        "executor",
        _executor,
        "local",
        "Where an ingest parses, chunks and embeds: local | ray | ray:ADDRESS (docs/scale-out.md)",
    ),
    Setting(
        "MDVDB_EXECUTOR_FILES",
        "executor_files",
        _choice("auto", "paths", "bytes"),
        "auto",
        "How Ray workers get the Markdown: paths (a shared filesystem) | bytes (in the task); "
        "auto: paths on a cluster started for the run, bytes on ray:ADDRESS",
    ),
    # The static model's index is published first, the contextual one follows (docs/upgrade.md).
    Setting(
        "MDVDB_UPGRADE_SECONDS",
        "upgrade_seconds",
        _float(0.0, 86_400.0),
        "30",
        "Seconds an ingest spends embedding for a contextual model while the static model's "
        "index serves (checked a batch at a time; 0: embed everything before publishing)",
    ),
    Setting("MDVDB_CHUNK_MAX_TOKENS", "chunk_max_tokens", _int(16, 8192), "512", "Tokens a chunk"),
    Setting(
        "MDVDB_SHARDS",
        "shards",
        _int(1, MAX_SHARDS),
        "1",
        "Index shard files, split by a hash of the path (1: one index file; docs/scale-out.md)",
    ),
    Setting(
        "MDVDB_RAY_SERVE",
        "ray_serve",
        _str,
        "",
        "Ray address (auto, HOST:PORT, ray://HOST:PORT) where `mdvdb serve --ray` deployed "
        "this index's shard groups: a reader sends its per-shard work there (docs/scale-out.md)",
    ),
    Setting(
        "MDVDB_RAY_SERVE_APP",
        "ray_serve_app",
        _app_name,
        "mdvdb",
        "The Serve application of `mdvdb serve --ray` (one per index on a cluster)",
    ),
    Setting(
        "MDVDB_CHUNK_OVERLAP_TOKENS", "chunk_overlap_tokens", _int(0, 8191), "50", "Window overlap"
    ),
    Setting(
        "MDVDB_SEARCH_DEFAULT_LIMIT",
        "search_default_limit",
        _int(1, 1000),
        str(DEFAULT_LIMIT),
        "Results",
    ),
    Setting(
        "MDVDB_SEARCH_MIN_SCORE",
        "search_min_score",
        _float(-1000.0, 1000.0),
        "0.0",
        "Minimum score",
    ),
    Setting(
        "MDVDB_SEARCH_MIN_CONFIDENCE",
        "search_min_confidence",
        _float(0.0, 1.0),
        "0.0",
        "Leave out results whose confidence (the estimated chance they are relevant) is lower",
    ),
    Setting(
        "MDVDB_SEARCH_PER_FILE",
        "search_per_file",
        _int(0, 1000),
        "3",
        "Most sections of one file in one answer (0: no cap)",
    ),
    Setting(
        "MDVDB_SEARCH_DEFAULT_MODE",
        "search_default_mode",
        _choice(*SEARCH_MODES),
        "hybrid",
        " | ".join(SEARCH_MODES),
    ),
    Setting(
        "MDVDB_SEARCH_DECAY",
        "search_decay",
        _half_life,
        "off",
        "Recency half-life of search scores (`90d`: a page 90 days old scores half); off = none",
    ),
    Setting(
        "MDVDB_SEARCH_FIRST_PASS",
        "search_first_pass",
        _choice("auto", "ivf", "int8", "exact"),
        "auto",
        "The dense first pass: auto (warm: the IVF lists when the index has them, else "
        "int8 from 20k chunks) | ivf | int8 (every row) | exact; each rescored exactly "
        "(semantic mode reads int8 where the lists would probe)",
    ),
    Setting(
        "MDVDB_SEARCH_THREADS",
        "search_threads",
        _int(0, 256),
        "0",
        "Threads a search splits its long passes over (IVF int8 products, fusion, top-k): "
        "0 = one per core this process may run on (a one-shot CLI search: 1); 1 = the "
        "calling thread alone; N = N",
    ),
    Setting(
        "MDVDB_IVF_MIN_CHUNKS",
        "ivf_min_chunks",
        _int(1, 1_000_000_000),
        "50000",
        "Chunks from which ingest stores IVF lists for a sub-linear first pass",
    ),
    Setting("MDVDB_WATCH", "watch", _bool, "true", "Allow the watcher"),
    Setting(
        "MDVDB_WATCH_DEBOUNCE_MS", "watch_debounce_ms", _int(0, 60_000), "300", "Debounce (ms)"
    ),
    Setting("MDVDB_CLUSTERING_ENABLED", "clustering_enabled", _bool, "true", "Build clusters"),
    Setting(
        "MDVDB_CLUSTERING_REBALANCE_THRESHOLD",
        "clustering_rebalance_threshold",
        _int(1, 1_000_000_000),
        "50",
        "Changed documents before a full re-clustering",
    ),
    Setting(
        "MDVDB_CLUSTERING_REBALANCE_SHARE",
        "clustering_rebalance_share",
        _float(0.0, 1.0),
        "0.05",
        "Share of the documents changed before a full re-clustering (the larger count wins)",
    ),
    Setting(
        "MDVDB_CLUSTERING_MAX_CLUSTERS",
        "clustering_max_clusters",
        _int(2, 1000),
        "50",
        "Upper bound on the number of clusters",
    ),
    Setting(
        "MDVDB_GOVERN",
        "govern",
        _choice("auto", "on", "off"),
        "auto",
        "Governed ranking: auto = on when pages carry the confidence/updated fields",
    ),
    Setting(
        "MDVDB_GOVERN_CONFIDENCE_FIELD",
        "govern_confidence_field",
        _str,
        "confidence",
        "Frontmatter field holding a page's confidence label",
    ),
    Setting(
        "MDVDB_GOVERN_UPDATED_FIELD",
        "govern_updated_field",
        _str,
        "updated",
        "Frontmatter date that breaks ties (newer first)",
    ),
    Setting(
        "MDVDB_GOVERN_WEIGHTS",
        "govern_weights",
        _weights,
        "authoritative=1.2,high=1.1,medium=1.0,low=0.9,very-low=0.8",
        "Score factor for each confidence label (others: 1.0)",
    ),
    Setting(
        "MDVDB_SERVE_IDLE_TIMEOUT",
        "serve_idle_timeout",
        _seconds(7 * 86_400),
        "600",
        "Seconds without a request before `mdvdb serve` exits",
    ),
    Setting("MDVDB_TAG_FIELD", "tag_field", _str, "tags", "Frontmatter field behind --tag"),
    Setting("MDVDB_CATEGORY_FIELD", "category_field", _str, "category", "Field behind --category"),
    Setting(
        "MDVDB_BLACKLISTED_SOURCES",
        "blacklisted_sources",
        _list,
        "",
        "TYPE:ID roots that `mdvdb grep --exclude-blacklisted` leaves out",
    ),
    Setting(
        "MDVDB_PAGE_ID_FIELD",
        "page_id_field",
        _str,
        "page_id",
        "Frontmatter field holding a page id (shown by `mdvdb grep`)",
    ),
)

SETTINGS_BY_ENV = {s.env: s for s in SETTINGS}
# Secrets are read with `Config.env`, never declared as settings that a listing could show.
SECRETS = ("MDVDB_EMBEDDING_API_KEY",)
# Decisions a folder must not make about itself: never read from its `.markdownvdb`
# (docs/security.md, "Who is trusted").
TRUSTED_FOLDERS = "MDVDB_TRUSTED_FOLDERS"
USER_ONLY = (TRUSTED_FOLDERS,)
# Variables naming a URL that an API key from the environment is sent to, with that key.
ENDPOINT_KEYS = {
    "OPENAI_BASE_URL": "OPENAI_API_KEY",
    "MDVDB_EMBEDDING_ENDPOINT": "MDVDB_EMBEDDING_API_KEY",
}


def unknown_keys(config: Config) -> list[tuple[str, str | None]]:
    """MDVDB_* keys of the config file that are no setting, each with the closest setting
    name (or None)."""
    names = [k for k in config.extra if k.startswith("MDVDB_") and k not in SECRETS]
    if not names:
        return []
    import difflib

    # Compare what follows the shared prefix, or every key looks alike.
    known = {k.removeprefix("MDVDB_"): k for k in [*SETTINGS_BY_ENV, *SECRETS]}
    out = []
    for key in names:
        close = difflib.get_close_matches(key.removeprefix("MDVDB_"), known, n=1, cutoff=0.75)
        out.append((key, known[close[0]] if close else None))
    return out


def find_root(start: Path | None = None) -> Path:
    """The nearest project folder upward, else the starting folder (`kernel.dotenv.find_root`)."""
    return Path(dotenv.find_root(str(start or Path.cwd())))


@dataclass(eq=False, repr=False)
class Config:
    """A project's resolved settings (`load_config`): defaults, `.markdownvdb`, environment."""

    root: Path
    source_dirs: list[str] = field(default_factory=lambda: ["."])
    sources: tuple[NamedSource, ...] = ()  # MDVDB_SOURCES; then source_dirs are their paths
    index_file: str = dotenv.DEFAULT_INDEX_FILE
    state_dir: str = ".markdownvdb.state"
    ignore_patterns: list[str] = field(default_factory=list)
    follow_outside_root: bool = False
    max_file_bytes: int = 10 << 20
    embedding_provider: str = "local"
    embedding_model: str | None = None
    embedding_dimensions: int | None = None
    embedding_batch_size: int = 64
    embedding_concurrency: int = 4
    embedding_timeout: float = 60.0
    embedding_max_retries: int = 5
    embedding_retry_delay: float = 0.5
    embedding_retry_max_delay: float = 30.0
    embedding_max_input_tokens: int = 0
    embedding_endpoint: str | None = None
    workers: int = 0  # 0: one per CPU (pipeline.workers.worker_count)
    executor: str = "local"  # local | ray | ray:ADDRESS (pipeline/ray_executor.py)
    executor_files: str = "auto"  # auto | paths | bytes
    upgrade_seconds: float = 30.0  # 0: no static index first (pipeline.upgrade)
    chunk_max_tokens: int = 512
    chunk_overlap_tokens: int = 50
    shards: int = 1
    ray_serve: str = ""  # a Ray address; empty: shards in this process
    ray_serve_app: str = "mdvdb"
    search_default_limit: int = DEFAULT_LIMIT
    search_min_score: float = 0.0
    search_min_confidence: float = 0.0
    search_per_file: int = 3
    search_default_mode: str = "hybrid"
    search_decay: float = 0.0  # half-life in seconds; 0: off
    search_first_pass: str = "auto"
    search_threads: int = 0
    ivf_min_chunks: int = 50_000
    watch: bool = True
    watch_debounce_ms: int = 300
    clustering_enabled: bool = True
    clustering_rebalance_threshold: int = 50
    clustering_rebalance_share: float = 0.05
    clustering_max_clusters: int = 50
    govern: str = "auto"
    govern_confidence_field: str = "confidence"
    govern_updated_field: str = "updated"
    govern_weights: dict[str, float] = field(default_factory=dict)
    serve_idle_timeout: float = 600.0
    tag_field: str = "tags"
    category_field: str = "category"
    blacklisted_sources: list[str] = field(default_factory=list)
    page_id_field: str = "page_id"
    origins: dict[str, str] = field(default_factory=dict)
    # Other variables from the environment and the config file (API keys, hosts): never
    # written anywhere. `extra_origins`: where each came from.
    extra: dict[str, str] = field(default_factory=dict, repr=False)
    extra_origins: dict[str, str] = field(default_factory=dict, repr=False)
    # MDVDB_TRUSTED_FOLDERS names this folder: its `.markdownvdb` is the user's own.
    trusted: bool = False

    @property
    def index_path(self) -> Path:
        """The index, its folder resolved but not its own name: a symlink at that name is
        replaced by the writer, never written through."""
        path = self.root / self.index_file
        return path.parent.resolve() / path.name

    @property
    def shards_path(self) -> Path:
        """The folder of a sharded index (`MDVDB_SHARDS` > 1, kernel/shards.py)."""
        return self.index_path.parent / (self.index_path.name + ".shards")

    @property
    def state_path(self) -> Path:
        return (self.root / self.state_dir).resolve()

    @property
    def switched_off(self) -> bool:
        return (self.root / OFF_FILE).exists()

    def source_paths(self) -> list[Path]:
        return [(self.root / d).resolve() for d in self.source_dirs]

    def named_sources(self) -> list[NamedSource]:
        """Each source folder with its name, in the order of `source_dirs`."""
        if self.sources:
            return list(self.sources)
        return [NamedSource(source_id(raw), raw) for raw in self.source_dirs]

    def env(self, name: str, default: str | None = None) -> str | None:
        """A non-MDVDB variable (OPENAI_API_KEY, OLLAMA_HOST...), environment first."""
        return self.extra.get(name, default)

    def origin(self, name: str) -> str:
        """Where a setting or an extra variable came from."""
        return self.origins.get(name) or self.extra_origins.get(name) or "the default"

    def from_folder(self, name: str) -> bool:
        """The value of `name` was set by the project's `.markdownvdb` (not by the user)."""
        return self.origin(name) == str(self.root / CONFIG_FILE)

    def endpoint_key(self, url_var: str, provider: str) -> str | None:
        """The API key to send to the URL `url_var` names: credentials follow the user, not
        the folder (docs/security.md, "Credentials follow the user, not the folder")."""
        key_var = ENDPOINT_KEYS[url_var]
        key = self.env(key_var)
        if not key or self.trusted or not self.from_folder(url_var) or self.from_folder(key_var):
            return key
        raise ConfigError(
            f"{provider}: {url_var} comes from {self.root / CONFIG_FILE} but {key_var} from "
            f"{self.origin(key_var)}; refusing to send your key to a URL the folder chose "
            f"(set {url_var} in your environment, or trust the folder: "
            f"{TRUSTED_FOLDERS}={self.root})"
        )

    def fingerprint(self) -> dict[str, Any]:
        """The settings that decide what the index holds; secrets never appear here."""
        return {
            "provider": self.embedding_provider,
            "model": self.embedding_model,
            "dimensions": self.embedding_dimensions,
            "chunk_max_tokens": self.chunk_max_tokens,
            "chunk_overlap_tokens": self.chunk_overlap_tokens,
        }


def load_config(root: Path | str | None = None, environ: dict[str, str] | None = None) -> Config:
    """Resolve every setting; raise ConfigError naming the first bad one."""
    root_path = Path(root).resolve() if root is not None else find_root()
    env = dict(os.environ if environ is None else environ)
    file_values: dict[str, str] = {}
    config_path = root_path / CONFIG_FILE
    trusted = folder_is_trusted(root_path, env)
    if os.path.lexists(config_path):
        if not trusted:
            _check_owner(config_path, root_path)
        try:
            text = dotenv.read_file(config_path)  # never a link, a FIFO or unbounded
        except OSError as exc:
            raise ConfigError(
                f"{config_path}: cannot read configuration ({exc.strerror or exc})"
            ) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{config_path}: cannot read configuration ({exc})") from None
        file_values = parse_dotenv(text or "")
        for name in USER_ONLY:
            file_values.pop(name, None)

    config = Config(root=root_path, trusted=trusted)
    for setting in SETTINGS:
        if setting.env in env:
            raw, origin = env[setting.env], "the environment"
        elif setting.env in file_values:
            raw, origin = file_values[setting.env], str(config_path)
        elif setting.default is not None:
            raw, origin = setting.default, "the default"
        else:
            continue
        try:
            value = setting.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{setting.env} (from {origin}): {exc}") from None
        setattr(config, setting.attr, value)
        config.origins[setting.env] = origin

    for key, value in file_values.items():
        if key not in SETTINGS_BY_ENV:
            config.extra[key] = value
            config.extra_origins[key] = str(config_path)
    for key, value in env.items():
        if key not in SETTINGS_BY_ENV and (not key.startswith("MDVDB_") or key in SECRETS):
            config.extra[key] = value
            config.extra_origins[key] = "the environment"

    _apply_provider_defaults(config)
    _named_sources(config)
    _validate(config)
    return config


_RANK = {"the environment": 2, "the default": 0}


def _named_sources(config: Config) -> None:
    """MDVDB_SOURCES names the source folders: it replaces MDVDB_SOURCE_DIRS, the one set
    closer to the user (environment > file) winning; both in one place is an error."""
    if not config.sources:
        return
    named, dirs = (config.origin(k) for k in ("MDVDB_SOURCES", "MDVDB_SOURCE_DIRS"))
    named_rank, dirs_rank = (_RANK.get(o, 1) for o in (named, dirs))
    if dirs_rank > named_rank:
        config.sources = ()
        return
    if dirs_rank == named_rank:
        raise ConfigError(
            f"MDVDB_SOURCES and MDVDB_SOURCE_DIRS are both set (from {named}); keep one "
            "(MDVDB_SOURCES names the folders: NAME:PATH[:DESCRIPTION])"
        )
    config.source_dirs = [s.path for s in config.sources]
    config.origins["MDVDB_SOURCE_DIRS"] = named


def user_config_path(env: dict[str, str] | None = None) -> Path:
    """The user's own settings file (`$XDG_CONFIG_HOME/mdvdb/config`, else
    `~/.config/mdvdb/config`); only `MDVDB_TRUSTED_FOLDERS` is read from it."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "mdvdb" / "config"


def trusted_folders(env: dict[str, str] | None = None) -> list[str]:
    """MDVDB_TRUSTED_FOLDERS from the environment, else from the user config file (only when
    the user owns that file). `os.pathsep`-separated absolute paths; `*` trusts every folder."""
    env = os.environ if env is None else env
    raw = env.get(TRUSTED_FOLDERS)
    if raw is None:
        path = user_config_path(env)
        try:
            if path.stat().st_uid in _trusted_uids():
                raw = parse_dotenv(_read_user_config(path)).get(TRUSTED_FOLDERS)
        except (OSError, UnicodeDecodeError):
            raw = None
    return [part.strip() for part in (raw or "").split(os.pathsep) if part.strip()]


def _read_user_config(path: Path) -> str:
    """The user's config file: yours, so a link is followed (a dotfiles manager), but never
    a FIFO or a device, and at most 1 MiB."""
    from kernel.safe_open import OWN_FILE_LIMIT, open_regular, read_bounded

    return read_bounded(open_regular(path, follow=True), OWN_FILE_LIMIT, "not read").decode(
        "utf-8-sig"
    )


def folder_is_trusted(root: Path, env: dict[str, str] | None = None) -> bool:
    for entry in trusted_folders(env):
        if entry == "*":
            return True
        try:
            if Path(os.path.expanduser(entry)).resolve() == root:
                return True
        except OSError:
            continue
    return False


def _trusted_uids() -> set[int]:
    """The current user, root (who can replace mdvdb itself anyway), and under sudo the user
    who ran sudo, as git's safe.directory check does."""
    getuid = getattr(os, "geteuid", None)
    if getuid is None:
        return set()
    uids = {getuid(), 0}
    sudo_uid = os.environ.get("SUDO_UID", "")
    if getuid() == 0 and sudo_uid.isdigit():
        uids.add(int(sudo_uid))
    return uids


def _check_owner(config_path: Path, root: Path) -> None:
    """A `.markdownvdb` owned by another user is not read (it could point the index, the
    caches and the user's API keys anywhere), unless the user trusts the folder."""
    uids = _trusted_uids()
    if not uids:
        return
    try:
        owners = {os.lstat(config_path).st_uid, os.stat(config_path).st_uid}
    except OSError:
        return
    strangers = owners - uids
    if strangers:
        raise ConfigError(
            f"{config_path} is owned by another user (uid {min(strangers)}); not using it. "
            f"If you trust that folder: export {TRUSTED_FOLDERS}={root} (or put that line in "
            f"{user_config_path()})"
        )


def _apply_provider_defaults(config: Config) -> None:
    model, dims = PROVIDER_DEFAULTS[config.embedding_provider]
    if config.embedding_model is None or config.embedding_model == "":
        config.embedding_model = model
    if config.embedding_dimensions is None:
        config.embedding_dimensions = dims
        if config.embedding_provider == "local" and local_model_is_encoder(config.embedding_model):
            config.embedding_dimensions = LOCAL_ENCODERS.get(config.embedding_model.lower(), 0)


def _validate(config: Config) -> None:
    if config.chunk_overlap_tokens >= config.chunk_max_tokens:
        raise ConfigError(
            f"MDVDB_CHUNK_OVERLAP_TOKENS (from {config.origin('MDVDB_CHUNK_OVERLAP_TOKENS')}): "
            f"{config.chunk_overlap_tokens} must be smaller than MDVDB_CHUNK_MAX_TOKENS "
            f"({config.chunk_max_tokens})"
        )
    if not config.source_dirs:
        raise ConfigError(
            f"MDVDB_SOURCE_DIRS (from {config.origin('MDVDB_SOURCE_DIRS')}): no folder given"
        )
    _validate_paths(config)
    if config.embedding_provider == "custom" and not config.embedding_endpoint:
        raise ConfigError(
            "MDVDB_EMBEDDING_ENDPOINT: required when MDVDB_EMBEDDING_PROVIDER=custom "
            f"(provider from {config.origin('MDVDB_EMBEDDING_PROVIDER')})"
        )
    if (
        config.embedding_provider == "local"
        and not local_model_is_encoder(config.embedding_model)
        and config.embedding_dimensions not in (64, 128, 256)
    ):
        raise ConfigError(
            f"MDVDB_EMBEDDING_DIMENSIONS (from {config.origin('MDVDB_EMBEDDING_DIMENSIONS')}): "
            f"the local model gives 64, 128 or 256 (Matryoshka truncation), "
            f"not {config.embedding_dimensions}"
        )


def _validate_paths(config: Config) -> None:
    """The index and the state folder stay inside the project root unless the user's own
    environment says otherwise (docs/security.md, "Writes stay inside the root")."""
    for env, path, kind in (
        ("MDVDB_INDEX_FILE", config.index_path, "file"),
        ("MDVDB_STATE_DIR", config.state_path, "folder"),
    ):
        origin = config.origin(env)
        chosen = origin == "the environment" or config.trusted
        if not chosen and not path.is_relative_to(config.root):
            raise ConfigError(
                f"{env} (from {origin}): {path} is outside the project root {config.root}; "
                f"only your environment may put it elsewhere (or trust the folder: "
                f"{TRUSTED_FOLDERS}={config.root})"
            )
        if path == config.root:
            raise ConfigError(f"{env} (from {origin}): {path} is the project root itself")
        named = config.root / config.state_dir
        if kind == "folder" and not chosen and os.path.islink(named):  # a real folder only
            raise ConfigError(
                f"{env} (from {origin}): {named} is a symlink; mdvdb keeps its state only in "
                "a real folder (remove the link, or set MDVDB_STATE_DIR in your environment)"
            )
        if kind == "folder" and path.exists() and not path.is_dir():
            raise ConfigError(f"{env} (from {origin}): {path} exists and is not a folder")
        if kind == "file" and path.is_dir():
            raise ConfigError(f"{env} (from {origin}): {path} is a folder, not a file")
