"""Words of a query in titles and file names, over texts lowered once per snapshot. A file's
titles are its title and its aliases; a query word matches where a title word begins
("archive" in "Archives", "tar" not in "start"; anywhere in CJK text)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from kernel import index_format
from kernel.text_analysis import CJK_RANGES

if TYPE_CHECKING:
    from query.snapshot import Snapshot

__all__ = ["name_files", "query_words", "title_files"]


@lru_cache(maxsize=1)
def _cjk_start() -> re.Pattern[str]:
    """A word that starts with CJK (compiled on first use, off a cold search's path)."""
    return re.compile(f"[{CJK_RANGES}]")


_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")  # [text](url) and ![alt](src)


def query_words(query: str) -> list[str]:
    """Lowercased words of two or more characters (one letter matches nearly any title)."""
    return [w for w in re.findall(r"\w+", query.lower()) if len(w) >= 2]


def title_files(snapshot: Snapshot, words: list[str]) -> np.ndarray:
    """One boolean per file: its title holds every word, or an alias every non-stop word."""
    from kernel.text_analysis import STOP_WORDS

    titles, aliases, alias_files = _lowered(snapshot)
    mask = np.zeros(len(titles.starts), dtype=bool)
    if not words:
        return mask
    mask[titles.containing_all(words)] = True
    named = [w for w in words if w not in STOP_WORDS]
    if len(alias_files) and named:
        mask[alias_files[aliases.containing_all(named)]] = True
    return mask


@dataclass(eq=False, repr=False)
class _Lowered:
    """A column's texts lowered (links as their text) as one string, with each row's span: one
    `str.lower()` over the whole buffer keeps a cold search cheap."""

    text: str
    starts: np.ndarray  # character position where each row begins
    ends: np.ndarray  # and where it ends (exclusive)

    @classmethod
    def of(cls, array) -> _Lowered:
        """From a pyarrow string array, reading its buffers directly where lowering keeps
        every character's position (nearly always); else row by row."""
        if len(array) == 0:
            return cls("", np.zeros(0, np.int64), np.zeros(0, np.int64))
        _, offsets_buffer, data_buffer = array.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int32, len(array) + 1, array.offset * 4)
        text = str(memoryview(data_buffer or b"")[offsets[0] : offsets[-1]], "utf-8")
        lowered = text.lower()
        if len(lowered) != len(text) or "](" in lowered:
            return cls.of_rows(array.to_pylist())
        if len(text) == offsets[-1] - offsets[0]:  # ASCII: characters are bytes
            chars = offsets - offsets[0]
        else:
            data = np.frombuffer(data_buffer, np.uint8)[offsets[0] : offsets[-1]]
            # a character starts at every byte that is not a UTF-8 continuation byte (10xxxxxx)
            starts = np.cumsum((data & 0xC0) != 0x80, dtype=np.int32)  # int32: faster than int64
            chars = np.concatenate(([0], starts))[offsets - offsets[0]]
        return cls(lowered, chars[:-1], chars[1:])

    @classmethod
    def of_rows(cls, texts: list[str | None]) -> _Lowered:
        rows = [
            _LINK.sub(r"\1", t).lower() if t and "](" in t else (t or "").lower() for t in texts
        ]
        lengths = np.fromiter(map(len, rows), np.int64, len(rows))
        ends = np.cumsum(lengths)
        return cls("".join(rows), ends - lengths, ends)

    def containing(self, word: str) -> np.ndarray:
        """Rows where `word` begins a word ("tar" is in "tar archives", not in "start"), or
        occurs anywhere for Chinese, Japanese and Korean, which have no spaces to begin at."""
        # (an ASCII word cannot start with CJK: the pattern is compiled on first need)
        text, anywhere = self.text, not word.isascii() and _cjk_start().match(word) is not None
        found, after_letter = [], []
        at = text.find(word)
        while at >= 0:
            found.append(at)
            after_letter.append(at > 0 and text[at - 1].isalnum() and not anywhere)
            at = text.find(word, at + 1)
        at = np.asarray(found, np.int64)
        rows = np.searchsorted(self.starts, at, side="right") - 1
        # inside its row, and at a word start (the row's first character is one, whatever
        # the previous row ends with)
        keep = (at + len(word) <= self.ends[rows]) & (
            ~np.asarray(after_letter, bool) | (at == self.starts[rows])
        )
        rows = rows[keep]
        # sorted already (matches come in text order): drop repeats without np.unique, whose
        # first call imports numpy.ma (dear on a cold query)
        return rows[np.concatenate(([True], rows[1:] != rows[:-1]))] if len(rows) else rows

    def containing_all(self, words: list[str]) -> np.ndarray:
        rows = None
        for word in sorted(words, key=len, reverse=True):  # long words are the rarer ones
            found = self.containing(word)
            rows = found if rows is None else np.intersect1d(rows, found, assume_unique=True)
            if len(rows) == 0:
                break
        return np.arange(len(self.starts)) if rows is None else rows.astype(np.int64)


