"""Near-duplicate sections, found at pack time: the `near_duplicates` table. Each chunk gets a
64-bit SimHash of its visible text; chunks within `MAX_DISTANCE` bits are one group, whose id
is the row of its first chunk (docs/architecture.md, "Search": the near-duplicates paragraph)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from kernel.plain_text import signature_text
from pipeline.pack.versions import (  # noqa: F401 - declared there (tasks reads them cheaply)
    MAX_DISTANCE,
    META_KEY,
    SIGNATURE_VERSION,
    near_duplicates_meta,
)

if TYPE_CHECKING:
    from pipeline.plan import Plan

BANDS = 4  # of 16 bits: MAX_DISTANCE + 1 bands make the band test exact
WINDOW = 64  # neighbours compared within one band bucket (a bucket is small unless degenerate)
SHINGLE = 3  # words
_HEAD = 24  # word bytes hashed from the start (and the last 8 of a longer word)
_BYTE_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
_SPREAD = np.array(  # nibble -> its 4 bits in 4 uint16 lanes (little-endian lane order)
    [sum(((v >> i) & 1) << (16 * i) for i in range(4)) for v in range(16)], dtype=np.uint64
)
_BATCH_CHARS = 1_000_000  # bounds the working arrays (docs/benchmarks.md, "Ingest memory")
TEXTS_BATCH = 16_384
_M1, _M2, _M3 = (np.uint64(c) for c in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9))


def schema() -> pa.Schema:
    return pa.schema([("signature", pa.uint64()), ("group", pa.int32())])


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _word_bytes(data: np.ndarray) -> np.ndarray:
    """Bytes that belong to words: ASCII letters and every byte of a non-ASCII character.
    Not digits: copies of a page in two version folders differ in version numbers and dates."""
    return ((data >= 97) & (data <= 122)) | (data >= 128)


def signatures(texts: list[str]) -> np.ndarray:
    """The SimHash of each text (0 for a text with no words: never grouped), in batches of
    about `_BATCH_CHARS` characters."""
    out = np.zeros(len(texts), dtype=np.uint64)
    begin, size = 0, 0
    for i, text in enumerate(texts):
        size += len(text) + 1
        if size >= _BATCH_CHARS or i == len(texts) - 1:
            out[begin : i + 1] = _signatures(texts[begin : i + 1])
            begin, size = i + 1, 0
    return out


def _word_hashes(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A hash of each word: its first `_HEAD` bytes, its last 8 and its length, read 8 bytes
    at a time through an unaligned uint64 view of the data."""
    length = end - start
    padded = np.r_[data, np.zeros(_HEAD + 8, np.uint8)]
    eight = np.ndarray(buffer=padded, dtype="<u8", shape=(len(padded) - 7,), strides=(1,))
    h = _mix(length.astype(np.uint64))
    for offset in range(0, _HEAD, 8):
        more = length > offset  # per word: a hash must not depend on the other words
        if not more.any():
            break
        keep = _BYTE_MASKS[np.clip(length - offset, 0, 8)]
        h = np.where(more, _mix(h ^ (eight[start + offset] & keep)), h)
    long = length > _HEAD
    if long.any():
        h[long] = _mix(h[long] ^ eight[end[long] - 8])
    return h


