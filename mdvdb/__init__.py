"""Markdown VDB: a filesystem-native vector database and search tool for folders of Markdown.

The library in two calls, the same work as the CLI:

    import mdvdb

    report = mdvdb.ingest("my-notes")          # `mdvdb ingest --root my-notes`
    index = mdvdb.open_index("my-notes")       # search, get_document(s), links, backlinks,
    hits = index.search("rotate an api key")   # orphans, status, schema, clusters, grep;
                                               # each with an a... async form

The errors a call can raise are importable from here too (`mdvdb.ConfigError`...), loaded on
first use: every command imports `mdvdb`.
"""

from __future__ import annotations

from kernel.lazy_exports import lazy_exports
from kernel.version import __version__

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from pipeline import IngestReport

from kernel.off_loop import async_twin  # noqa: E402 - after the type-only imports

# The library's errors and `open_index` (`query.open_index`): name -> the module that
# declares it, loaded on first use.
_LAZY = {
    "ConfigError": "kernel.config",
    "GrepError": "query",
    "IndexFormatError": "kernel.index_format",
    "IngestError": "pipeline",
    "LockBusy": "pipeline",
    "ProviderError": "kernel.providers",
    "QueryError": "query",
    "SourceError": "query",
    "open_index": "query",
}

__all__ = [
    "ConfigError",
    "GrepError",
    "IndexFormatError",
    "IngestError",
    "LockBusy",
    "ProviderError",
    "QueryError",
    "SourceError",
    "__version__",
    "aingest",
    "ingest",
    "open_index",
]


def ingest(
    root: Path | str | None = None,
    paths: Sequence[str] | None = None,
    *,
    full: bool = False,
    wait: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
) -> IngestReport:
    """Index a project's source folders, as `mdvdb ingest` does (`root`: default found upward;
    `paths`: only re-check these; `full`: `--full`; `wait=False`: `--no-wait`).

    Raises ConfigError, IngestError, LockBusy or ProviderError, the previous index intact."""
    from pathlib import Path

    from kernel.config import ConfigError, load_config
    from pipeline import ingest_folder

    if root is not None and not Path(root).is_dir():
        raise ConfigError(f"{root}: not a folder")
    return ingest_folder(
        load_config(root), list(paths) if paths else None, full=full, wait=wait, progress=progress
    )


# `ingest` off the event loop (it holds the writer lock for the whole run).
aingest = async_twin(ingest)


__getattr__, __dir__ = lazy_exports(
    __name__, {name: (module, name) for name, module in _LAZY.items()}, __all__
)