NAME_MAX_WORDS = 16  # longer queries are prose, not names


NAME_MAX_GRAM = 3  # names of up to this many words ("git branch", "ray start")


def name_files(snapshot: Snapshot, query: str, files: np.ndarray) -> np.ndarray:
    """Which of `files` the query names: the title, the file stem or the title's last dotted part
    is a run of query words holding a non-stop word, not inside a longer matching run
    (docs/search-quality.md, "What each mode does"). One boolean per entry of `files`."""
    from kernel.text_analysis import words as terms

    found = np.zeros(len(files), dtype=bool)
    tokens = re.findall(r"\w+", query.lower())
    if not tokens or len(tokens) > NAME_MAX_WORDS or not len(files):
        return found
    spans: dict[str, tuple[int, int]] = {}
    for n in range(1, min(NAME_MAX_GRAM, len(tokens)) + 1):
        for i in range(len(tokens) - n + 1):
            run = tokens[i : i + n]
            if terms(" ".join(run)):
                for sep in (" ", "-", "_") if n > 1 else (" ",):
                    spans.setdefault(sep.join(run), (i, i + n))
    names_of = _names(snapshot)
    matched: list[tuple[int, int, int]] = []  # (position in files, span start, span end)
    for at, names in enumerate(names_of(files.tolist())):
        for name in names:
            span = spans.get(name) if name else None
            if span is not None:
                matched.append((at, *span))
                break
    longer = [(a, b) for _, a, b in matched if b - a > 1]
    for at, a, b in matched:
        if not any(x <= a and b <= y and (x, y) != (a, b) for x, y in longer):
            found[at] = True
    return found


# Pages whose names a reader keeps per snapshot (then it starts over).
NAMES_KEPT = 50_000


def _names(snapshot: Snapshot):
    """file ids -> each file's lowered names (title, last dotted part, stem, aliases), kept per
    snapshot for the files asked."""
    kept = snapshot.cache.get("page_names")
    if kept is None or len(kept) > NAMES_KEPT:
        kept = snapshot.cache["page_names"] = {}

    def names_of(file_ids: list[int]) -> list[tuple[str | None, ...]]:
        missing = [f for f in file_ids if f not in kept]
        if missing:
            titles, _, _ = _lowered(snapshot)
            path_of = _path_lowering(snapshot)
            aliases = index_format.column_array(snapshot.table("files"), "aliases")
            for file_id in missing:
                title = titles.text[titles.starts[file_id] : titles.ends[file_id]].strip()
                stem = path_of(file_id).rsplit("/", 1)[-1]
                stem = stem.rsplit(".", 1)[0] if "." in stem else stem
                dotted = title.rsplit(".", 1)[-1] if "." in title else None
                others = tuple(a.lower().strip() for a in aliases[file_id].as_py() or ())
                kept[file_id] = (title, dotted, stem, *others)
        return [kept[f] for f in file_ids]

    return names_of


def _path_lowering(snapshot: Snapshot):
    """file id -> its path lowered, as `_lowered_paths` has it: the first query lowers only the
    paths it reads. A capital sigma lowers by its neighbours, so such a path is read from the
    column (`tests/test_cold_start.py`)."""
    seen = snapshot.cache.get("name_queries", 0)
    snapshot.cache["name_queries"] = seen + 1
    found = snapshot.cache.get("tiers_paths")
    if found is not None or seen:
        found = found or _lowered_paths(snapshot)
        return lambda file_id: found.text[found.starts[file_id] : found.ends[file_id]]
    column = index_format.column_array(snapshot.table("files"), "path")

    def one(file_id: int) -> str:
        path = column[file_id].as_py() or ""
        if "\u03a3" in path:
            whole = _lowered_paths(snapshot)
            return whole.text[whole.starts[file_id] : whole.ends[file_id]]
        return _LINK.sub(r"\1", path).lower() if "](" in path else path.lower()

    return one


def _lowered_paths(snapshot: Snapshot) -> _Lowered:
    """File paths, lowered once per snapshot (for file stems)."""
    found = snapshot.cache.get("tiers_paths")
    if found is None:
        found = _Lowered.of(index_format.column_array(snapshot.table("files"), "path"))
        snapshot.cache["tiers_paths"] = found
    return found


def _lowered(snapshot: Snapshot) -> tuple[_Lowered, _Lowered, np.ndarray]:
    """Titles and aliases, lowered once per snapshot, and the file of each alias."""
    found = snapshot.cache.get("tiers")
    if found is None:
        files = snapshot.table("files")
        titles = _Lowered.of(index_format.column_array(files, "title"))
        aliases = index_format.column_array(files, "aliases")
        offsets = np.asarray(aliases.offsets.to_numpy(), dtype=np.int64)
        alias_files = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
        names = aliases.values.to_pylist()[offsets[0] : offsets[-1]] if len(alias_files) else []
        found = (titles, _Lowered.of_rows(names), alias_files)
        snapshot.cache["tiers"] = found
    return found
