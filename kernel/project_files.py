"""What is in a project: the one set of rules that ingest, watch, status and grep all apply.

A file is in the project when it is Markdown (`*.md`, `*.markdown`), lies under a source folder
that is inside the root, and nothing ignores it:

- the always-ignored folders (`BUILTIN_IGNORES`: node_modules/, build/, .git/ ...), at any depth;
- the index file and the state folder;
- `MDVDB_IGNORE_PATTERNS` (gitignore syntax, relative to the root; they only exclude: a
  `!pattern` there is dropped, since nothing could follow it anywhere else);
- every `.gitignore` on the way down: from the top of the git repository holding the root (or
  the root itself when there is none) to the file's folder. Deeper files win, as in git.

Two consumers read the rules differently. The walk (`pipeline.walk.discover`) applies them with
`pathspec`, folder by folder. `mdvdb grep` hands them to ripgrep (`rg_rules`): the built-ins and
user patterns as `--glob !...` overrides (which nothing re-includes), the `.gitignore` files
below each searched folder natively, and the ones above it (above the root included) translated
into one root-relative ignore file, since ripgrep's own reading of parent `.gitignore` files
misses patterns anchored to another folder. rg runs in the root, so anchored patterns mean the
same to both.

A source folder named in `MDVDB_SOURCE_DIRS` is used when it resolves inside the root (or
`MDVDB_FOLLOW_SYMLINKS_OUTSIDE_ROOT=true`); one that a `.gitignore` ignores is skipped; one that
is, or lies in, an always-ignored folder is used with a warning, because naming it is a request
but easy to make by mistake (`MDVDB_SOURCE_DIRS=.,build`). Each of these comes with one line
(`SourceFolder.problem`) that ingest and grep print alike.

This module imports only the standard library at import time: `mdvdb grep` loads it on its
~100 ms budget; `pathspec` is imported by the walk's functions only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

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
        ".obsidian",
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

    @property
    def warning(self) -> str | None:
        return f"{self.raw}: {self.problem}" if self.problem else None


def inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
        return True
    except ValueError:
        return False


def source_folders(config: Config) -> list[SourceFolder]:
    """Every configured source folder with its verdict, in configuration order."""
    out = []
    for raw, path in zip(config.source_dirs, config.source_paths(), strict=True):
        if not inside(path, config.root):
            if config.follow_outside_root:
                out.append(SourceFolder(raw, path, None))
            else:
                out.append(
                    SourceFolder(
                        raw,
                        path,
                        None,
                        True,
                        "source folder is outside the project root, skipped",
                    )
                )
            continue
        rel = path.relative_to(config.root).as_posix()
        rel = "" if rel == "." else rel
        builtin = [part for part in rel.split("/") if part in BUILTIN_IGNORES] if rel else []
        if rel and _gitignored_folder(config, rel):
            out.append(
                SourceFolder(
                    raw,
                    path,
                    rel,
                    True,
                    "source folder is ignored by a .gitignore or MDVDB_IGNORE_PATTERNS, skipped",
                )
            )
        elif builtin:
            out.append(
                SourceFolder(
                    raw,
                    path,
                    rel,
                    False,
                    f"source folder is in the always-ignored folder {builtin[0]}/: "
                    "searched because MDVDB_SOURCE_DIRS names it",
                )
            )
        else:
            out.append(SourceFolder(raw, path, rel))
    return out


def walked_within(inner: Path, outer: Path) -> bool:
    """Whether a walk of the folder `outer` reaches the folder `inner`: it lies below (or is)
    `outer` and no always-ignored folder stands between them. A source folder a walk of another
    one reaches is not walked (or searched) twice."""
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
    parts = rel.split("/")
    for depth in range(1, len(parts) + 1):
        folder = "/".join(parts[:depth])
        if Rules.for_folder(config, folder).ignored(folder, True):
            return True
    return False


# -- .gitignore files above a folder ----------------------------------------------------------


def repository_top(root: Path) -> Path | None:
    """The work tree holding `root` (the nearest folder, the root included, with a `.git`)."""
    for folder in (root, *root.parents):
        if os.path.lexists(os.path.join(folder, ".git")):
            return folder
    return None


def read_gitignore(folder: Path | str) -> list[str]:
    """A folder's .gitignore lines; none when absent or unreadable (the walk reports what it
    cannot read; a rules file it cannot read ignores nothing)."""
    try:
        with open(os.path.join(folder, GITIGNORE), encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()
    except OSError:
        return []


class _Line:
    """One pattern line of a .gitignore, taken apart (a plain class: each dataclass costs
    import time on `mdvdb grep`'s budget)."""

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
    """A .gitignore of an ancestor of the root as root-relative lines; `below` is the root's
    path from that ancestor. A pattern that would match the root or one of its parents is
    dropped: a .gitignore above cannot hide the project one asked for."""
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
    """Root-relative lines of every .gitignore above the root-relative `folder` (from the top
    of the repository, or from the root when there is none), shallowest first: deeper lines
    come later and so win."""
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
    """The rules in force in one folder of the walk.

    `specs`: (base folder relative to the root, gitignore spec), shallowest first; the deepest
    spec with an opinion decides, as in git. `user`: MDVDB_IGNORE_PATTERNS, which always wins.
    """

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

    def entering(self, folder: Path | str, rel: str) -> Rules:
        """These rules plus the .gitignore of `folder` (root-relative `rel`), if it has one."""
        lines = read_gitignore(folder)
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

# rg reads no rules of its own beyond the .gitignore files below the folders it is given:
# not .ignore/.rgignore, not the user's global excludes, not .git/info/exclude, not the
# .gitignore files above (those come translated in the ignore file), and it needs no git
# repository to honour a .gitignore. It reads hidden files, as the walk does.
RG_FLAGS = (
    "--hidden",
    "--no-ignore-dot",
    "--no-ignore-global",
    "--no-ignore-exclude",
    "--no-ignore-parent",
    "--no-require-git",
)


@dataclass
class RgRules:
    """The rules as ripgrep arguments: rg runs with `cwd` = the root, folders inside it given
    relative, so that anchored patterns mean the same to rg and to the walk."""

    cwd: Path
    flags: list[str]
    ignore_lines: list[str]  # written to a file given with --ignore-file, when any

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
    seen: set[str] = set()
    for path in paths:
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            continue  # outside the root (--include): its own .gitignore files only
        folder = "" if rel == "." else rel if path.is_dir() else rel.rpartition("/")[0]
        if folder in seen:
            continue
        seen.add(folder)
        lines.update(dict.fromkeys(above_lines(config, folder)))
    return RgRules(root, flags, list(lines))
