"""What is in a project: the one set of rules that ingest, watch, status and grep all apply
(docs/architecture.md, "Project files and ignore rules"). Only the standard library at import
time (`mdvdb grep` loads this module).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from kernel.safe_open import Refused, read_own

if TYPE_CHECKING:
    import pathspec

    from kernel.config import Config

# Always ignored at any depth, whatever the .gitignore files say.
BUILTIN_IGNORES = frozenset(
    {
        ".claude",
        ".cursor",
        ".vscode",
        ".idea",
        ".git",
        "node_modules",
        ".obsidian",  # Obsidian's settings and plugins
        ".trash",  # Obsidian's deleted notes
        "__pycache__",
        ".next",
        ".nuxt",
        ".svelte-kit",
        "target",
        "dist",
        "build",
        "out",
    }
)
MARKDOWN_SUFFIXES = (".md", ".markdown")
GITIGNORE = ".gitignore"


# -- source folders ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceFolder:
    """One configured source folder and whether it may be read."""

    raw: str  # as configured
    path: Path  # absolute, resolved
    rel: str | None  # relative to the root ("" = the root itself); None when outside it
    skipped: bool = False
    problem: str | None = None  # ingest reports it as `RAW: problem`, grep prints `warning`
    name: str = ""  # MDVDB_SOURCES' name, else the folder as configured (`Config.named_sources`)
    description: str = ""

    @property
    def warning(self) -> str | None:
        return f"{self.raw}: {self.problem}" if self.problem else None


def inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root)


def source_folders(config: Config) -> list[SourceFolder]:
    """Every configured source folder with its verdict, in configuration order."""
    from dataclasses import replace

    named = config.named_sources()
    return [
        replace(found, name=source.name, description=source.description)
        for found, source in zip(_source_verdicts(config), named, strict=True)
    ]


def _source_verdicts(config: Config) -> list[SourceFolder]:
    out = []
    for raw, path in zip(config.source_dirs, config.source_paths(), strict=True):
        if not inside(path, config.root):
            skipped = not config.follow_outside_root
            why = "source folder is outside the project root, skipped" if skipped else None
            out.append(SourceFolder(raw, path, None, skipped, why))
            continue
        rel = path.relative_to(config.root).as_posix()
        rel = "" if rel == "." else rel
        builtin = [part for part in rel.split("/") if part in BUILTIN_IGNORES] if rel else []
        skipped, why = False, None
        if rel and _gitignored_folder(config, rel):
            skipped = True
            why = "source folder is ignored by a .gitignore or MDVDB_IGNORE_PATTERNS, skipped"
        elif builtin:
            why = (
                f"source folder is in the always-ignored folder {builtin[0]}/: "
                "searched because MDVDB_SOURCE_DIRS names it"
            )
        out.append(SourceFolder(raw, path, rel, skipped, why))
    return out


def walked_within(inner: Path, outer: Path) -> bool:
    """Whether a walk of the folder `outer` reaches the folder `inner`: below (or is) `outer`,
    no always-ignored folder between them."""
    if inner == outer:
        return True
    try:
        between = inner.relative_to(outer).parts
    except ValueError:
        return False
    return not any(part in BUILTIN_IGNORES for part in between)


def named_ignored_folders(config: Config) -> tuple[str, ...]:
    """Root-relative source folders in always-ignored folders that MDVDB_SOURCE_DIRS names
    (walked, with a warning)."""
    return tuple(s.rel for s in source_folders(config) if s.rel and s.problem and not s.skipped)


def always_ignored(rel: str, named: tuple[str, ...] = ()) -> bool:
    """Whether the root-relative file `rel` lies in an always-ignored folder that no named
    source folder (`named_ignored_folders`) opens: the watcher's cheap first cut."""
    parts = rel.split("/")[:-1]
    for depth, part in enumerate(parts):
        if part in BUILTIN_IGNORES:
            folder = "/".join(parts[: depth + 1])
            # opened when a named source is this folder or lies in it, and holds the file
            if not any(
                (n == folder or n.startswith(folder + "/")) and rel.startswith(n + "/")
                for n in named
            ):
                return True
    return False


