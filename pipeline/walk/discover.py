"""Discover: walk the source folders, apply ignore rules, and decide which files to re-hash
(a stat that matches the manifest reuses its SHA-256). A project of many folders walks on
both cores (`_split_walk`; docs/architecture.md, "The pipeline: doit tasks, one per stage")."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernel.config import Config
from kernel.file_hash import sha256_file
from kernel.project_files import (  # noqa: F401 - BUILTIN_IGNORES: the watcher's first cut
    BUILTIN_IGNORES,
    MARKDOWN_SUFFIXES,
    Rules,
    inside,
    source_folders,
    walked_within,
)
from kernel.safe_open import kind_of, read_problem
from pipeline.state import ManifestEntry


@dataclass
class Discovered:
    entries: dict[str, ManifestEntry]  # every current file, by relative path
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    # Files whose stat changed but not their content: the manifest takes their new stat.
    restamped: list[str] = field(default_factory=list)
    hashed: int = 0  # files read and hashed by this walk (the rest matched the manifest)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, problem)

    def digest(self) -> str:
        return manifest_digest(self.entries.values())


# The manifest digest is a sum of 128 bits of SHA-256 per (path, sha) entry modulo 2**128:
# order-free, and a run updates the stored one by what left and came.
DIGEST_PREFIX = "sum1:"
_MOD = 1 << 128


def _entry_terms(entries) -> int:
    sha256 = hashlib.sha256
    return sum(
        int.from_bytes(sha256(f"{e.path}\0{e.sha256}".encode()).digest()[:16], "big")
        for e in entries
    )


def manifest_digest(entries) -> str:
    """Digest of (path, sha256) of every entry of a manifest, in any order."""
    return f"{DIGEST_PREFIX}{_entry_terms(entries) % _MOD:032x}"


def updated_digest(stored: str | None, left, came) -> str | None:
    """The digest of a manifest from the stored one's, with the entries `left` taken out and
    `came` put in; None when `stored` is not a digest of this kind (then hash them all)."""
    if not stored or not stored.startswith(DIGEST_PREFIX):
        return None
    try:
        total = int(stored[len(DIGEST_PREFIX) :], 16)
    except ValueError:
        return None
    total = (total - _entry_terms(left) + _entry_terms(came)) % _MOD
    return f"{DIGEST_PREFIX}{total:032x}"


class _Walker:
    """One walk: the folders already visited (symlink loops), the files found, the problems."""

    def __init__(self, config: Config, errors: list[tuple[str, str]]):
        self.config = config
        self.root = config.root
        self.errors = errors
        self.found: dict[str, os.stat_result] = {}
        # folder rel -> the files found directly in it, in walk order (`folder_signatures`)
        self.folders: dict[str, list[str]] = {}
        self.seen_dirs: set[tuple[int, int]] = set()
        self.skip = {str(config.index_path), str(config.state_path)}
        self.skip_names = {os.path.basename(p) for p in self.skip}
        # (name, files found, folders, problems) where a subfolder walked elsewhere was met
        self.places: list[tuple[str, int, int, int]] = []

    def visit(
        self, folder: str, rel: str, rules: Rules, elsewhere: frozenset[str] = frozenset()
    ) -> None:
        """Walk `folder` (root-relative `rel`) with the rules in force above it. `elsewhere`:
        plain subfolders another process walks (only where each would be walked is noted)."""
        errors = self.errors
        try:
            st = os.stat(folder)
        except OSError as exc:
            errors.append((rel or ".", f"cannot read folder: {exc.strerror or exc}"))
            return
        key = (st.st_dev, st.st_ino)
        if key in self.seen_dirs:
            errors.append((rel or ".", "symlink loop: folder already visited, skipped"))
            return
        self.seen_dirs.add(key)
        rules = rules.entering(folder, rel, errors)
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            errors.append((rel or ".", f"cannot list folder: {exc.strerror or exc}"))
            return
        # Plain strings, not Path objects: the common case is decided inline, the rest by
        # `_verdict`.
        found, skip, suffixes = self.found, self.skip, MARKDOWN_SUFFIXES
        skip_names = self.skip_names
        plain_rules = not rules.active
        mine = self.folders.setdefault(rel, [])
        prefix = f"{rel}/" if rel else ""
        for entry in entries:
            name = entry.name
            # A regular file (the entry's type, no system call) with an ASCII name first.
            try:
                regular = entry.is_file(follow_symlinks=False)
            except OSError:
                regular = False  # the long way below reports it
            if regular and name.isascii():
                if not name.lower().endswith(suffixes):
                    continue
                child_rel = prefix + name
                if not plain_rules and rules.ignored(child_rel, False):
                    continue
                if name in skip_names and entry.path in skip:
                    continue
                try:
                    found[child_rel] = entry.stat()
                except OSError as exc:
                    errors.append((child_rel, f"cannot stat: {exc.strerror or exc}"))
                    continue
                mine.append(child_rel)
                continue
            child_rel = prefix + name
            if not name.isascii() and not _utf8_name(name):
                errors.append((printable_path(child_rel), NON_UTF8_NAME))
                continue
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir()
            except OSError as exc:
                errors.append((child_rel, _stat_problem(exc)))
                continue
            if not is_dir and not is_link:
                if not name.lower().endswith(suffixes) or (
                    not plain_rules and rules.ignored(child_rel, False)
                ):
                    continue
                if entry.path not in skip:
                    self._take(entry, child_rel, mine)
                continue
            verdict = _verdict(
                self.config, entry.path, name, child_rel, is_dir, is_link, rules, self.skip
            )
            if verdict is not True:
                if verdict:
                    errors.append((child_rel, verdict))
                continue
            if is_dir:
                if name in elsewhere and not is_link:
                    self.places.append((name, len(found), len(self.folders), len(errors)))
                    continue
                self.visit(entry.path, child_rel, rules)
                continue
            self._take(entry, child_rel, mine)  # a link to a file inside
        if not mine:
            del self.folders[rel]

    def _take(self, entry: os.DirEntry, rel: str, mine: list[str]) -> None:
        """A file met the long way: its stat (a link's target's), unless it is special."""
        try:
            st = entry.stat()
        except OSError as exc:
            self.errors.append((rel, f"cannot stat: {exc.strerror or exc}"))
            return
        if not _special(st, rel, self.errors):
            self.found[rel] = st
            mine.append(rel)


def _special(st: os.stat_result, rel: str, errors: list[tuple[str, str]]) -> bool:
    """True (and reported) for a FIFO, device or socket with a Markdown name: opening one
    would block or read forever."""
    if stat.S_ISREG(st.st_mode):
        return False
    errors.append((rel, f"{kind_of(st.st_mode)}, not a regular file; skipped"))
    return True


def _verdict(
    config: Config,
    path: str,
    name: str,
    rel: str,
    is_dir: bool,
    is_link: bool,
    rules: Rules,
    skip: set[str],
) -> bool | str:
    """The walk's rule for one entry: True to take it (or descend), False to skip it, or the
    problem to report (symlinks that escape or loop)."""
    if is_dir:
        if name in BUILTIN_IGNORES or path in skip:
            return False
    elif not name.lower().endswith(MARKDOWN_SUFFIXES) or path in skip:
        return False
    if rules.active and rules.ignored(rel, is_dir):
        return False
    if is_link:
        try:
            target = Path(path).resolve(strict=True)
        except (OSError, RuntimeError):
            return "broken symlink or symlink loop, skipped"
        if not config.follow_outside_root and not inside(target, config.root):
            return "symlink points outside the project root, skipped"
    return True


NON_UTF8_NAME = "file name is not valid UTF-8, skipped (rename it to index it)"


def _utf8_name(name: str) -> bool:
    """False for a name with bytes that are not UTF-8 (the index and JSON hold UTF-8 text)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable_path(rel: str) -> str:
    """A path that may hold undecodable bytes, with those bytes as backslash escapes."""
    return os.fsencode(rel).decode("utf-8", errors="backslashreplace")


