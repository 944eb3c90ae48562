"""Discover: walk the source folders, apply ignore rules, and decide which files to re-hash.

A stat (size, mtime) that matches the manifest reuses the stored SHA-256; anything else is read
and hashed. SHA-256 of the content, not the stat, decides what changed downstream, so a touched
but unchanged file stops the chain here.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
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
    # Files whose stat changed but whose content did not (touched, copied without -p): the
    # manifest takes their new stat, or every later run would read and hash them again.
    restamped: list[str] = field(default_factory=list)
    hashed: int = 0  # files read and hashed by this walk (the rest matched the manifest)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, problem)

    def digest(self) -> str:
        return manifest_digest(self.entries.values())


# The manifest digest is a sum, not a hash of the sorted list: the same value for the same
# (path, sha) set in any order, and a run that changes one file updates it from the stored
# one by subtracting the old entry and adding the new (not hashing every path again).
# 128 bits of SHA-256 per entry, summed modulo 2**128.
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

    def visit(self, folder: str, rel: str, rules: Rules) -> None:
        """Walk `folder` (root-relative `rel`) with the rules in force above it."""
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
        # Plain strings, not Path objects: this loop runs once per file, so the common case
        # (a plain Markdown file, no ignore rules to apply) is
        # decided inline; everything else goes through `_verdict`.
        found, skip, suffixes = self.found, self.skip, MARKDOWN_SUFFIXES
        skip_names = self.skip_names
        plain_rules = not rules.active
        mine = self.folders.setdefault(rel, [])
        prefix = f"{rel}/" if rel else ""
        for entry in entries:
            name = entry.name
            # The common case first, in as few calls as possible: a regular file (the
            # directory entry's type, no system call) with an ASCII name.
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
                self.visit(entry.path, child_rel, rules)
                continue
            self._take(entry, child_rel, mine)  # a link to a file inside
        if not mine:
            del self.folders[rel]

    def _take(self, entry: os.DirEntry, rel: str, mine: list[str]) -> None:
        """A file met the long way (a name that is not ASCII, a link, another type): its
        stat (a link's target's), unless it is a FIFO, a device or a socket."""
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
    would block or read forever, so it is never opened."""
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
    """The walk's rule for one entry: True to take it (or descend), False to skip it
    silently, or the problem to report when it is skipped (symlinks that escape or loop)."""
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
    """False for a name with bytes that are not UTF-8 (Python hands them over as lone
    surrogates): the index, the caches and JSON output all hold UTF-8 text."""
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
    """(folder, root-relative path, rules at its top) of each source folder that may be
    walked; the one-line verdicts on the others (outside the root, ignored, always-ignored)
    go to `errors`."""
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
    config: Config, errors: list[tuple[str, str]]
) -> tuple[dict[str, os.stat_result], dict[str, list[str]]]:
    """`walk`, and the files found directly in each folder (root-relative folder path, ""
    for the root), for `folder_signatures`."""
    sources = _source_rels(config, errors)
    walker = _Walker(config, errors)
    for source, rel, rules in sources:
        if not source.is_dir():
            errors.append((str(source), "source folder does not exist, skipped"))
            continue
        walker.visit(str(source), rel, rules)
    return walker.found, walker.folders


class PathFilter:
    """The walk's rules applied to one path at a time, for callers that learn of paths one by
    one (the watcher, `mdvdb ingest PATH`): a path is taken exactly when a full walk would
    take it, so a watched change can never index what `mdvdb ingest` would ignore."""

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
        """The rules in force in `rel`'s folder, as the walk builds them on its way down;
        None when the path is in no source folder or under a folder the walk skips."""
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
        """Rules for the entries of `folder_rel` (a source folder or below one); cached,
        so a burst of changes in one folder reads its .gitignore files once."""
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
    """Per folder, a digest of (path, size, mtime) of the files found directly in it, in
    walk order. Stored with the manifest: a run compares these and reads back only the
    manifest rows of the folders whose digest moved (an edit reads one folder's rows, not
    every folder's), and a run where none moved reads none."""
    from array import array

    sha256 = hashlib.sha256
    out = {}
    for folder, rels in folders.items():
        # Names, then sizes and mtimes as arrays: cheaper than a line per file.
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
    """Compare the folders with the manifest. `only`: re-check just these relative paths
    (files or folders, present or gone), keep every other manifest entry as it is
    (`mdvdb ingest docs/a.md`, the watcher). `walked`: the (stats, problems) of a full walk
    the caller already made."""
    errors: list[tuple[str, str]] = walked[1] if walked is not None else []
    if only is not None and any(rel in ("", ".") for rel in only):
        only = None  # the project root itself: a full walk
    if only is None:
        stats = walked[0] if walked is not None else walk(config, errors)
        scope: set[str] | dict[str, ManifestEntry] = manifest
        # Start from the manifest and fix up what differs: a no-op then builds no entry, no
        # set and no list, only a copy of the dict.
        result = Discovered(entries=dict(manifest))
    else:
        stats, scope = _only(config, manifest, only, errors)
        result = Discovered(entries={p: e for p, e in manifest.items() if p not in scope})

    # Named paths are always re-hashed: the caller (the watcher) saw them change, and two
    # writes within one filesystem timestamp tick can leave size and mtime as they were.
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

    # Every manifest path was walked when the walk found as many known files as the
    # manifest holds (the usual case: nothing to look up); else the ones it did not find,
    # and those it could not read, leave.
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
    cover: a file, everything under a folder, everything that was under a path now gone."""
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