def _gitignored_folder(config: Config, rel: str) -> bool:
    """Whether the .gitignore files above `rel` (or the user's patterns) ignore it or one of
    its parent folders, as a walk descending from the top would have."""
    rules = Rules.for_folder(config, "").entering(config.root, "")
    folder = ""
    present = True
    for part in rel.split("/"):
        folder = f"{folder}/{part}" if folder else part
        if rules.ignored(folder, True):
            return True
        if present:
            path = config.root / folder
            present = path.is_dir()
            if present:
                rules = rules.entering(path, folder)
    return False


# -- .gitignore files above a folder ----------------------------------------------------------


def repository_top(root: Path) -> Path | None:
    """The work tree holding `root` (the nearest folder, the root included, with a `.git`)."""
    for folder in (root, *root.parents):
        if os.path.lexists(os.path.join(folder, ".git")):
            return folder
    return None


def read_gitignore(folder: Path | str, problems: list[tuple[str, str]] | None = None) -> list[str]:
    """A folder's .gitignore lines; none when absent or unreadable. Never through a symlink,
    a FIFO or a device, at most 1 MiB (`read_own`); such a file goes to `problems`."""
    path = os.path.join(folder, GITIGNORE)
    try:
        raw = read_own(path)
    except Refused as exc:
        if problems is not None:
            problems.append((path, f"{exc.strerror}; its patterns are not applied"))
        return []
    except OSError:
        return []
    return [] if raw is None else raw.decode("utf-8", errors="replace").splitlines()


class _Line:
    """One pattern line of a .gitignore, taken apart (no dataclass: import time)."""

    __slots__ = ("negated", "anchored", "dir_only", "segments")

    def __init__(self, negated: bool, anchored: bool, dir_only: bool, segments: list[str]):
        self.negated = negated
        self.anchored = anchored
        self.dir_only = dir_only
        self.segments = segments

    @classmethod
    def parse(cls, raw: str) -> _Line | None:
        line = raw.rstrip("\r")
        if line.endswith(" ") and not line.endswith("\\ "):
            line = line.rstrip(" ")
        if not line or line.startswith("#"):
            return None
        negated = line.startswith("!")
        body = line[1:] if negated else line
        dir_only = body.endswith("/")
        core = body.rstrip("/")
        anchored = "/" in core
        core = core.lstrip("/")
        if not core:
            return None
        return cls(negated, anchored, dir_only, core.split("/"))

    def text(self, segments: list[str], anchored: bool) -> str:
        body = "/".join(segments)
        return (
            ("!" if self.negated else "")
            + ("/" if anchored else "")
            + body
            + ("/" if self.dir_only else "")
        )


def translate_inside(lines: list[str], folder: str) -> list[str]:
    """A .gitignore of the root-relative `folder` as root-relative lines."""
    if not folder:
        return [line for line in lines if _Line.parse(line)]
    out = []
    for raw in lines:
        line = _Line.parse(raw)
        if line is None:
            continue
        prefix = [_escaped(part) for part in folder.split("/")]
        if not line.anchored:
            prefix.append("**")
        out.append(line.text(prefix + line.segments, True))
    return out


