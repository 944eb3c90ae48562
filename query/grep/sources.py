"""The root-source registry: where the folders `mdvdb grep` searches come from
(docs/grep.md). A source type is a name and a function `roots(config) -> (id, path)` pairs;
the core has `dir` (MDVDB_SOURCE_DIRS), wrapper packages add types through the `mdvdb.sources`
entry-point group. Entry points are read from `entry_points.txt` directly: importing
`importlib.metadata` costs more than grep's whole budget (docs/benchmarks.md, "`mdvdb grep` vs
raw ripgrep")."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kernel.config import Config, source_id

ENTRY_POINT_GROUP = "mdvdb.sources"
BUILTIN_TYPE = "dir"

RootsFunction = Callable[[Config], Iterable[tuple[str, "str | Path"]]]


class SourceError(ValueError):
    """A source filter or source type that cannot be used; `usage` errors exit 2."""

    def __init__(self, message: str, usage: bool = True):
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True)
class Root:
    """One named folder (or file) to search."""

    type: str
    id: str
    path: Path  # absolute

    @property
    def label(self) -> str:
        return f"{self.type}:{self.id}"


def dir_roots(config: Config) -> list[tuple[str, Path]]:
    """The built-in `dir` type: each configured source folder that ingest would walk (inside
    the root, not ignored; `kernel.project_files`), named as configured."""
    from kernel.project_files import source_folders

    return [(s.name, s.path) for s in source_folders(config) if not s.skipped]


def dir_warnings(config: Config) -> list[str]:
    """The one-line verdicts on configured source folders, as ingest reports them."""
    from kernel.project_files import source_folders

    return [s.warning for s in source_folders(config) if s.warning]


BUILTINS: dict[str, RootsFunction] = {BUILTIN_TYPE: dir_roots}
BUILTIN_TARGETS = {BUILTIN_TYPE: "query.grep.sources:dir_roots"}


@dataclass
class SourceType:
    """A registered type; `target` is the entry point's `module:attr`, loaded on first use."""

    name: str
    target: str
    function: RootsFunction | None = None

    def load(self) -> RootsFunction:
        if self.function is None:
            module_name, _, attr = self.target.partition(":")
            try:
                obj = importlib.import_module(module_name.strip())
                for part in attr.strip().split(".") if attr.strip() else []:
                    obj = getattr(obj, part)
            except Exception as exc:
                raise SourceError(
                    f"source type {self.name!r} ({self.target}) cannot be loaded: {exc}",
                    usage=False,
                ) from None
            if not callable(obj):
                raise SourceError(
                    f"source type {self.name!r} ({self.target}) is not callable", usage=False
                )
            self.function = obj
        return self.function

    def roots(self, config: Config) -> list[Root]:
        try:
            pairs = list(self.load()(config))
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(
                f"source type {self.name!r} failed to list its roots: {exc}", usage=False
            ) from None
        roots = []
        for ident, path in pairs:
            folder = Path(path)
            if not folder.is_absolute():
                folder = config.root / folder
            roots.append(Root(self.name, str(ident), Path(os.path.abspath(folder))))
        return roots


class Registry:
    """Every registered source type by name: the built-ins, then the entry points."""

    def __init__(self, types: dict[str, SourceType]):
        self.types = types

    @classmethod
    def load(cls, search_path: Iterable[str] | None = None) -> Registry:
        types = {name: SourceType(name, BUILTIN_TARGETS[name], fn) for name, fn in BUILTINS.items()}
        for name, target in entry_points(ENTRY_POINT_GROUP, search_path):
            # The core's own type stays the core's: an entry point cannot replace it.
            types.setdefault(name, SourceType(name, target))
        return cls(types)

    @property
    def names(self) -> list[str]:
        return sorted(self.types)

    def get(self, name: str) -> SourceType:
        try:
            return self.types[name]
        except KeyError:
            raise SourceError(
                f"unknown source type {name!r}; registered types: {', '.join(self.names)}"
            ) from None

    def roots(self, config: Config, names: Iterable[str] | None = None) -> list[Root]:
        found: list[Root] = []
        for name in self.names if names is None else names:
            found.extend(self.get(name).roots(config))
        return found


