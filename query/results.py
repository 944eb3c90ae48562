"""What the read side returns: plain dataclasses, not dicts or strings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class SearchResult:
    """One ranked section, as `mdvdb search --json` prints it."""

    path: str
    heading: str
    heading_path: list[str]
    start_line: int
    end_line: int
    score: float
    excerpt: str
    metadata: dict[str, Any]
    title: str = ""
    # The estimated chance that this result is relevant (query.rank.confidence).
    confidence: float | None = None
    id: str = ""  # the document id of `path` (kernel/doc_ids.py)
    # Row numbers in the snapshot that answered (for the library's own lookups); they
    # shift when another file is added or deleted, so `to_json` leaves them out.
    chunk_id: int = -1
    file_id: int = -1
    cluster_id: int = -1
    # Component scores (lexical, semantic, fused, ...) when asked to explain.
    explain: dict[str, float] | None = None
    # Near-duplicate copies of this section elsewhere: {"path", "start_line", "end_line"}
    # (the first 20), and how many there are in all.
    also_in: list[dict[str, Any]] = field(default_factory=list)
    also_in_count: int = 0
    # The lines of the file the excerpt was taken from (inside start_line..end_line).
    excerpt_lines: list[int] | None = None
    # Its named source (MDVDB_SOURCES; query.request), only when the project names them.
    source: str | None = None

    def to_json(self, explain: bool = False) -> dict[str, Any]:
        try:  # what `asdict` gives, without its generic walk (dear per result, cold)
            data = {name: _copied(getattr(self, name)) for name in self.__dataclass_fields__}
        except _NotPlain:
            data = asdict(self)
        if not explain:
            data.pop("explain")
        if data["source"] is None:
            del data["source"]
        del data["chunk_id"], data["file_id"]  # row numbers: see above
        return data


class _NotPlain(Exception):
    """A value `_copied` leaves to `asdict`."""


_ATOMS = (str, int, float, bool, type(None))


def _copied(value: Any) -> Any:
    """`dataclasses.asdict`'s copy of plain data (dicts, lists, atoms), without its deepcopy;
    anything else raises `_NotPlain`. `tests/test_cold_start.py` compares both."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {_copied(k): _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    raise _NotPlain


@dataclass
class SearchResponse:
    """The results of one search and how many candidates matched."""

    query: str
    mode: str
    results: list[SearchResult] = field(default_factory=list)
    total: int | None = None  # candidates that passed the filters and min_score

    def to_json(self, explain: bool = False) -> dict[str, Any]:
        return {
            "query": self.query,
            "mode": self.mode,
            "results": [r.to_json(explain) for r in self.results],
            "total": self.total,
        }


@dataclass
class Section:
    """A section of a document: its heading and lines."""

    heading: str
    heading_path: list[str]
    start_line: int
    end_line: int


@dataclass
class Document:
    """One indexed file as `mdvdb get` returns it."""

    path: str
    title: str
    sha256: str
    metadata: dict[str, Any]
    content: str
    sections: list[Section]
    parse_error: str | None = None
    cluster_id: int = -1
    id: str = ""  # the document id (kernel/doc_ids.py)
    # The lines `content` holds (1-based, in the file) and the file's line count; with
    # paging, where the next page starts (`offset` of the asked lines; None: nothing left).
    start_line: int = 1
    end_line: int = 0
    total_lines: int = 0
    offset: int = 0
    next_offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Link:
    """One link as written in `source` at `line`, and the indexed file it names."""

    source: str
    line: int
    kind: str  # wikilink, embed, markdown, image
    target: str  # as written ('' for a link inside the same note)
    anchor: str  # the heading or block after `#`, '' if none
    label: str  # the visible text, '' if none
    resolved: str | None  # the indexed path it names; None when it names none
    broken: bool  # names a note that is not in the index

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def written(self) -> str:
        """The link as its syntax shows it: `[[target#anchor|label]]`, `![[...]]`,
        `[label](target#anchor)`."""
        where = self.target + (f"#{self.anchor}" if self.anchor else "")
        if self.kind in ("wikilink", "embed"):
            label = f"|{self.label}" if self.label else ""
            return ("!" if self.kind == "embed" else "") + f"[[{where}{label}]]"
        return ("!" if self.kind == "image" else "") + f"[{self.label}]({where})"


@dataclass
class Problem:
    """What is wrong with one file (or folder) of the project, as the index records it."""

    path: str
    problem: str


@dataclass
class Status:
    """The index's state as `mdvdb status` reports it."""

    index_path: str
    exists: bool
    root: str = ""  # the project root (found upward from a subfolder: kernel.dotenv)
    files: int = 0
    chunks: int = 0
    index_bytes: int = 0
    last_update: float | None = None
    provider: str | None = None
    model: str | None = None
    dimensions: int | None = None
    format_version: int | None = None
    stale_files: list[str] = field(default_factory=list)  # changed or deleted since indexed
    new_files: list[str] = field(default_factory=list)  # on disk, not in the index
    provider_mismatch: str | None = None  # the config asks for another embedding model
    # Every current problem, sorted by path (`Index.status`), and how many the index's
    # record of them left out (it keeps 1000 beside the parse errors of the files table).
    errors: list[Problem] = field(default_factory=list)
    errors_left_out: int = 0
    # Links that name a note no indexed file is, by file and line (`query.links`); None
    # when the index keeps no resolved link graph (a sharded one).
    broken_links: list[Link] | None = None

    @property
    def fresh(self) -> bool:
        return (
            self.exists
            and not self.stale_files
            and not self.new_files
            and self.provider_mismatch is None
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["fresh"] = self.fresh
        data["stale_total"] = len(self.stale_files)
        data["new_total"] = len(self.new_files)
        data["errors_total"] = len(self.errors) + data.pop("errors_left_out")
        data["broken_links_total"] = None if self.broken_links is None else len(self.broken_links)
        return data