def _escaped(name: str) -> str:
    """A folder name as a literal inside a gitignore pattern (`a[1]` is not a class)."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in name)


def translate_above(lines: list[str], below: str) -> list[str]:
    """A .gitignore of an ancestor of the root as root-relative lines (`below`: the root's
    path from it); a pattern matching the root or its parents is dropped."""
    out = []
    path = below.split("/")
    for raw in lines:
        line = _Line.parse(raw)
        if line is None:
            continue
        if not line.anchored:
            out.append(line.text(line.segments, False))
            continue
        for rest in _remainders(line.segments, path):
            if rest:
                out.append(line.text(rest, True))
    return list(dict.fromkeys(out))


def _remainders(segments: list[str], path: list[str]) -> list[list[str]]:
    """What is left of an anchored pattern after it matched every segment of `path`."""
    if not path:
        return [segments]
    if not segments:
        return []
    first = segments[0]
    if first == "**":
        return _remainders(segments, path[1:]) + _remainders(segments[1:], path)
    if fnmatchcase(path[0], first):
        return _remainders(segments[1:], path[1:])
    return []


def above_lines(config: Config, folder: str) -> list[str]:
    """Root-relative lines of every .gitignore above the root-relative `folder`, from the top
    of the repository (or the root), shallowest first."""
    root = config.root
    out: list[str] = []
    top = repository_top(root)
    if top is not None and top != root:
        chain = []
        folder_up = root.parent
        while True:
            chain.append(folder_up)
            if folder_up == top or folder_up == folder_up.parent:
                break
            folder_up = folder_up.parent
        for ancestor in reversed(chain):
            lines = read_gitignore(ancestor)
            if lines:
                out += translate_above(lines, root.relative_to(ancestor).as_posix())
    if folder:
        parts = folder.split("/")
        for depth in range(len(parts)):
            between = "/".join(parts[:depth])
            lines = read_gitignore(root / between if between else root)
            if lines:
                out += translate_inside(lines, between)
    return out


def user_patterns(config: Config) -> list[str]:
    """MDVDB_IGNORE_PATTERNS as gitignore lines; only exclusions (see the module docstring)."""
    return [p.strip() for p in config.ignore_patterns if p.strip() and not p.startswith("!")]


# -- the walk's form ---------------------------------------------------------------------------


class Rules:
    """The rules in force in one folder of the walk: `specs`, (root-relative base, spec)
    shallowest first, the deepest with an opinion deciding; `user` (MDVDB_IGNORE_PATTERNS)
    always wins."""

    __slots__ = ("specs", "user", "active")

    def __init__(
        self,
        specs: tuple[tuple[str, pathspec.PathSpec], ...],
        user: pathspec.PathSpec | None = None,
    ):
        self.specs = specs
        self.user = user
        self.active = bool(specs) or user is not None  # read per file: not a property

    @classmethod
    def for_folder(cls, config: Config, folder: str, above: bool = True) -> Rules:
        """The rules at the start of a walk of the root-relative `folder`: the user's patterns
        and (`above`) every .gitignore above it; its own is added when the walk enters it."""
        user = user_patterns(config)
        lines = above_lines(config, folder) if above else []
        if not user and not lines:
            return cls(())  # nothing to match: `mdvdb grep` then never imports pathspec
        import pathspec

        specs: tuple[tuple[str, pathspec.PathSpec], ...] = ()
        if lines:
            specs = (("", pathspec.GitIgnoreSpec.from_lines(lines)),)
        return cls(specs, pathspec.GitIgnoreSpec.from_lines(user) if user else None)

    def entering(
        self, folder: Path | str, rel: str, problems: list[tuple[str, str]] | None = None
    ) -> Rules:
        """These rules plus the .gitignore of `folder` (root-relative `rel`), if it has one;
        one that cannot be read safely goes to `problems` as (its root-relative path, why)."""
        refused: list[tuple[str, str]] | None = [] if problems is not None else None
        lines = read_gitignore(folder, refused)
        if refused and problems is not None:
            problems += [(f"{rel}/{GITIGNORE}" if rel else GITIGNORE, why) for _, why in refused]
        return self.adding(lines, rel)

    def adding(self, lines: list[str], rel: str) -> Rules:
        """These rules plus the .gitignore `lines` of the root-relative folder `rel`."""
        if not lines:
            return self
        import pathspec

        spec = pathspec.GitIgnoreSpec.from_lines(lines)
        if not spec.patterns:
            return self
        return Rules((*self.specs, (rel, spec)), self.user)

    def ignored(self, rel: str, is_dir: bool) -> bool:
        key = rel + "/" if is_dir else rel
        if self.user is not None and self.user.match_file(key):
            return True
        return self.gitignored(rel, is_dir)

    def gitignored(self, rel: str, is_dir: bool) -> bool:
        for base, spec in reversed(self.specs):
            if base:
                if not rel.startswith(base + "/"):
                    continue
                sub = rel[len(base) + 1 :]
            else:
                sub = rel
            found = spec.check_file(sub + "/" if is_dir else sub).include
            if found is not None:
                return found
        return False


# -- ripgrep's form ----------------------------------------------------------------------------

# rg reads no rules file of its own (not even a .gitignore: docs/architecture.md, "Project
# files and ignore rules"), and hidden files, as the walk does.
RG_FLAGS = (
    "--hidden",
    "--no-ignore-dot",
    "--no-ignore-global",
    "--no-ignore-exclude",
    "--no-ignore-parent",
    "--no-ignore-vcs",
)


@dataclass
class RgRules:
    """The rules as ripgrep arguments: rg runs with `cwd` = the root, folders inside it given
    relative, so that anchored patterns mean the same to rg and to the walk."""

    cwd: Path
    flags: list[str]
    ignore_lines: list[str]  # written to a file given with --ignore-file, when any
    problems: list[str] = field(default_factory=list)  # .gitignore files not read: one line each

    def path_argument(self, path: Path) -> str:
        """How a search path is given to rg: relative to the root when inside it."""
        try:
            rel = path.relative_to(self.cwd).as_posix()
        except ValueError:
            return str(path)
        return rel if rel != "." else "."


def rg_rules(config: Config, paths: list[Path]) -> RgRules:
    """The rules for a run of rg over `paths` (absolute folders or files)."""
    flags = list(RG_FLAGS)
    for name in sorted(BUILTIN_IGNORES):
        flags += ["--glob", f"!{name}/"]
    root = config.root
    for own in (config.state_path, config.index_path, config.shards_path):
        if inside(own, root) and own != root:
            flags += ["--glob", "!/" + own.resolve().relative_to(root).as_posix()]
    for pattern in user_patterns(config):
        flags += ["--glob", "!" + pattern]
    lines: dict[str, None] = {}
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    walked: list[Path] = []
    for path in paths:
        is_dir = path.is_dir()
        try:
            rel: str | None = path.relative_to(root).as_posix()
        except ValueError:
            rel = None  # outside the root (--include): its own .gitignore files only
        if rel is not None:
            folder = "" if rel == "." else rel if is_dir else rel.rpartition("/")[0]
            if folder not in seen:
                seen.add(folder)
                lines.update(dict.fromkeys(above_lines(config, folder)))
        if is_dir and not any(walked_within(path, other) for other in walked):
            walked.append(path)
            lines.update(dict.fromkeys(gitignores_below(config, path, rel, problems)))
    shown = [f"{where}: {why}" for where, why in problems]
    return RgRules(root, flags, list(lines), shown)


def gitignores_below(
    config: Config, start: Path, rel: str | None, problems: list[tuple[str, str]]
) -> list[str]:
    """The lines of every .gitignore in and below `start` that the walk would enter,
    shallowest first, each anchored to its folder (root-relative, else absolute); one read
    refuses goes to `problems` (docs/architecture.md, "Project files and ignore rules")."""
    skip = {str(config.index_path), str(config.state_path), str(config.shards_path)}
    base = "" if rel in (None, ".") else rel
    top = Rules.for_folder(config, base, above=rel is not None)
    counts: dict[int, bool] = {}  # device -> its folders' link counts count their subfolders
    out: list[str] = []
    stack = [(str(start), base, top)]
    while stack:
        folder, folder_rel, rules = stack.pop()
        refused: list[tuple[str, str]] = []
        own = read_gitignore(folder, refused)
        problems += [(_shown(config.root, where, rel), why) for where, why in refused]
        if own:
            anchor = folder_rel if rel is not None else folder.lstrip("/")
            out += translate_inside(own, anchor)
            rules = rules.adding(own, folder_rel)
        try:
            info = os.stat(folder)
            if info.st_nlink == 2 and counts.get(info.st_dev):
                continue  # no subfolder
            with os.scandir(folder) as entries:
                subs = [e for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue  # rg says itself what it cannot list
        if subs and info.st_dev not in counts:
            counts[info.st_dev] = info.st_nlink == len(subs) + 2
        below = []
        for entry in subs:
            child = f"{folder_rel}/{entry.name}" if folder_rel else entry.name
            if entry.name in BUILTIN_IGNORES or entry.path in skip:
                continue
            if rules.active and rules.ignored(child, True):
                continue
            below.append((entry.path, child, rules))
        stack += reversed(below)
    return out


def _shown(root: Path, path: str, rel: str | None) -> str:
    """A path for a warning: root-relative inside the root."""
    if rel is None:
        return path
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return path
