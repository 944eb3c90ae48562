"""`mdvdb ingest --dry-run`: what an ingest would add, change and remove, written nowhere: the
same diff an ingest starts from, against the stored manifest read without writing (SQLite's
`immutable` mode when no WAL is there, else read-only) and without the writer lock."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pipeline.state import ManifestEntry

if TYPE_CHECKING:
    from kernel.config import Config

__all__ = ["Preview", "preview_ingest", "read_manifest"]

STATE_DB = "cache.sqlite3"


@dataclass
class Preview:
    """What `mdvdb ingest` would do now."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, problem)

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": True,
            "added": self.added,
            "changed": self.changed,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "errors": [{"path": p, "problem": m} for p, m in self.errors],
        }


def read_manifest(state_folder: Path) -> dict[str, ManifestEntry]:
    """The manifest of the last ingest, read without writing anything ({} when none)."""
    path = state_folder / STATE_DB
    if not path.is_file():
        return {}
    mode = "mode=ro" if os.path.exists(f"{path}-wal") else "immutable=1"
    try:
        db = sqlite3.connect(f"file:{quote(str(path))}?{mode}", uri=True)
    except sqlite3.Error:
        return {}
    try:
        rows = db.execute("SELECT path, size, mtime_ns, sha256 FROM manifest").fetchall()
    except sqlite3.Error:
        return {}  # an empty or damaged database: an ingest would build it again
    finally:
        db.close()
    return {r[0]: ManifestEntry(*r) for r in rows}


def preview_ingest(config: Config, paths: list[str] | None = None) -> Preview:
    """What `ingest_folder(config, paths)` would add, change and remove (`paths`:
    root-relative, as `pipeline.ingest.relative_paths` gives them)."""
    from pipeline.walk.discover import discover

    found = discover(config, read_manifest(config.state_path), paths or None)
    return Preview(
        added=sorted(found.added),
        changed=sorted(found.changed),
        removed=sorted(found.removed),
        unchanged=found.unchanged,
        errors=list(found.errors),
    )
