"""`mdvdb watch`: re-index what changes, through the same pipeline as `mdvdb ingest`: a batch
of `watchfiles` changes closes once the tree was quiet for MDVDB_WATCH_DEBOUNCE_MS and only its
paths are re-checked, under the writer lock for that one ingest (docs/watching.md)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kernel.config import OFF_FILE, Config
from kernel.project_files import always_ignored, named_ignored_folders
from pipeline.walk.discover import MARKDOWN_SUFFIXES, PathFilter

# A batch closes when no change came for the debounce time, or at the latest after this
# many debounce periods (a tree that never goes quiet still gets indexed).
MAX_DEBOUNCE_FACTOR = 10
# How often (ms) the watcher wakes without events to check its source folders.
IDLE_CHECK_MS = 500


@dataclass
class Batch:
    """One ingest the watcher ran: what it was told, what it did, how long it took."""

    paths: list[str] | None  # None: a full walk
    files: int = 0  # files added, changed or removed
    chunks: int = 0  # chunks in the published index
    embedded: int = 0
    ms: float = 0.0
    error: str | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)
    upgrade: dict | None = None  # the upgrade's progress after it (`pipeline.upgrade`)

    def line(self) -> str:
        scope = "full walk" if self.paths is None else f"paths: {len(self.paths)}"
        if self.error:
            text = f"watch: {scope}: ingest failed: {self.error} ({self.ms:.0f} ms)"
            return text + self._problems()
        text = (
            f"watch: {scope}: {self.files} files changed, {self.embedded} chunks embedded, "
            f"{self.chunks} chunks indexed, {self.ms:.0f} ms"
        )
        if self.upgrade is not None:
            up = self.upgrade
            done = "done" if up["complete"] else f"{up['done']} of {up['chunks']} chunks"
            text += f", upgrade to {up['model']}: {done}"
        return text + self._problems()

    def _problems(self) -> str:
        if not self.problems:
            return ""
        path, problem = self.problems[0]
        return f", {len(self.problems)} problems (e.g. {path}: {problem})"


def _stderr(line: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} {line}\n")
    sys.stderr.flush()


class Watcher:
    """Watch a project's source folders until `stop` is set."""

    def __init__(
        self,
        config: Config,
        stop: threading.Event | None = None,
        log: Callable[[str], None] = _stderr,
        debounce_ms: int | None = None,
        on_batch: Callable[[Batch], None] | None = None,
    ):
        self.config = config
        self.stop = stop or threading.Event()
        self.log = log
        self.debounce_ms = config.watch_debounce_ms if debounce_ms is None else debounce_ms
        self.on_batch = on_batch
        self._provider = None
        self._index_name = config.index_path.name
        self._named_ignored = named_ignored_folders(config)
        self._off = False
        self._upgrading = False  # an upgrade is under way: a quiet watch continues it

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        """Index what changed since the last ingest, then follow changes until stopped."""
        import watchfiles

        from kernel.providers import get_provider

        self._provider = get_provider(self.config)
        # The first pass is a full walk (what changed while nothing watched), run once the
        # watch is live so nothing after it goes unseen.
        pending_full = True
        pending: list[str] = []
        seen: dict[Path, tuple[int, int] | None] = {}
        try:
            while not self.stop.is_set():
                targets = self._targets()
                if not targets:
                    # Nothing left to watch (the source folders are gone): what was in them
                    # leaves the index now, not when a folder comes back.
                    if (pending_full or pending) and not self._switched_off():
                        self._ingest(None if pending_full else pending)
                        pending_full, pending = False, []
                    # A folder that comes back is new, even on the inode the old one had
                    # (file systems reuse them): it is walked once its watch is live.
                    seen = {p: None for p in self._sources()}
                    self.stop.wait(IDLE_CHECK_MS / 1000)
                    continue
                identity = {p: _identity(p) for p in self._sources()}
                # Folders that appeared or were replaced since the last watch: walk them at
                # the first yield, when the new watch is live.
                reborn = [p for p, key in identity.items() if key and key != seen.get(p)]
                if seen and reborn:
                    # A folder that is there again: a full walk, not its path, finds whatever
                    # was written into it before this watch went live.
                    pending_full, pending = True, []
                seen = identity
                step = max(1, self.debounce_ms)
                for changes in self._surviving(
                    watchfiles.watch(
                        *targets,
                        watch_filter=self._wanted,
                        debounce=max(step * MAX_DEBOUNCE_FACTOR, step + 1),
                        step=step,
                        stop_event=self.stop,
                        rust_timeout=IDLE_CHECK_MS,
                        yield_on_timeout=True,
                        raise_interrupt=False,
                    )
                ):
                    if changes is None:  # the notifier failed: a new watch after a full walk
                        pending_full = True
                        break
                    if self._switched_off():  # the notifier wakes at least every 500 ms
                        pending_full, pending = True, []
                        continue
                    paths = self._relevant(path for _, path in changes)
                    if pending_full:
                        paths = None
                    elif pending and paths is not None:
                        paths = sorted({*pending, *paths})
                    pending_full, pending = False, []
                    if paths is None or paths:
                        self._ingest(paths)
                    elif self._upgrading:
                        self._ingest(None)  # quiet: the upgrade's next share
                    moved = [p for p in self._sources() if _identity(p) != identity.get(p)]
                    if moved:
                        # A source folder was deleted, recreated or moved: its watch is dead.
                        if all(_identity(p) is not None for p in moved):
                            pending_full, pending = True, []  # there again: walk it all
                        else:  # gone: its paths leave the index
                            again = self._catch_up_paths(moved)
                            pending_full, pending = again is None, again or []
                        break
                    if self.stop.is_set():
                        break
        finally:
            if self._provider is not None:
                self._provider.close()
                self._provider = None

    def _switched_off(self) -> bool:
        """Whether `.mdvdb-off` is in the root now; says so once when that changes."""
        off = self.config.switched_off
        if off != self._off:
            self._off = off
            path = self.config.root / OFF_FILE
            self.log(
                f"watch: paused: {path} exists; indexing resumes when it is removed"
                if off
                else f"watch: resumed: {path} was removed"
            )
        return off

    def _surviving(self, changes: Iterable) -> Iterator:
        """The notifier's batches; None once when it gives up on a path that is not valid
        UTF-8: the loop then re-walks, which reports and skips such names."""
        try:
            yield from changes
        except _notifier_error() as exc:
            self.log(f"watch: {str(exc).encode('utf-8', 'backslashreplace').decode()}")
            yield None

    def _catch_up_paths(self, moved: list[Path]) -> list[str] | None:
        rels = []
        for path in moved:
            rel = self._rel(path)
            if rel is None or rel in ("", "."):
                return None
            rels.append(rel)
        return rels

    # -- which paths --------------------------------------------------------------------
    def _sources(self) -> list[Path]:
        """Source folders the walk may enter (inside the root unless configured)."""
        out = []
        for source in self.config.source_paths():
            if self.config.follow_outside_root or self._rel(source) is not None:
                out.append(source)
        return out

    def _targets(self) -> list[str]:
        return [str(p) for p in self._sources() if p.is_dir()]

    def _rel(self, path: Path | str) -> str | None:
        try:
            rel = Path(path).relative_to(self.config.root).as_posix()
        except ValueError:
            return None
        return "" if rel == "." else rel

    def _wanted(self, change, path: str) -> bool:
        """Cheap first cut, run for every raw event: drop our own files, always-ignored
        folders and files that are neither Markdown nor possibly a folder."""
        import watchfiles

        name = os.path.basename(path)
        if name.startswith(f".{self._index_name}.") or name == self._index_name:
            return False
        for own in (str(self.config.state_path), str(self.config.shards_path)):
            if path == own or path.startswith(own + os.sep):
                return False
        rel = self._rel(path)
        if rel is not None and always_ignored(rel, self._named_ignored):
            return False
        if name.lower().endswith(MARKDOWN_SUFFIXES) or name == ".gitignore":
            return True
        if change == watchfiles.Change.deleted:
            return True  # may have been a folder of notes
        return change == watchfiles.Change.added and os.path.isdir(path)

    def _relevant(self, paths: Iterable[str]) -> list[str] | None:
        """Root-relative paths worth an ingest; None when a .gitignore changed (full walk)."""
        from pipeline.state import State, StateDamaged

        rels = sorted({r for r in (self._rel(p) for p in paths) if r is not None})
        if not rels:
            return []
        if any(r.rsplit("/", 1)[-1] == ".gitignore" for r in rels):
            return None
        rules = PathFilter(self.config)
        keep = []
        gone = []
        for rel in rels:
            if rel == "":
                return None
            if os.path.lexists(self.config.root / rel):
                taken, problem = rules.check(rel)
                if taken or problem:
                    keep.append(rel)
            else:
                gone.append(rel)
        if gone:
            try:
                state = State(self.config.state_path)
            except StateDamaged:  # the ingest sets it aside: let it see what is gone
                return sorted(keep + [rel for rel in gone if _utf8(rel)])
            try:
                # A name with undecodable bytes was never indexed (the walk skips it).
                keep.extend(rel for rel in gone if _utf8(rel) and state.has_path(rel))
            finally:
                state.close()
        return sorted(keep)

    # -- one ingest -----------------------------------------------------------------------
    def _ingest(self, paths: list[str] | None) -> Batch:
        from pipeline import ingest

        batch = Batch(paths=paths)
        started = time.perf_counter()
        try:
            absolute = None if paths is None else [str(self.config.root / p) for p in paths]
            report = ingest.ingest_folder(
                self.config,
                absolute,
                provider=self._provider,
                on_wait=lambda holder: self.log(f"watch: waiting for the index lock ({holder})"),
            )
            batch.files = report.added + report.changed + report.removed
            batch.chunks = report.chunks
            batch.embedded = report.chunks_embedded
            batch.problems = list(report.errors)
            batch.upgrade = report.upgrade
        except Exception as exc:  # a failed batch must not end the watch
            batch.error = f"{type(exc).__name__}: {exc}"
            batch.problems = list(getattr(exc, "problems", ()))  # found before it failed
        batch.ms = (time.perf_counter() - started) * 1000
        # a failed run does not retry on its own: the next change does
        self._upgrading = batch.upgrade is not None and not batch.upgrade["complete"]
        if paths is None or batch.files or batch.error or batch.problems:
            self.log(batch.line())
        if self.on_batch:
            self.on_batch(batch)
        return batch


def _notifier_error() -> type[Exception]:
    try:
        from watchfiles._rust_notify import WatchfilesRustInternalError
    except ImportError:  # another watchfiles layout: nothing more specific to catch
        return RuntimeError
    return WatchfilesRustInternalError


def _utf8(rel: str) -> bool:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _identity(path: Path | str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class BackgroundWatch:
    """A watcher on a daemon thread, for long-lived commands that index as they serve."""

    def __init__(self, watcher: Watcher):
        self.watcher = watcher
        self.thread = threading.Thread(target=watcher.run, name="mdvdb-watch", daemon=True)

    def start(self) -> BackgroundWatch:
        self.thread.start()
        return self

    def stop(self, timeout: float | None = 60) -> None:
        self.watcher.stop.set()
        self.thread.join(timeout)


def start_background(
    config: Config, log: Callable[[str], None] = _stderr
) -> BackgroundWatch | None:
    """Start watching in the background unless MDVDB_WATCH=false. Commands that watch
    implicitly (a server, an MCP server) call this; `mdvdb watch` is explicit and does not."""
    if not config.watch:
        return None
    return BackgroundWatch(Watcher(config, log=log)).start()
