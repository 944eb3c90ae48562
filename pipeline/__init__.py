"""The write side: scan, parse, chunk, embed and pack Markdown into one index file. `__all__`
is its public surface (what `mdvdb` imports, an import-linter contract), each name loaded from
its module on first use so importing `pipeline` costs nothing."""

from __future__ import annotations

from kernel.lazy_exports import lazy_exports

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the CLI imports this package

# public name -> (module, name in that module)
_PUBLIC = {
    "IngestError": ("pipeline.ingest", "IngestError"),
    "IngestReport": ("pipeline.report", "IngestReport"),
    "LockBusy": ("pipeline.lock", "LockBusy"),
    "State": ("pipeline.state", "State"),
    "StateDamaged": ("pipeline.state", "StateDamaged"),
    "Watcher": ("pipeline.watch", "Watcher"),
    "ingest_folder": ("pipeline.ingest", "ingest_folder"),
    "preview_ingest": ("pipeline.preview", "preview_ingest"),
    "relative_paths": ("pipeline.ingest", "relative_paths"),
    "since_text": ("pipeline.lock", "since_text"),
    "start_background": ("pipeline.watch", "start_background"),
    "upgrade_progress": ("pipeline.upgrade", "progress_of"),
    "walk_files": ("pipeline.walk.discover", "walk"),
    "writer_holder": ("pipeline.lock", "writer_holder"),
}

__all__ = [
    "IngestError",
    "IngestReport",
    "LockBusy",
    "State",
    "StateDamaged",
    "Watcher",
    "ingest_folder",
    "preview_ingest",
    "relative_paths",
    "since_text",
    "start_background",
    "upgrade_progress",
    "walk_files",
    "writer_holder",
]

if TYPE_CHECKING:
    from pipeline.ingest import IngestError, ingest_folder, relative_paths
    from pipeline.lock import LockBusy, since_text, writer_holder
    from pipeline.preview import preview_ingest
    from pipeline.report import IngestReport
    from pipeline.state import State, StateDamaged
    from pipeline.upgrade import progress_of as upgrade_progress
    from pipeline.walk.discover import walk as walk_files
    from pipeline.watch import Watcher, start_background


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, __all__)