def _bit_counts(shingles: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(texts, 64): how many of each text's shingles have each bit set, four bits at a time
    in 16-bit lanes (a bit at a time for a text of 65,536 words or more)."""
    n = len(counts)
    totals = np.zeros((n, 64), dtype=np.int64)
    has = np.flatnonzero(counts)
    if not len(has):
        return totals
    starts = (np.r_[0, np.cumsum(counts)][:-1])[has]
    columns = shingles.view(np.uint8).reshape(-1, 8)
    if counts.max() < 65536:
        for byte in range(8):
            column = columns[:, byte]
            for half, nibble in ((0, column & 15), (1, column >> 4)):
                summed = np.add.reduceat(_SPREAD[nibble], starts)
                at = byte * 8 + half * 4
                totals[has, at : at + 4] = summed.view(np.uint16).reshape(-1, 4)
        return totals
    for bit in range(64):
        ones = ((shingles >> np.uint64(bit)) & np.uint64(1)).astype(np.int64)
        totals[has, bit] = np.add.reduceat(ones, starts)
    return totals


def _signatures(texts: list[str]) -> np.ndarray:
    """The SimHash of each text: the texts joined into one byte array, words hashed, and
    shingles of consecutive words voting on each of the 64 bits."""
    n = len(texts)
    out = np.zeros(n, dtype=np.uint64)
    if not n:
        return out
    # A NUL inside a text is no word byte: a space keeps one separator per text boundary.
    joined = "\x00".join(signature_text(t).replace("\x00", " ") for t in texts)
    joined = joined.casefold().encode("utf-8")
    data = np.frombuffer(joined, dtype=np.uint8)
    inside = _word_bytes(data)
    edges = np.diff(np.r_[0, inside.astype(np.int8), 0])
    word_start, word_end = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if not len(word_start):
        return out
    words = _word_hashes(data, word_start, word_end)
    # which text each word is in: texts are separated by one NUL byte each
    separators = np.flatnonzero(data == 0)
    owner = np.searchsorted(separators, word_start)
    counts = np.bincount(owner, minlength=n)
    # shingles of SHINGLE consecutive words of one text; at a text's end, shorter ones
    last = np.r_[owner[1:] != owner[:-1], True]
    shingle = words * _M1
    for k, factor in enumerate((_M2, _M3)[: SHINGLE - 1], start=1):
        nxt = np.r_[words[k:], np.zeros(k, np.uint64)]
        ends_before = np.zeros(len(words), bool)
        for j in range(k):
            ends_before |= np.r_[last[j:], np.ones(j, bool)] if j else last
        shingle = shingle + np.where(ends_before, np.uint64(0), nxt * factor)
    shingle = _mix(shingle)
    totals = _bit_counts(shingle, counts)
    ones = totals * 2 > counts[:, None]
    out = np.packbits(ones, axis=1, bitorder="little").view("<u8").reshape(-1)
    out = out.astype(np.uint64)
    out[(counts > 0) & (out == 0)] = 1  # keep 0 for "no words"
    return out


def popcount(x: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return ((x * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(np.uint8)


def groups(signatures_: np.ndarray) -> np.ndarray:
    """Per chunk, the row of the first chunk of its near-duplicate group, or -1."""
    n = len(signatures_)
    out = np.full(n, -1, dtype=np.int32)
    rows = np.flatnonzero(signatures_ != 0)
    if len(rows) < 2:
        return out
    unique, inverse = np.unique(signatures_[rows], return_inverse=True)
    labels = _components(unique)
    label = labels[inverse]
    sizes = np.bincount(label)
    # rows ascend, so a label's first occurrence is its group's first chunk
    _, first_at = np.unique(label, return_index=True)
    first_row = np.zeros(len(sizes), dtype=np.int64)
    first_row[label[first_at]] = rows[first_at]
    shared = sizes[label] > 1
    out[rows[shared]] = first_row[label[shared]]
    return out


def _bucket_keys(unique: np.ndarray):
    """The 16 bucket keys of 28 bits (a 16-bit band + a 12-bit slice of the rest) whose shared
    values find every pair within MAX_DISTANCE bits, by pigeonhole twice (docs/benchmarks.md,
    "1M chunks (issues 18 and 19)")."""
    for band in range(BANDS):
        shift = np.uint64(16 * band)
        head = (unique >> shift) & np.uint64(0xFFFF)
        low = unique & np.uint64((1 << (16 * band)) - 1)
        rest = low | ((unique >> np.uint64(16 * (band + 1))) << shift)  # the other 48 bits
        for part in range(4):
            piece = (rest >> np.uint64(12 * part)) & np.uint64(0xFFF)
            yield ((head << np.uint64(12)) | piece).astype(np.uint32)


def _components(unique: np.ndarray) -> np.ndarray:
    """Connected components of distinct signatures within MAX_DISTANCE bits of each other."""
    m = len(unique)
    sources, targets = [], []
    bits = np.uint64(max(1, int(m).bit_length()))
    index = np.arange(m, dtype=np.uint64)
    for key in _bucket_keys(unique):
        # key and row in one uint64: a plain sort is a stable argsort, and several times faster
        packed = np.sort((key.astype(np.uint64) << bits) | index)
        order = (packed & ((np.uint64(1) << bits) - np.uint64(1))).astype(np.int64)
        ordered = packed >> bits
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        sizes = np.diff(np.r_[starts, m])
        # each sorted position's room to the end of its bucket: a step compares only those
        room = np.repeat(starts + sizes, sizes) - np.arange(m) - 1
        at = np.flatnonzero(room >= 1)
        for step in range(1, min(WINDOW, m - 1) + 1):
            at = at[room[at] >= step]
            if not len(at):
                break
            a, b = order[at], order[at + step]
            near = popcount(unique[a] ^ unique[b]) <= MAX_DISTANCE
            sources.append(a[near])
            targets.append(b[near])
    labels = np.arange(m)
    if not sources or not sum(len(s) for s in sources):
        return labels
    a, b = np.concatenate(sources), np.concatenate(targets)
    # label propagation with pointer jumping: each node ends with its component's least index
    while True:
        low = np.minimum(labels[a], labels[b])
        changed = (labels[a] != low) | (labels[b] != low)
        np.minimum.at(labels, a, low)
        np.minimum.at(labels, b, low)
        labels = labels[labels]
        if not changed.any():
            return labels


INCREMENTAL_MAX = 512  # new or gone distinct signatures `update_groups` takes; past it, all again
SPLIT_MAX = 256  # members of the groups an edit may split, re-linked pair by pair


def _key_masks() -> np.ndarray:
    """The bits of each of `_bucket_keys`'s 16 keys, in place in the signature."""
    masks = []
    for band in range(BANDS):
        others = [bit for bit in range(64) if not 16 * band <= bit < 16 * (band + 1)]
        for part in range(4):
            mask = 0xFFFF << (16 * band)
            for bit in others[12 * part : 12 * (part + 1)]:
                mask |= 1 << bit
            masks.append(mask)
    return np.array(masks, dtype=np.uint64)


_MASKS = _key_masks()
_BAND_MASKS = np.array([0xFFFF << (16 * b) for b in range(BANDS)], dtype=np.uint64)


class _Sigs:
    """Signatures looked up by value without sorting: the rows sharing one of the four
    16-bit bands with a value, by four compares of 16-bit columns."""

    def __init__(self, sigs: np.ndarray):
        self.sigs = sigs
        self.heads = [
            ((sigs >> np.uint64(16 * b)) & np.uint64(0xFFFF)).astype(np.uint16)
            for b in range(BANDS)
        ]

    def sharing_a_band(self, value: int) -> np.ndarray:
        v = np.uint64(value)
        hit = self.heads[0] == np.uint16(int(v) & 0xFFFF)
        for b in range(1, BANDS):
            hit |= self.heads[b] == np.uint16((int(v) >> (16 * b)) & 0xFFFF)
        rows = np.flatnonzero(hit)
        return rows[self.sigs[rows] != 0]


def _small_buckets(value: int, values: np.ndarray) -> bool:
    """Every bucket `value` is in holds at most WINDOW + 1 distinct signatures among `values`."""
    x = values ^ np.uint64(value)
    return all(len(np.unique(values[(x & mask) == 0])) <= WINDOW + 1 for mask in _MASKS)


def update_groups(
    old_sigs: np.ndarray, old_groups: np.ndarray, sigs: np.ndarray, source: np.ndarray
) -> np.ndarray | None:
    """`groups(sigs)` from the previous index's signatures and groups, looking only at the new
    and gone signatures, their neighbours and their groups; None when the shortcut cannot
    promise the full answer (a touched bucket over WINDOW + 1 signatures, too many changes)."""
    n, old_n = len(sigs), len(old_sigs)
    if not old_n or len(old_groups) != old_n or len(source) != n:
        return None
    edit = _GroupEdit(old_sigs, old_groups, sigs, source)
    if len(edit.touched) > INCREMENTAL_MAX or not edit.link_touched():
        return None
    if not edit.relink_splitting():
        return None
    return edit.groups()


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[object, object] = {}

    def find(self, u: object) -> object:
        parent = self.parent
        while parent.setdefault(u, u) != u:
            parent[u] = parent[parent[u]]  # type: ignore[index]
            u = parent[u]
        return u

    def union(self, a: object, b: object) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


class _GroupEdit:
    """`update_groups` in its steps. Units joined by union-find: each affected component that
    cannot split (`("c", key)`), each signature of a splitting one and each new one (`("v",
    value)`)."""

    def __init__(self, old_sigs, old_groups, sigs, source) -> None:
        self.old_sigs, self.old_groups, self.sigs, self.source = old_sigs, old_groups, sigs, source
        old_n = self.old_n = len(old_sigs)
        self.reused = source >= 0
        self.fresh_rows = np.flatnonzero(~self.reused)
        inv = self.inv = np.full(old_n, -1, dtype=np.int64)
        inv[source[self.reused]] = np.flatnonzero(self.reused)
        self.gone_rows = np.flatnonzero(inv < 0)
        self.fresh_values = np.unique(sigs[self.fresh_rows])
        gone_values = np.unique(old_sigs[self.gone_rows])
        self.touched = np.union1d(
            self.fresh_values[self.fresh_values != 0], gone_values[gone_values != 0]
        )
        # Every signature old or new: old rows first, then the fresh rows.
        self.every = _Sigs(np.concatenate([old_sigs, sigs[self.fresh_rows]]))
        self.alive = np.concatenate([inv >= 0, np.ones(len(self.fresh_rows), dtype=bool)])
        # A component's key: its group id (the row of its first chunk), or a lone row's row.
        self.key = np.where(old_groups >= 0, old_groups, np.arange(old_n, dtype=old_groups.dtype))
        self.affected: set[int] = {int(k) for k in self.key[self.gone_rows]}
        self.splitting: set[int] = set()
        self.new_nodes: set[int] = set()
        self.links: list[tuple[int, int]] = []  # between new signatures and any live one
        self.old_row_of: dict[int, int] = {}  # a value held by an old row -> such a row
        self.survivors: set[int] = set()
        self.units = _UnionFind()

    def link_touched(self) -> bool:
        """Each new or gone signature: its groups, a gone one's group to split, a new one's
        links; False where a bucket is too crowded."""
        every, alive, key, old_n = self.every, self.alive, self.key, self.old_n
        for value in self.touched.tolist():
            rows = every.sharing_a_band(value)
            values = every.sigs[rows]
            same = rows[values == np.uint64(value)]
            in_old = same[same < old_n]
            if len(in_old):
                self.old_row_of[value] = int(in_old[0])
                self.affected.update(int(k) for k in key[in_old])
            was, now = bool(len(in_old)), bool(alive[same].any())
            if was == now:
                continue  # the same node: only its rows changed
            if not _small_buckets(value, values):
                return False
            if was:  # gone: its group may split
                self.splitting.add(int(key[in_old[0]]))
                continue
            self.new_nodes.add(value)
            near = rows[alive[rows] & (popcount(values ^ np.uint64(value)) <= MAX_DISTANCE)]
            for other in np.unique(every.sigs[near]).tolist():
                if other != value:
                    self.links.append((value, other))
                    held = near[every.sigs[near] == np.uint64(other)]
                    held = held[held < old_n]
                    if len(held):
                        self.old_row_of.setdefault(other, int(held[0]))
                        self.affected.add(int(key[held[0]]))
        return True

    def relink_splitting(self) -> bool:
        """The survivors of each group that lost a signature, linked again pair by pair, then
        the new signatures' links; False where that cannot be promised."""
        fresh_set = set(self.fresh_values.tolist())
        for comp in self.splitting:
            members = np.flatnonzero(self.key == comp)
            values = np.unique(self.old_sigs[members])
            kept = set(self.old_sigs[members[self.inv[members] >= 0]].tolist())
            values = values[np.array([v in kept or v in fresh_set for v in values.tolist()], bool)]
            if len(values) > SPLIT_MAX:
                return False
            for value in values.tolist():
                if not _small_buckets(value, self.every.sigs[self.every.sharing_a_band(value)]):
                    return False
            self.survivors.update(values.tolist())
            for i in range(len(values)):
                close = popcount(values[i + 1 :] ^ values[i]) <= MAX_DISTANCE
                for other in values[i + 1 :][close].tolist():
                    self.units.union(("v", int(values[i])), ("v", other))
        for a, b in self.links:
            self.units.union(self.unit_of_value(a), self.unit_of_value(b))
        return True

    def unit_of_value(self, value: int) -> object:
        if value in self.new_nodes or value in self.survivors:
            return ("v", value)
        comp = int(self.key[self.old_row_of[value]])
        return ("v", value) if comp in self.splitting else ("c", comp)

    def groups(self) -> np.ndarray:
        """Each row's group: worked out for the fresh rows and affected components; every
        other row keeps its component's, moved."""
        reused, key, inv = self.reused, self.key, self.inv
        out = np.full(len(self.sigs), -1, dtype=np.int32)
        flag = np.zeros(self.old_n, dtype=bool)
        if self.affected:
            flag[np.fromiter(self.affected, dtype=np.int64)] = True
        src = np.where(reused, self.source, 0)
        hit = reused & flag[key[src]]
        keep = reused & ~hit
        old_of_kept = self.old_groups[src[keep]]
        out[keep] = np.where(old_of_kept >= 0, inv[np.maximum(old_of_kept, 0)], -1)
        rows = np.sort(np.concatenate([np.flatnonzero(hit), self.fresh_rows]))
        labels: dict[object, list[int]] = {}
        keys_of_rows = key[src[rows]]
        for row, value, comp, was_reused in zip(
            rows.tolist(),
            self.sigs[rows].tolist(),
            keys_of_rows.tolist(),
            reused[rows].tolist(),
            strict=True,
        ):
            if value == 0:
                continue
            if was_reused and comp not in self.splitting:
                unit: object = ("c", comp)
            else:
                unit = self.unit_of_value(value)
            labels.setdefault(self.units.find(unit), []).append(row)
        for members in labels.values():
            if len(members) > 1:
                out[members] = members[0]  # rows ascend: the first is the smallest
        return out


def update(plan: Plan) -> pa.Table:
    """The `near_duplicates` table, row i for chunk i; reused rows' signatures come from the
    previous index."""
    from pipeline.pack.splice import rows_of

    chunks = plan.chunks
    n = chunks.num_rows
    sigs = np.zeros(n, dtype=np.uint64)
    fresh = np.arange(n)
    old = _previous_signatures(plan.previous)
    source = plan.chunk_source
    if old is not None and source is not None and len(source) == n:
        reused = source >= 0
        sigs[reused] = old[0][source[reused]]
        fresh = np.flatnonzero(~reused)
    for start in range(0, len(fresh), TEXTS_BATCH):  # a signature is its text's alone
        rows = fresh[start : start + TEXTS_BATCH]
        sigs[rows] = signatures(rows_of(chunks.column("text"), rows).to_pylist())
    grouped = None
    if old is not None and source is not None and len(source) == n:
        grouped = update_groups(old[0], old[1], sigs, source)
    if grouped is None:
        grouped = groups(sigs)
    return pa.Table.from_arrays([pa.array(sigs, pa.uint64()), pa.array(grouped)], schema=schema())


def _previous_signatures(previous) -> tuple[np.ndarray, np.ndarray] | None:
    """The previous index's signatures and groups, when of this version."""
    if previous is None or (previous.meta.get(META_KEY) or {}) != near_duplicates_meta():
        return None
    table = previous.tables.get("near_duplicates")
    if table is None or table.num_rows != previous.tables["chunks"].num_rows:
        return None
    return table.column("signature").to_numpy(), table.column("group").to_numpy()