def entry_points(group: str, search_path: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(name, `module:attr`) for `group` from installed distributions' `entry_points.txt`, in
    `sys.path` order, the first distribution of a name winning (as `importlib.metadata`)."""
    found: list[tuple[str, str]] = []
    seen_dists: set[str] = set()
    for entry in sys.path if search_path is None else search_path:
        try:
            listing = os.scandir(entry or ".")
        except OSError:
            continue
        with listing:
            for item in listing:
                name = item.name
                if not name.endswith((".dist-info", ".egg-info")):
                    continue
                dist = name.rsplit(".", 1)[0].split("-", 1)[0].lower().replace("_", "-")
                if dist in seen_dists:
                    continue
                seen_dists.add(dist)
                try:
                    with open(os.path.join(item.path, "entry_points.txt"), encoding="utf-8") as fh:
                        text = fh.read()
                except OSError:
                    continue
                if group in text:
                    found.extend(parse_entry_points(text, group))
    return found


def parse_entry_points(text: str, group: str) -> list[tuple[str, str]]:
    """The `name = target` lines of one `[group]` section (the entry_points.txt INI format)."""
    found = []
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            continue
        if current == group and "=" in line:
            name, _, target = line.partition("=")
            target = target.split("[", 1)[0].strip()  # drop an `[extras]` suffix
            found.append((name.strip(), target))
    return found


@dataclass(frozen=True)
class SourceFilter:
    """`--source TYPE` or `--source TYPE:ID` (the id compared case-insensitively)."""

    type: str
    id: str | None

    @classmethod
    def parse(cls, spec: str) -> SourceFilter:
        kind, sep, ident = spec.strip().partition(":")
        if not kind or (sep and not ident.strip()):
            raise SourceError(f"--source {spec!r}: expected TYPE or TYPE:ID")
        return cls(kind.strip(), source_id(ident) if sep else None)

    def matches(self, root: Root) -> bool:
        if root.type != self.type:
            return False
        return self.id is None or source_id(root.id).casefold() == self.id.casefold()


@dataclass
class Selection:
    """The roots of one run: `search` goes to rg, `dropped` roots only claim files; `warnings`:
    the skipped source folders, one line each."""

    search: list[Root]
    dropped: list[Root]
    config: Config | None = None
    warnings: list[str] = field(default_factory=list)

    def owner(self, path: str) -> Root | None:
        """The most specific root holding `path`, kept or dropped."""
        best: Root | None = None
        best_len = -1
        for root in (*self.search, *self.dropped):
            prefix = str(root.path)
            if (path == prefix or path.startswith(prefix.rstrip("/") + "/")) and len(
                prefix
            ) > best_len:
                best, best_len = root, len(prefix)
        return best


def select_roots(
    config: Config,
    registry: Registry,
    sources: Iterable[str] = (),
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    drop_blacklisted: bool = False,
) -> Selection:
    """Apply the filters of one run; roots that do not exist locally are left out silently."""
    filters = [SourceFilter.parse(spec) for spec in sources]
    for f in filters:
        registry.get(f.type)  # an unregistered type is a usage error naming the registered ones
    wanted_types = sorted({f.type for f in filters}) if filters else None
    candidates = registry.roots(config, wanted_types)
    for f in filters:
        if f.id is not None and not any(f.matches(r) for r in candidates):
            known = ", ".join(r.id for r in candidates if r.type == f.type) or "none"
            raise SourceError(f"--source {f.type}:{f.id}: no such source; {f.type} ids: {known}")
    if filters:
        candidates = [r for r in candidates if any(f.matches(r) for f in filters)]
    for raw in include:
        path = Path(raw).expanduser()
        path = path if path.is_absolute() else Path.cwd() / path
        candidates.append(Root("path", raw, Path(os.path.abspath(path))))

    excluded = {raw: Path(os.path.abspath(Path(raw).expanduser())) for raw in exclude}
    blacklist = [SourceFilter.parse(spec) for spec in config.blacklisted_sources]
    kept: list[Root] = []
    # An excluded folder inside a root is kept as a dropped root: it claims its files.
    dropped = [Root("exclude", raw, path) for raw, path in excluded.items() if path.exists()]
    seen: set[tuple[str, Path]] = set()
    for root in candidates:
        if (root.type, root.path) in seen or not root.path.exists():
            continue
        seen.add((root.type, root.path))
        is_excluded = any(root.path == e or e in root.path.parents for e in excluded.values())
        is_black = (
            drop_blacklisted and root.type != "path" and any(f.matches(root) for f in blacklist)
        )
        (dropped if is_excluded or is_black else kept).append(root)
    warnings = dir_warnings(config) if wanted_types is None or BUILTIN_TYPE in wanted_types else []
    return Selection(kept, dropped, config, warnings)


def search_paths(selection: Selection) -> list[Path]:
    """The kept roots minus those nested in another kept root (rg would search them twice),
    unless an always-ignored folder stands between them (rg would not search them at all)."""
    from kernel.project_files import walked_within

    paths = sorted({r.path for r in selection.search}, key=lambda p: (len(p.parts), str(p)))
    top: list[Path] = []
    for path in paths:
        if not any(walked_within(path, t) for t in top):
            top.append(path)
    order = {r.path: i for i, r in reversed(list(enumerate(selection.search)))}
    return sorted(top, key=lambda p: order[p])
