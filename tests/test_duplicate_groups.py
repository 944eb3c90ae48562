"""Near-duplicate groups (pipeline/pack/duplicates.py) are the connected components of signatures
within 3 bits: the bucketed search finds exactly the pairs a brute-force comparison finds."""

from __future__ import annotations

import numpy as np

from pipeline.pack import duplicates


def _brute_force_groups(signatures: np.ndarray) -> np.ndarray:
    unique, inverse = np.unique(signatures, return_inverse=True)
    m = len(unique)
    labels = np.arange(m)
    distance = duplicates.popcount(unique[:, None] ^ unique[None, :])
    a, b = np.nonzero(np.triu(distance <= duplicates.MAX_DISTANCE, 1))
    changed = True
    while changed:  # smallest index of each component
        low = np.minimum(labels[a], labels[b])
        changed = bool(((labels[a] != low) | (labels[b] != low)).any())
        np.minimum.at(labels, a, low)
        np.minimum.at(labels, b, low)
        labels = labels[labels]
    return labels[inverse]


def test_components_find_every_pair_within_three_bits() -> None:
    rng = np.random.default_rng(7)
    base = rng.integers(1, 2**63, size=400, dtype=np.uint64)
    copies = []
    for _ in range(600):  # near copies (1-3 flipped bits) of random bases, chains included
        source = base[rng.integers(0, len(base))] if rng.random() < 0.7 else copies[-1]
        flips = rng.choice(64, size=rng.integers(1, 4), replace=False).astype(np.uint64)
        copies.append(source ^ np.bitwise_or.reduce(np.uint64(1) << flips))
    signatures = np.concatenate([base, np.asarray(copies, dtype=np.uint64)])
    rng.shuffle(signatures)
    unique = np.unique(signatures)
    labels = duplicates._components(unique)
    expected = _brute_force_groups(unique)
    assert (labels != np.arange(len(unique))).sum() > 100  # many groups to find
    assert np.array_equal(labels, expected)


def test_key_masks_select_the_bucket_keys() -> None:
    """Two signatures share one of `_bucket_keys`'s keys exactly when they agree on that
    key's mask: what the incremental update tests instead of sorting."""
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2**63, size=2000, dtype=np.uint64)
    b = a ^ (rng.integers(0, 2**63, size=2000, dtype=np.uint64) & np.uint64(0x00F0_0F00_F00F_0F0F))
    for f, (ka, kb) in enumerate(
        zip(duplicates._bucket_keys(a), duplicates._bucket_keys(b), strict=True)
    ):
        assert np.array_equal(ka == kb, ((a ^ b) & duplicates._MASKS[f]) == 0)


def _flip(rng, value: int, bits: int) -> int:
    for bit in rng.choice(64, size=bits, replace=False).tolist():
        value ^= 1 << bit
    return value or 1


def _corpus(rng, n: int, crowd: bool) -> list[int]:
    """Signatures with families of near copies, exact copies, chains (a - b - c with a and c
    apart: removing b splits them), zeros and, with `crowd`, a bucket of more than WINDOW
    distinct signatures (the shortcut must step aside there)."""
    out: list[int] = []
    while len(out) < n:
        kind = rng.random()
        base = int(rng.integers(1, 2**63))
        if kind < 0.4:
            out.append(base)
        elif kind < 0.7:
            out += [_flip(rng, base, int(rng.integers(0, 4))) for _ in range(rng.integers(2, 6))]
        elif kind < 0.85:
            middle = _flip(rng, base, 3)
            out += [base, middle, _flip(rng, middle, 3)]
        elif kind < 0.9:
            out.append(0)
        else:
            out += [base] * int(rng.integers(2, 4))
    if crowd:
        low = int(rng.integers(0, 2**32))
        out += [(int(rng.integers(1, 2**31)) << 32) | low for _ in range(duplicates.WINDOW + 10)]
    return out


def _edit(rng, old: list[int], pool: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """A few runs of rows removed and a few inserted (fresh copies of old signatures, near
    copies, new ones), as a pack splices them: (new signatures, source row or -1)."""
    keep = np.ones(len(old), dtype=bool)
    for _ in range(rng.integers(0, 4)):
        start = int(rng.integers(0, len(old)))
        keep[start : start + int(rng.integers(1, 6))] = False
    rows: list[tuple[int, int]] = []  # (signature, source)
    for i in range(len(old)):
        if rng.random() < 0.004:
            for _ in range(rng.integers(1, 5)):
                kind = rng.random()
                if kind < 0.3:
                    value = old[int(rng.integers(0, len(old)))]
                elif kind < 0.6:
                    value = _flip(rng, old[int(rng.integers(0, len(old)))], int(rng.integers(1, 4)))
                elif kind < 0.7:
                    value = 0
                else:
                    value = pool[int(rng.integers(0, len(pool)))]
                rows.append((value, -1))
        if keep[i]:
            rows.append((old[i], i))
    sigs = np.array([v for v, _ in rows], dtype=np.uint64)
    return sigs, np.array([s for _, s in rows], dtype=np.int64)


# Random edits of random corpora: each mutation of `update_groups` tried (a link at the
# distance dropped, a group that lost a member not split, a neighbour's group not merged, the
# crowded-bucket check gone) failed within the first five rounds (the last by `stepped_aside`).
ROUNDS = 30


def test_updated_groups_equal_groups_computed_again() -> None:
    """The incremental update of the groups (`update_groups`) gives exactly `groups` of the
    new signatures, over random edits of corpora with families, chains (splits), exact
    copies and zeros; and it steps aside (None) when a crowded bucket makes the full
    computation's window matter."""
    rng = np.random.default_rng(11)
    taken = stepped_aside = 0
    for round_ in range(ROUNDS):
        crowd = round_ % 5 == 4
        old = _corpus(rng, int(rng.integers(200, 1500)), crowd)
        old_sigs = np.array(old, dtype=np.uint64)
        old_groups = duplicates.groups(old_sigs)
        pool = _corpus(rng, 50, False)
        if crowd:  # new members of the crowded bucket
            pool += [(int(rng.integers(1, 2**31)) << 32) | (old[-1] & 0xFFFFFFFF)] * 3
        for _ in range(3):
            sigs, source = _edit(rng, old, pool)
            got = duplicates.update_groups(old_sigs, old_groups, sigs, source)
            if got is None:
                stepped_aside += 1
                continue
            taken += 1
            assert np.array_equal(got, duplicates.groups(sigs)), round_
    assert taken > 2 * ROUNDS and stepped_aside > 0, (taken, stepped_aside)
