"""The read side's front: `open_index` and `Index`, a `query.snapshot.Reader` plus one method
per query, each calling down into the module that answers it (docs/architecture.md,
"Inside query/: one direction")."""

from __future__ import annotations

import importlib
import inspect
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import MethodType
from typing import TYPE_CHECKING, Any

import numpy as np

from kernel import index_format
from kernel.config import DEFAULT_LIMIT, Config, ConfigError, load_config
from kernel.off_loop import async_twin
from query.results import Document, Problem, Section, Status
from query.snapshot import QueryError, Reader, Snapshot, provider_mismatch

if TYPE_CHECKING:
    from query.clusters import ClusterList
    from query.grep.ripgrep import Match
    from query.links import Link
    from query.schema import Schema

__all__ = ["Index", "QueryError", "Snapshot", "open_index"]


class OnPinnedSnapshot:
    """A method of `Index` that calls `module.name(index, ...)` on one pinned snapshot, with the
    function's own typed signature; the module is imported on the first call."""

    def __init__(self, module: str, name: str, doc: str) -> None:
        self.module, self.name = module, name
        self.__name__ = self.__qualname__ = name
        self.__doc__ = inspect.cleandoc(doc)

    def function(self) -> Callable[..., Any]:
        return getattr(importlib.import_module(self.module), self.name)

    def __call__(self, index: Reader, *args: Any, **kwargs: Any) -> Any:
        function = self.function()
        with index.pinned():
            return function(index, *args, **kwargs)

    def __get__(self, instance: Reader | None, owner: type | None = None) -> Any:
        return self if instance is None else MethodType(self, instance)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.function())


if TYPE_CHECKING:
    from typing import Concatenate, ParamSpec, TypeVar

    from query.rank.search import search as query_search

    P = ParamSpec("P")
    R = TypeVar("R")

    def _typed_as_method(
        function: Callable[Concatenate[Reader, P], R],
    ) -> Callable[Concatenate[Index, P], R]: ...