def _stat_problem(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop, skipped"
    return f"cannot stat: {exc.strerror or exc}"


def _source_rels(
    config: Config, errors: list[tuple[str, str]] | None
) -> list[tuple[Path, str, Rules]]:
    """(folder, root-relative path, rules at its top) of each source folder to walk; the
    verdicts on the others go to `errors`."""
    out = []
    folders = source_folders(config)
    walked = [s.path for s in folders if not s.skipped]
    place = -1  # the source's place in `walked`
    for source in folders:
        if source.problem and errors is not None:
            errors.append((source.raw, source.problem))
        if source.skipped:
            continue
        place += 1
        if any(
            walked_within(source.path, other) and (other != source.path or i < place)
            for i, other in enumerate(walked)
        ):
            continue  # a walk of another source folder (or of this one, listed before) reaches it
        if source.rel is None:  # outside the root, allowed: its own rules only
            out.append((source.path, "", Rules.for_folder(config, "", above=False)))
        else:
            out.append((source.path, source.rel, Rules.for_folder(config, source.rel)))
    return out


def walk(config: Config, errors: list[tuple[str, str]]) -> dict[str, os.stat_result]:
    """Every Markdown file under the source folders that no rule ignores: rel path -> stat."""
    return walk_folders(config, errors)[0]


def walk_folders(
    config: Config, errors: list[tuple[str, str]], split: bool = False
) -> tuple[Mapping[str, os.stat_result], dict[str, list[str]]]:
    """`walk`, and the files found directly in each folder ("" for the root). `split`: the
    caller reads only size, mtime, inode and device, so half may run in a child."""
    sources = _source_rels(config, errors)
    if split and len(sources) == 1 and sources[0][0].is_dir():
        mark = len(errors)
        done = _split_walk(config, *sources[0], errors)
        if done is not None:
            return done
        del errors[mark:]  # stepped aside: the serial walk reports them again
    walker = _Walker(config, errors)
    for source, rel, rules in sources:
        if not source.is_dir():
            errors.append((str(source), "source folder does not exist, skipped"))
            continue
        walker.visit(str(source), rel, rules)
    return walker.found, walker.folders


class _Stat:
    """What a walk's caller reads of a file's stat, as a forked walk hands it over."""

    __slots__ = ("st_size", "st_mtime_ns", "st_ino", "st_dev")

    def __init__(self, size: int, mtime_ns: int, ino: int, dev: int):
        self.st_size, self.st_mtime_ns, self.st_ino, self.st_dev = size, mtime_ns, ino, dev


# A walk is split only when the source folder has this many plain subfolders to share out.
SPLIT_MIN_FOLDERS = 2


def _split_walk(
    config: Config, source: Path, rel: str, rules: Rules, errors: list[tuple[str, str]]
) -> tuple[Mapping[str, os.stat_result], dict[str, list[str]]] | None:
    """The walk of one source folder on both cores: a forked child walks every other plain
    subfolder, this process the rest, and the child's results go where the serial walk
    meets them. None (walk serially) without `fork`, with other threads running (a forked
    child may deadlock), few subfolders, a failed child, or a folder both halves reached."""
    import threading

    if not hasattr(os, "fork") or threading.active_count() > 1:
        return None
    try:
        names = sorted(
            e.name
            for e in os.scandir(source)
            if e.is_dir(follow_symlinks=False) and _utf8_name(e.name)
        )
    except OSError:
        return None
    if len(names) < SPLIT_MIN_FOLDERS:
        return None
    theirs = frozenset(names[1::2])
    parent = os.getpid()
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return None
    if pid == 0:  # the child: walk its half, hand it over, exit without cleanup
        code = 1
        try:
            import gc

            gc.disable()  # short-lived: a collection would only copy pages it shares
            os.close(read)
            _child_walk(config, source, rel, rules, theirs, write, parent)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    walker = _Walker(config, errors)
    try:
        walker.visit(str(source), rel, rules, elsewhere=theirs)
    finally:
        with os.fdopen(read, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not data:
        return None
    import marshal

    parts, their_dirs = marshal.loads(data)
    if their_dirs & walker.seen_dirs or set(parts) != {p[0] for p in walker.places}:
        return None
    return _merged(walker, rel, parts)


def _child_walk(
    config: Config,
    source: Path,
    rel: str,
    rules: Rules,
    theirs: frozenset[str],
    out: int,
    parent: int,
) -> None:
    """The forked half of `_split_walk`: each subfolder in `theirs`, as columns written to
    `out` with `marshal`; it ends once `parent` is gone."""
    import marshal

    top = _Walker(config, [])
    st = os.stat(source)
    top.seen_dirs.add((st.st_dev, st.st_ino))  # the source folder itself: the parent's
    entered = rules.entering(str(source), rel)  # its problems: the parent reports them
    parts = {}
    for entry in os.scandir(source):
        name = entry.name
        if name not in theirs or not entry.is_dir(follow_symlinks=False):
            continue
        if os.getppid() != parent:  # a SIGKILLed ingest reaps no child: end with it
            os._exit(1)
        child_rel = f"{rel}/{name}" if rel else name
        verdict = _verdict(config, entry.path, name, child_rel, True, False, entered, top.skip)
        if verdict is not True:
            continue  # the parent skips it too, and reports nothing for a plain folder
        walker = _Walker(config, [])
        walker.seen_dirs = top.seen_dirs
        walker.visit(entry.path, child_rel, entered)
        found = walker.found
        columns = {}
        for folder, rels in walker.folders.items():
            stats = [found[r] for r in rels]  # each stat looked up once for its columns
            columns[folder] = (
                rels,
                *([getattr(s, a) for s in stats] for a in _Stat.__slots__),
            )
        signatures = folder_signatures(found, walker.folders)
        parts[name] = (list(found), columns, signatures, walker.errors)
    data = marshal.dumps((parts, top.seen_dirs - {(st.st_dev, st.st_ino)}))
    view = memoryview(data)
    while view:
        view = view[os.write(out, view) :]
    os.close(out)


def _merged(walker: _Walker, rel: str, parts: dict) -> tuple[_MergedStats, dict[str, list[str]]]:
    """The parent's walk with the child's subfolders put in at the places noted (the files
    as `_MergedStats`, which reads a child's file only when asked)."""
    folder_items = list(walker.folders.items())
    own_errors = list(walker.errors)
    # The source folder's own entry, dropped when it holds no file, shifts the counts by one.
    shift = 0 if rel in walker.folders else 1
    folders: dict[str, list[str]] = {}
    errors: list[tuple[str, str]] = []
    at_folders = at_errors = 0
    for name, _, n_folders, n_errors in walker.places:
        n_folders -= shift
        folders.update(folder_items[at_folders:n_folders])
        errors.extend(own_errors[at_errors:n_errors])
        at_folders, at_errors = n_folders, n_errors
        folders.update((f, columns[0]) for f, columns in parts[name][1].items())
        errors.extend(tuple(e) for e in parts[name][3])
    folders.update(folder_items[at_folders:])
    errors.extend(own_errors[at_errors:])
    walker.errors[:] = errors
    return _MergedStats(walker.found, walker.places, parts), folders


class _MergedStats(Mapping):
    """rel path -> stat of a split walk, in the serial walk's order; the child's files are
    looked up by folder when asked for."""

    def __init__(self, own: dict, places: list, parts: dict):
        self._own, self._places, self._parts = own, places, parts
        self._theirs: dict[str, tuple[list, ...]] = {}  # folder -> _child_walk's columns
        self.signatures: dict[str, str] = {}
        self._count = len(own)
        for order, columns, signatures, _ in parts.values():
            self._theirs.update(columns)
            self.signatures.update(signatures)
            self._count += len(order)
        self._index: dict[str, dict[str, int]] = {}

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, rel: str):
        found = self._own.get(rel)
        if found is not None:
            return found
        folder = rel.rpartition("/")[0]
        theirs = self._theirs.get(folder)
        if theirs is None:
            raise KeyError(rel)
        index = self._index.get(folder)
        if index is None:
            index = self._index[folder] = {r: i for i, r in enumerate(theirs[0])}
        i = index[rel]  # KeyError: not found
        return _Stat(*(column[i] for column in theirs[1:]))

    def __iter__(self):
        own = iter(self._own)
        at = 0
        for name, n_found, _, _ in self._places:
            for _ in range(n_found - at):
                yield next(own)
            at = n_found
            yield from self._parts[name][0]
        yield from own


class PathFilter:
    """The walk's rules applied to one path at a time (the watcher, `mdvdb ingest PATH`): a
    path is taken exactly when a full walk would take it."""

    def __init__(self, config: Config):
        self.config = config
        self.skip = {str(config.index_path), str(config.state_path)}
        # the most specific source folder first: `build` (named) before `.`, which skips it
        self.sources = sorted(_source_rels(config, None), key=lambda s: -len(s[1]))
        self._cache: dict[tuple[str, str], tuple[Rules, str | None] | None] = {}

    def check(self, rel: str) -> tuple[bool, str | None]:
        """(taken, problem) for a root-relative path of a file or folder that exists."""
        found = self._folder_rules(rel)
        if found is None:
            return False, None
        rules, problem = found
        if problem:
            return False, problem
        path = self.config.root / rel
        try:
            is_link = path.is_symlink()
            is_dir = path.is_dir()
        except OSError as exc:
            return False, _stat_problem(exc)
        verdict = _verdict(
            self.config, str(path), path.name, rel, is_dir, is_link, rules, self.skip
        )
        return verdict is True, (verdict if isinstance(verdict, str) else None)

    def _folder_rules(self, rel: str) -> tuple[Rules, str | None] | None:
        """The rules in force in `rel`'s folder; None when no walk reaches it."""
        for source, source_rel, top in self.sources:
            if source_rel and rel != source_rel and not rel.startswith(source_rel + "/"):
                continue
            if rel == source_rel:
                return top, None
            parent = rel.rpartition("/")[0] if "/" in rel else ""
            return self._rules_inside(source, source_rel, top, parent)
        return None

    def _rules_inside(
        self, source: Path, source_rel: str, top: Rules, folder_rel: str
    ) -> tuple[Rules, str | None] | None:
        """Rules for the entries of `folder_rel`; cached (a burst reads .gitignore once)."""
        key = (source_rel, folder_rel)
        if key in self._cache:
            return self._cache[key]
        if folder_rel == source_rel:
            found: tuple[Rules, str | None] | None = (top.entering(source, source_rel), None)
        else:
            parent = folder_rel.rpartition("/")[0] if "/" in folder_rel else ""
            above = self._rules_inside(source, source_rel, top, parent)
            if above is None or above[1]:
                found = above
            else:
                rules = above[0]
                folder = self.config.root / folder_rel
                verdict = _verdict(
                    self.config,
                    str(folder),
                    folder.name,
                    folder_rel,
                    True,
                    folder.is_symlink(),
                    rules,
                    self.skip,
                )
                if verdict is not True:
                    found = (rules, verdict) if verdict else None
                else:
                    found = rules.entering(folder, folder_rel), None
        self._cache[key] = found
        return found

    def walk_folder(self, rel: str, errors: list[tuple[str, str]]) -> dict[str, os.stat_result]:
        """Every file a full walk would find under the folder `rel` (already `check`ed)."""
        found = self._folder_rules(rel)
        if found is None or found[1]:
            return {}
        walker = _Walker(self.config, errors)
        walker.visit(str(self.config.root / rel), rel, found[0])
        return walker.found


def folder_signatures(
    stats: dict[str, os.stat_result], folders: dict[str, list[str]]
) -> dict[str, str]:
    """Per folder, a digest of (path, size, mtime) of the files found directly in it; a run
    reads back only the manifest rows of the folders whose digest moved."""
    from array import array

    sha256 = hashlib.sha256
    out = {}
    known = getattr(stats, "signatures", {})  # a split walk's child hashed its own
    for folder, rels in folders.items():
        if folder in known:
            out[folder] = known[folder]
            continue
        found = [stats[r] for r in rels]
        names = "\0".join(rels)
        h = sha256(f"{len(rels)}\0{names}".encode())
        h.update(array("q", [st.st_size for st in found]).tobytes())
        h.update(array("q", [st.st_mtime_ns for st in found]).tobytes())
        out[folder] = h.hexdigest()[:32]
    return out


def discover(
    config: Config,
    manifest: dict[str, ManifestEntry],
    only: list[str] | None = None,
    walked: tuple[dict[str, os.stat_result], list[tuple[str, str]]] | None = None,
) -> Discovered:
    """Compare the folders with the manifest. `only`: re-check just these relative paths,
    keep every other entry. `walked`: the (stats, problems) of a walk already made."""
    errors: list[tuple[str, str]] = walked[1] if walked is not None else []
    if only is not None and any(rel in ("", ".") for rel in only):
        only = None  # the project root itself: a full walk
    if only is None:
        stats = walked[0] if walked is not None else walk(config, errors)
        scope: set[str] | dict[str, ManifestEntry] = manifest
        # From the manifest, fixing up what differs: a no-op builds nothing but the copy.
        result = Discovered(entries=dict(manifest))
    else:
        stats, scope = _only(config, manifest, only, errors)
        result = Discovered(entries={p: e for p, e in manifest.items() if p not in scope})

    # Named paths are always re-hashed: two writes within one timestamp tick keep the stat.
    trust_stat = only is None
    entries, known = result.entries, manifest.get
    root = str(config.root)  # joined as strings: a Path per file is dear over a big walk
    within = None if config.follow_outside_root else root
    limit = config.max_file_bytes
    unreadable: list[str] = []
    for rel, st in stats.items():
        old = known(rel)
        if (
            trust_stat
            and old is not None
            and old.mtime_ns == st.st_mtime_ns
            and old.size == st.st_size
        ):
            continue
        try:
            # The file the walk saw (device and inode), never a FIFO, a link only inside.
            sha = sha256_file(os.path.join(root, rel), within, st, limit)
        except OSError as exc:
            errors.append((rel, read_problem(exc)))
            unreadable.append(rel)
            continue
        result.hashed += 1
        entry = ManifestEntry(rel, st.st_size, st.st_mtime_ns, sha)
        entries[rel] = entry
        if old is None:
            result.added.append(rel)
        elif old.sha256 != sha:
            result.changed.append(rel)
        elif old != entry:
            result.restamped.append(rel)
    result.unchanged = len(stats) - len(unreadable) - len(result.added) - len(result.changed)

    # Unless the walk found exactly the manifest's files, those missing or unreadable leave.
    if unreadable or len(stats) - len(result.added) != len(scope):
        failed = set(unreadable)
        result.removed = sorted(p for p in scope if p not in stats or p in failed)
        for rel in result.removed:
            entries.pop(rel, None)
    result.errors = errors
    return result


def _only(
    config: Config,
    manifest: dict[str, ManifestEntry],
    only: list[str],
    errors: list[tuple[str, str]],
) -> tuple[dict[str, os.stat_result], set[str]]:
    """Stats of the files to re-check under the given paths, and the manifest entries they
    cover."""
    rules = PathFilter(config)
    stats: dict[str, os.stat_result] = {}
    scope: set[str] = set()
    prefixes = tuple(f"{rel}/" for rel in only)
    for rel in only:
        if rel in manifest:
            scope.add(rel)
    if prefixes:
        scope.update(p for p in manifest if p.startswith(prefixes))
    for rel in only:
        path = config.root / rel
        if not _utf8_name(rel):
            if os.path.lexists(path):
                errors.append((printable_path(rel), NON_UTF8_NAME))
            continue
        if not os.path.lexists(path):
            continue
        taken, problem = rules.check(rel)
        if problem:
            errors.append((rel, problem))
        if not taken:
            continue
        if path.is_dir():
            stats.update(rules.walk_folder(rel, errors))
            continue
        try:
            st = path.stat()
        except OSError as exc:
            errors.append((rel, f"cannot stat: {exc.strerror or exc}"))
            continue
        if not _special(st, rel, errors):
            stats[rel] = st
    return stats, scope
