"""A query-sized Llama-2 BPE encoder that starts in a millisecond: the same ids as the
tokenizer for a short query (docs/architecture.md, "The query BPE").
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

SPACE = "\u2581"
SPECIAL = re.compile(r"(<unk>|<s>|</s>)")
_NO_RANK = 1 << 62  # a pair without a merge: ranks are below it


class QueryBPE:
    def __init__(self, db_path: Path):
        self.db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, check_same_thread=False)
        self._ids: dict[str, int | None] = {}
        self._ranks: dict[tuple[str, str], int] = {}

    @classmethod
    def build(cls, tokenizer_json: Path, db_path: Path) -> QueryBPE:
        """Write the lookup DB atomically (a concurrent reader never sees half of it)."""
        data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        model = data["model"]
        db_path.parent.mkdir(parents=True, exist_ok=True)
        import tempfile  # building the table only: a search does not pay for its import

        fd, tmp = tempfile.mkstemp(prefix=".bpe.", suffix=".tmp", dir=db_path.parent)
        os.close(fd)
        try:
            db = sqlite3.connect(tmp)
            db.execute("CREATE TABLE vocab (token TEXT PRIMARY KEY, id INTEGER) WITHOUT ROWID")
            db.execute("CREATE TABLE merges (pair TEXT PRIMARY KEY, rank INTEGER) WITHOUT ROWID")
            db.executemany("INSERT INTO vocab VALUES (?, ?)", model["vocab"].items())
            db.executemany(
                "INSERT OR IGNORE INTO merges VALUES (?, ?)",
                ((_pair_key(m), rank) for rank, m in enumerate(model["merges"])),
            )
            db.commit()
            db.close()
            os.replace(tmp, db_path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return cls(db_path)

    def token_id(self, token: str) -> int | None:
        if token not in self._ids:
            row = self.db.execute("SELECT id FROM vocab WHERE token = ?", (token,)).fetchone()
            self._ids[token] = row[0] if row else None
        return self._ids[token]

    def _rank_or(self, left: str, right: str) -> int:
        """A pair's merge rank, or _NO_RANK (above every rank) for a pair that never merges."""
        key = (left, right)
        if key not in self._ranks:
            row = self.db.execute(
                "SELECT rank FROM merges WHERE pair = ?", (left + " " + right,)
            ).fetchone()
            self._ranks[key] = row[0] if row else _NO_RANK
        return self._ranks[key]

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in SPECIAL.split(text):
            if not piece:
                continue
            special = self.token_id(piece) if SPECIAL.fullmatch(piece) else None
            if special is not None:
                ids.append(special)
                continue
            ids.extend(self._encode_word(SPACE + piece.replace(" ", SPACE)))
        return ids

    def _encode_word(self, word: str) -> list[int]:
        """BPE: merge the adjacent pair of lowest rank (the first of equals) until none has
        one; a merge looks up only the two new pairs it makes."""
        symbols = list(word)
        ranks = [self._rank_or(symbols[i], symbols[i + 1]) for i in range(len(symbols) - 1)]
        while ranks:
            best_rank = min(ranks)
            if best_rank == _NO_RANK:
                break
            best = ranks.index(best_rank)
            merged = symbols[best] + symbols[best + 1]
            symbols[best : best + 2] = [merged]
            del ranks[best]
            if best > 0:
                ranks[best - 1] = self._rank_or(symbols[best - 1], merged)
            if best < len(ranks):
                ranks[best] = self._rank_or(merged, symbols[best + 1])
        out: list[int] = []
        for symbol in symbols:
            token = self.token_id(symbol)
            if token is not None:
                out.append(token)
                continue
            for byte in symbol.encode("utf-8"):  # byte fallback: <0xXX> tokens
                fallback = self.token_id(f"<0x{byte:02X}>")
                out.append(fallback if fallback is not None else 0)
        return out


def _pair_key(merge: str | list[str]) -> str:
    if isinstance(merge, str):
        return merge
    return f"{merge[0]} {merge[1]}"