class Index(Reader):
    """A project's index, opened read-only: search, get_document(s), links, backlinks,
    orphans, status, schema, clusters, grep and their `a...` forms. Cheap to create; maps
    the file on first use."""

    # -- queries --------------------------------------------------------------------------
    if TYPE_CHECKING:
        search = _typed_as_method(query_search)
    else:
        search = OnPinnedSnapshot(
            "query.rank.search",
            "search",
            """Ranked sections for `query` (`mdvdb search --json`): `query.rank.search.search` on
            one pinned snapshot, with its parameters. None takes the configured default
            (MDVDB_SEARCH_DEFAULT_LIMIT, _MIN_SCORE, _MODE); `filters` and `cluster` restrict
            the candidates, `mask` is one boolean per chunk; `per_file` caps sections a file,
            `collapse=False` keeps near-duplicate copies (`diversity`: both, precomputed).""",
        )

    def schema(self) -> Schema:
        """The frontmatter schema merged with the overlay (`mdvdb schema --json`, less the
        file count). QueryError for an index written before schemas were indexed."""
        from query.schema import load_schema

        with self.pinned() as snap:
            merged = load_schema(snap)
        if not merged.present:
            raise QueryError("this index has no frontmatter schema yet: run `mdvdb ingest`")
        return merged

    def clusters(self) -> ClusterList:
        """The topic clusters (`mdvdb clusters --json`). QueryError when the index was built
        with MDVDB_CLUSTERING_ENABLED=false."""
        from query.clusters import list_clusters

        with self.pinned():
            return list_clusters(self)

    def grep(
        self,
        pattern: str,
        *,
        regex: bool = False,
        limit: int = DEFAULT_LIMIT,
        per_file_limit: int = 50,
        sources: Sequence[str] = (),
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        file_type: str = "md",
        sort: bool = False,
        include_frontmatter: bool = False,
        exclude_blacklisted: bool = False,
    ) -> list[Match]:
        """Exact text over the source folders with ripgrep, as `mdvdb grep --json` (needs no index).
        Raises `query.grep.sources.SourceError` for a bad source filter and
        `query.grep.ripgrep.GrepError` for a pattern rg refuses or no root to search."""
        import tempfile

        from query.grep import ripgrep as grepping
        from query.grep.sources import Registry, select_roots

        if not pattern:
            raise grepping.GrepError("a pattern is required")
        if limit < 1 or per_file_limit < 1:
            raise grepping.GrepError("limit and per_file_limit must be at least 1")
        config = self.config
        selection = select_roots(
            config,
            Registry.load(),
            sources=sources,
            include=include,
            exclude=exclude,
            drop_blacklisted=exclude_blacklisted,
        )
        options = grepping.GrepOptions(
            pattern=pattern,
            limit=limit,
            per_file_limit=per_file_limit,
            file_type=file_type,
            regex=regex,
            sort=sort,
            include_frontmatter=include_frontmatter,
        )
        with tempfile.TemporaryFile() as errors:  # a file: rg can never block writing to it
            run = grepping.start(
                options, selection, config.root, config.page_id_field, stderr=errors
            )
            matches = list(run)
            if run.returncode == 2 and not matches:
                errors.seek(0)
                said = errors.read().decode("utf-8", "replace")
                literal = "regex=False searches for the literal text"
                raise grepping.GrepError(grepping.rg_complaint(said, pattern, regex, literal))
        return matches

    def get_document(
        self,
        path: str,
        start_line: int | None = None,
        end_line: int | None = None,
        max_tokens: int | None = None,
        offset: int = 0,
    ) -> Document:
        """One indexed document (`mdvdb get --json`): `path` as `query.documents` reads it;
        `start_line`/`end_line` (1-based) keep those lines; `max_tokens` (about four characters
        each) pages the content from `offset` (the Document's `next_offset` says where the next
        starts)."""
        with self.pinned():
            wanted = self._wanted(path)
            if len(wanted) != 1:
                raise QueryError(
                    f"{path}: names {len(wanted)} files; give one (get_documents reads several)"
                )
            one = wanted[0]
            first = start_line if start_line is not None else one.start_line
            last = end_line if end_line is not None else one.end_line
            return self._get_document(one.path, first, last, max_tokens, offset)

    def get_documents(
        self, targets: Sequence[str], max_tokens: int | None = None
    ) -> list[Document]:
        """Every document the targets name (paths, ranges, ids, globs, note names; each file
        once, in the order named), each cut to `max_tokens` as `get_document` does."""
        with self.pinned():
            seen: dict[tuple, None] = {}
            for target in targets:
                for one in self._wanted(target):
                    seen.setdefault((one.path, one.start_line, one.end_line))
            return [self._get_document(*key, max_tokens, 0) for key in seen]

    def _wanted(self, target: str) -> list[Any]:
        from query.documents import targets

        snap = self.snapshot
        known = set(snap.paths)
        try:
            rel = self._relative(target)
        except QueryError as outside:  # unless it is an id, a name or a glob: refused
            try:
                return targets(snap, target, known)
            except QueryError:
                raise outside from None
        return targets(snap, rel if rel in known else target, known)

    def links(self, path: str) -> list[Link]:
        """The links `path` (a path, id or unique note name) holds, in line order, each with
        the indexed file it resolves to (`mdvdb links --json`)."""
        from query import links as graph

        with self.pinned() as snap:
            file_id = self.path_id(self._one(path))
            return graph.links(snap, file_id)

    def backlinks(self, path: str) -> list[Link]:
        """The links of other indexed files that resolve to `path` (`mdvdb backlinks`)."""
        from query import links as graph

        with self.pinned() as snap:
            return graph.backlinks(snap, self._one(path))

    def orphans(self) -> list[str]:
        """The indexed files with no link to or from another indexed file (`mdvdb orphans`)."""
        from query import links as graph

        with self.pinned() as snap:
            return graph.orphans(snap)

    def path_of(self, target: str) -> str:
        """The one indexed path a target names (a path, an id, a unique note name)."""
        with self.pinned():
            return self._one(target)

    def id_of(self, path: str) -> str:
        """The document id of an indexed path (kernel/doc_ids.py)."""
        from kernel import doc_ids

        with self.pinned() as snap:
            return doc_ids.id_of(path, snap.meta.get(index_format.DOC_IDS_META_KEY))

    def _one(self, target: str) -> str:
        wanted = self._wanted(target)
        if len(wanted) != 1:
            raise QueryError(f"{target}: names {len(wanted)} files; give one")
        return wanted[0].path

    def _get_document(
        self,
        rel: str,
        start_line: int | None = None,
        end_line: int | None = None,
        max_tokens: int | None = None,
        offset: int = 0,
    ) -> Document:
        from kernel import doc_ids
        from query.documents import page

        snap = self.snapshot
        file_id = self.path_id(rel)
        if file_id is None:
            raise QueryError(f"{rel}: not in the index")
        files = snap.table("files")
        row = {name: files.column(name)[file_id].as_py() for name in files.column_names}
        chunks = snap.table("chunks")
        ids = np.flatnonzero(snap.chunk_file_ids == file_id)
        sections = [
            Section(
                chunks.column("heading")[i].as_py(),
                chunks.column("heading_path")[i].as_py(),
                chunks.column("start_line")[i].as_py(),
                chunks.column("end_line")[i].as_py(),
            )
            for i in ids
        ]
        try:
            content = _read_note(self.config, rel)
        except OSError:  # gone, or no longer the regular file inside the root it was
            content = "\n\n".join(chunks.column("text")[int(i)].as_py() for i in ids)
        shown = page(content, start_line, end_line, max_tokens, offset)
        return Document(
            path=rel,
            title=row["title"],
            sha256=row["sha256"],
            metadata=json.loads(row["frontmatter"] or "{}"),
            content=shown.content,
            sections=sections,
            parse_error=row["parse_error"],
            cluster_id=row["cluster_id"],
            id=doc_ids.id_of(rel, snap.meta.get(index_format.DOC_IDS_META_KEY)),
            start_line=shown.start_line,
            end_line=shown.end_line,
            total_lines=shown.total_lines,
            offset=shown.offset,
            next_offset=shown.next_offset,
        )

    def status(self, check_files: bool = True) -> Status:
        try:
            with self.pinned():
                return self._status(check_files)
        except index_format.IndexDamaged:
            raise  # one line telling the user to rebuild, not "no index"
        except index_format.IndexFormatError:
            return Status(index_path=str(self.source), exists=False, root=str(self.config.root))

    def _status(self, check_files: bool) -> Status:
        status = Status(index_path=str(self.source), exists=False, root=str(self.config.root))
        snap = self.snapshot
        meta = snap.meta
        status.exists = True
        status.files = int(meta.get("files", 0))
        status.chunks = int(meta.get("chunks", 0))
        status.index_bytes = snap.file.size
        status.last_update = meta.get("written_at")
        status.provider = meta.get("provider")
        status.model = meta.get("model")
        status.dimensions = meta.get("dimensions")
        status.format_version = meta.get("format_version")
        status.errors, status.errors_left_out = self._problems(meta)
        status.provider_mismatch = provider_mismatch(meta, self.config)
        from query.links import broken_links

        status.broken_links = broken_links(snap)
        if check_files:
            status.stale_files = self._stale_files()
        return status

    def _problems(self, meta: dict[str, Any]) -> tuple[list[Problem], int]:
        """Every file's current problem by path, and how many the meta's cap left out: the files
        table's parse errors, then what the last ingest recorded."""
        files = self.snapshot.table("files")
        found: dict[str, str] = {}
        errors = index_format.column_array(files, "parse_error")
        if errors.null_count < len(errors):  # some file has one: read only those rows
            paths = index_format.column_array(files, "path")
            for i in _valid_rows(errors).tolist():
                found[paths[i].as_py()] = errors[i].as_py()
        for entry in meta.get("errors") or ():
            if isinstance(entry, list) and len(entry) >= 2 and entry[0] not in found:
                found[str(entry[0])] = str(entry[1])
        problems = [Problem(path, found[path]) for path in sorted(found)]
        return problems, int(meta.get("errors_left_out") or 0)

    def _stale_files(self) -> list[str]:
        """Indexed files whose size or mtime changed, or that are gone (a stat each)."""
        files = self.snapshot.table("files")
        sizes = files.column("size").to_pylist()
        mtimes = files.column("mtime").to_pylist()
        stale = []
        root = str(self.config.root)  # os.path.join: cheaper than pathlib's `/` over every file
        for path, size, mtime in zip(self.snapshot.paths, sizes, mtimes, strict=True):
            try:
                st = os.stat(os.path.join(root, path))
            except OSError:
                stale.append(path)
                continue
            if st.st_size != size or abs(st.st_mtime_ns / 1e9 - mtime) > 1e-6:
                stale.append(path)
        return stale

    # The async twins, for agent loops built on asyncio: the same calls on a worker thread.
    asearch = async_twin(search)
    aschema = async_twin(schema)
    aclusters = async_twin(clusters)
    agrep = async_twin(grep)
    aget_document = async_twin(get_document)
    aget_documents = async_twin(get_documents)
    alinks = async_twin(links)
    abacklinks = async_twin(backlinks)
    aorphans = async_twin(orphans)
    astatus = async_twin(status)

    def _relative(self, path: str) -> str:
        """A root-relative POSIX path; anything outside the root is refused."""
        root = self.config.root
        candidate = Path(path)
        absolute = (candidate if candidate.is_absolute() else root / candidate).resolve()
        try:
            return absolute.relative_to(root).as_posix()
        except ValueError:
            raise QueryError(f"{path}: outside the project root, refused") from None


def _valid_rows(column: Any) -> np.ndarray:
    """The rows of a column that are not null, from its validity bitmap (every row without
    one): no Python object per row of a 100k-file index."""
    bitmap = column.buffers()[0]
    if bitmap is None or not column.null_count:
        return np.arange(len(column))
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return np.flatnonzero(bits[column.offset : column.offset + len(column)])


def open_index(
    root: Path | str | None = None, config: Config | None = None, lite: bool = False
) -> Index:
    """Open a project's index for reading (`root`: default, found upward from the current folder;
    not a folder: ConfigError). `lite` maps it without importing pyarrow (`kernel.arrow_lite`)."""
    if config is None and root is not None and not Path(root).is_dir():
        raise ConfigError(f"{root}: not a folder")
    return Index(config or load_config(root), lite=lite)


def _read_note(config: Config, rel: str) -> str:
    """A note's text for `get`, read and decoded as ingest reads it (a regular file, a link
    only inside the root, at most MDVDB_MAX_FILE_BYTES)."""
    from kernel.safe_open import read_source
    from kernel.text_decode import decode

    root = str(config.root)
    within = None if config.follow_outside_root else root
    return decode(read_source(os.path.join(root, rel), within, config.max_file_bytes))[0]
