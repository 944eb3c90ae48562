"""The cluster stage: topic clusters of documents, stored in the index only (docs/clusters.md,
"How a clustering is built" and "Incremental assign and rebalance")."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.cluster.keys import DEFERRED, STATE_KEY

if TYPE_CHECKING:
    import pyarrow as pa

    from pipeline.plan import Plan
    from pipeline.state import State

SEED = 0
CANDIDATES = 4  # k values tried by silhouette, between half the bound and the bound
REPRESENTATIVES = 3
KEYWORDS = 8
LABEL_WORDS = 3
SILHOUETTE_SAMPLE = 3000  # silhouette is computed on at most this many documents (O(n^2))
# Labels read the first this many characters of each document: its title and opening.
LABEL_TEXT_CHARS = 4000
# Above MINIBATCH_ABOVE documents the candidate k are tried on a sample of this many.
K_SEARCH_SAMPLE = 8000
MINIBATCH_ABOVE = 20000  # above this many documents a full clustering uses MiniBatchKMeans
# A term in more than 2/k of all documents, clamped to these, is never a keyword.
MIN_MAX_DOC_FREQ, MAX_MAX_DOC_FREQ = 0.1, 0.5
# Below this many documents, k-means, silhouette and keyword counts run in plain NumPy and
# scikit-learn is never imported (docs/clusters.md, "Small folders: plain NumPy").
NUMPY_BELOW = 1000

_I32 = np.zeros(0, np.int32)
DOC_VECTOR_BLOCK = 4096  # chunk vectors summed into document vectors per `add.at`


# -- the pure parts: vectors, k, fit, labels ------------------------------------------------


def document_vectors(chunk_vectors: np.ndarray, chunk_doc: np.ndarray, n_docs: int) -> np.ndarray:
    """Normalised mean of each document's chunk vectors; zero rows for those without chunks."""
    dims = chunk_vectors.shape[1] if chunk_vectors.ndim == 2 else 0
    sums = np.zeros((n_docs, dims), dtype=np.float64)
    # In blocks: no float64 copy of every chunk vector at once.
    for start in range(0, len(chunk_doc), DOC_VECTOR_BLOCK):
        block = slice(start, start + DOC_VECTOR_BLOCK)
        np.add.at(sums, chunk_doc[block], chunk_vectors[block].astype(np.float64))
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (sums / norms).astype(np.float32)


def candidate_ks(n_docs: int, max_clusters: int) -> list[int]:
    """The k values tried: a geometric grid over the upper half of the range up to
    min(MDVDB_CLUSTERING_MAX_CLUSTERS, sqrt(n)) (docs/clusters.md, "Choosing k")."""
    upper = min(max_clusters, max(2, int(np.sqrt(n_docs))), n_docs - 1)
    if upper < 2:
        return [1]
    lower = min(upper, max(2, upper // 2))
    grid = np.unique(np.round(np.geomspace(lower, upper, num=CANDIDATES)).astype(int))
    return [int(k) for k in grid]


def fit_kmeans(vectors: np.ndarray, k: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """(unit centroids, labels) for k clusters; deterministic for the same input and seed."""
    if k <= 1:
        centroid = _unit(vectors.mean(axis=0, keepdims=True))
        return centroid, np.zeros(len(vectors), dtype=np.int64)
    if len(vectors) < NUMPY_BELOW:
        from pipeline.cluster.small_kmeans import kmeans

        centers, labels = kmeans(vectors, k, seed)
        return _unit(centers.astype(np.float32)), labels
    from sklearn.cluster import KMeans, MiniBatchKMeans

    if len(vectors) > MINIBATCH_ABOVE:
        model = MiniBatchKMeans(
            n_clusters=k, random_state=seed, n_init=3, batch_size=4096, max_iter=100
        )
    else:
        model = KMeans(n_clusters=k, random_state=seed, n_init=1, max_iter=100)
    labels = model.fit_predict(vectors)
    return _unit(model.cluster_centers_.astype(np.float32)), labels.astype(np.int64)


def silhouette(vectors: np.ndarray, labels: np.ndarray, seed: int = SEED) -> float:
    """Cosine silhouette on a fixed-seed sample (exact silhouette is quadratic)."""
    if len(set(labels.tolist())) < 2:
        return 0.0
    if len(vectors) < NUMPY_BELOW:  # below the sample size: exact, as scikit-learn's
        from pipeline.cluster.small_kmeans import silhouette_cosine

        return silhouette_cosine(vectors, labels)
    from sklearn.metrics import silhouette_score

    size = min(len(vectors), SILHOUETTE_SAMPLE)
    return float(
        silhouette_score(vectors, labels, metric="cosine", sample_size=size, random_state=seed)
    )


@dataclass
class KChoice:
    k: int
    centroids: np.ndarray
    labels: np.ndarray
    silhouette: float
    tried: dict[int, float] = field(default_factory=dict)


def choose_and_fit(vectors: np.ndarray, max_clusters: int, seed: int = SEED) -> KChoice:
    """Fit every candidate k and keep the one with the best silhouette, on one BLAS thread
    (docs/clusters.md, "How a clustering is built")."""
    from threadpoolctl import threadpool_limits

    if len(vectors) >= NUMPY_BELOW:
        # Loaded before the limit, or SciPy's own BLAS would escape it on the first fit.
        import sklearn.cluster  # noqa: F401
        import sklearn.metrics  # noqa: F401
    with threadpool_limits(1):
        return _choose_and_fit(vectors, max_clusters, seed)


def _choose_and_fit(vectors: np.ndarray, max_clusters: int, seed: int) -> KChoice:
    best: KChoice | None = None
    tried: dict[int, float] = {}
    candidates = candidate_ks(len(vectors), max_clusters)
    search = vectors
    if len(vectors) > MINIBATCH_ABOVE and len(candidates) > 1:
        # Many documents: candidates are scored on a fixed-seed sample, the chosen k fitted on all.
        rows = np.random.default_rng(seed).choice(len(vectors), K_SEARCH_SAMPLE, replace=False)
        search = vectors[np.sort(rows)]
    for k in candidates:
        centroids, labels = fit_kmeans(search, k, seed)
        score = silhouette(search, labels, seed) if k > 1 else 0.0
        tried[k] = round(score, 4)
        if best is None or score > best.silhouette:
            best = KChoice(k, centroids, labels, score)
    assert best is not None
    if search is not vectors:
        centroids, labels = fit_kmeans(vectors, best.k, seed)
        best = KChoice(best.k, centroids, labels, silhouette(vectors, labels, seed))
    best.tried = tried
    return best


_TAG = re.compile(
    r"^(```|~~~).*?^\1|<[^>]{0,200}>|&[#\w]{1,10};|https?://\S+|\{\{|\}\}",
    re.MULTILINE | re.DOTALL,
)
# Words of two or more letters (no digits or underscores: identifiers and numbers are noise).
TOKEN_PATTERN = r"(?u)\b[^\W\d_]{2,}\b"
_TOKEN = re.compile(TOKEN_PATTERN)


def _preprocess(text: str) -> str:
    """Fenced code, HTML tags, entities and URLs out (they are not topics), lower-cased."""
    return _TAG.sub(" ", text).lower()


def cluster_keywords(
    texts: list[str],
    labels: np.ndarray,
    k: int,
    top: int = KEYWORDS,
    words: list[np.ndarray] | None = None,
    vocabulary: LabelWords | None = None,
) -> list[list[str]]:
    """Class-based TF-IDF over document counts, without stop-words and corpus-wide terms
    (docs/clusters.md, "How a clustering is built")."""
    if not texts:
        return [[] for _ in range(k)]
    large = len(texts) >= 20
    max_df = min(MAX_MAX_DOC_FREQ, max(MIN_MAX_DOC_FREQ, 2 / max(k, 1)))
    counted = class_counts(
        texts, labels, k, max_df if large else 1.0, 2 if large else 1, words, vocabulary
    )
    if counted is None:  # every term was pruned (tiny or empty corpus)
        return [[] for _ in range(k)]
    terms, per_class = counted
    words_in_class = per_class.sum(axis=1, keepdims=True)
    words_in_class[words_in_class == 0] = 1.0
    tf = per_class / words_in_class
    average_words = per_class.sum() / max(k, 1)
    idf = np.log1p(average_words / np.maximum(per_class.sum(axis=0), 1.0))
    scores = tf * idf
    out = []
    for c in range(k):
        row = scores[c]
        order = np.lexsort((terms, -row))  # ties broken by the term, for determinism
        out.append([str(terms[i]) for i in order[:top] if row[i] > 0])
    return out


def class_counts(
    texts: list[str],
    labels: np.ndarray,
    k: int,
    max_df: float,
    min_df: int,
    words: list[np.ndarray] | None = None,
    vocabulary: LabelWords | None = None,
) -> tuple[Any, np.ndarray] | None:
    """(terms sorted, (k, terms) count of each cluster's documents using each term), as
    scikit-learn's binary CountVectorizer gives; None when no term is left."""
    if words is None or vocabulary is None:
        vocabulary = LabelWords()
        words = [vocabulary.number(label_words(text)) for text in texts]
    return _class_counts(words, vocabulary, labels, k, max_df, min_df)


def label_words(text: str) -> list[str]:
    """The distinct words of a label text that CountVectorizer(stop_words="english",
    token_pattern=TOKEN_PATTERN, preprocessor=_preprocess, binary=True) would count."""
    from pipeline.cluster.stop_words import ENGLISH_STOP_WORDS

    terms = set(_TOKEN.findall(_preprocess(text)))
    terms.difference_update(ENGLISH_STOP_WORDS)
    return list(terms)


def label_text(title: str, chunk_texts: list[str]) -> str:
    """What a document's cluster label is read from: its title and its opening."""
    return title + "\n" + "\n".join(chunk_texts)[:LABEL_TEXT_CHARS]


class DocVectors:
    """Each parsed file's document vector, as a pooled first build's workers made them: per
    batch, the files' shas and a matrix; a file without chunks has row -1."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[int, int]] = {}  # sha -> (batch, row), row -1: no chunks
        self.blocks: list[np.ndarray] = []

    def add(self, shas: list[str], rows: list[int], matrix: np.ndarray) -> None:
        batch = len(self.blocks)
        self.blocks.append(matrix)
        for sha, row in zip(shas, rows, strict=True):
            self.rows[sha] = (batch, row)

    def documents(
        self, manifest: dict[str, str], dimensions: int
    ) -> tuple[list[Doc], list[Doc], np.ndarray] | None:
        """(every document, those with chunks, their vectors) in manifest order, or None
        when a file of the manifest is not here or the sizes differ."""
        docs, with_chunks, picks = [], [], []
        rows = self.rows
        for path, sha in manifest.items():
            found = rows.get(sha)
            if found is None:
                return None
            doc = Doc(path, sha, "", "", [])
            docs.append(doc)
            if found[1] >= 0:
                with_chunks.append(doc)
                picks.append(found)
        if any(b.shape[1:] != (dimensions,) for b in self.blocks if len(b)):
            return None
        starts = np.cumsum([0] + [len(b) for b in self.blocks])
        flat = np.fromiter((starts[b] + r for b, r in picks), dtype=np.int64, count=len(picks))
        parts = [b for b in self.blocks if len(b)]
        matrix = np.concatenate(parts) if parts else np.zeros((0, dimensions), np.float32)
        return docs, with_chunks, matrix[flat]


class LabelWords(dict):
    """Term -> column, a new term getting the next column; `by_sha`: each document's numbered
    `label_words`, from a pooled first build's workers."""

    def __init__(self) -> None:
        super().__init__()
        self.by_sha: dict[str, np.ndarray] = {}

    def __missing__(self, term: str) -> int:
        column = self[term] = len(self)
        return column

    def number(self, words: list[str]) -> np.ndarray:
        return np.fromiter(map(self.__getitem__, words), dtype=np.int32, count=len(words))

    def add(self, sha: str, words: str) -> None:
        """A document's label words as a worker hands them over (space-separated)."""
        self.by_sha[sha] = self.number(words.split())


def _class_counts(
    words: list[np.ndarray],
    vocabulary: LabelWords,
    labels: np.ndarray,
    k: int,
    max_df: float,
    min_df: int,
) -> tuple[Any, np.ndarray] | None:
    """`class_counts` from each document's set of numbered words (binary counts need only the
    set; `tests/test_cluster_counts.py` compares it with CountVectorizer)."""
    n_terms = len(vocabulary)
    sizes = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
    # int32 throughout; the cell numbers alone need int64.
    column = np.concatenate(words).astype(np.int32, copy=False) if words else _I32
    df = np.bincount(column, minlength=n_terms)
    if not df.any():
        return None  # CountVectorizer: "empty vocabulary"
    most = max_df * len(words)  # a float share, as CountVectorizer reads max_df
    if most < min_df:
        return None  # CountVectorizer: "max_df corresponds to < documents than min_df"
    keep = (df <= most) & (df >= min_df)
    if not keep.any():
        return None  # CountVectorizer: "After pruning, no terms remain"
    names = np.array(list(vocabulary), dtype=object)
    kept = np.flatnonzero(keep)
    kept = kept[np.argsort(names[kept], kind="stable")]  # columns in term order
    new_column = np.full(n_terms, -1, dtype=np.int32)
    new_column[kept] = np.arange(len(kept), dtype=np.int32)
    mine = new_column[column]
    del column
    used = np.flatnonzero(mine >= 0)
    doc = np.searchsorted(np.cumsum(sizes), used, side="right")  # the document of each pair
    cells = np.asarray(labels, dtype=np.int64)[doc] * len(kept) + mine[used]
    per_class = np.bincount(cells, minlength=k * len(kept)).reshape(k, len(kept))
    return names[kept], per_class.astype(np.float64)


def label_of(keywords: list[str], fallback: str) -> str:
    return " / ".join(keywords[:LABEL_WORDS]) if keywords else fallback


def _unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


# -- the stage: full clustering or incremental assignment ----------------------------------


@dataclass
class Doc:
    path: str
    sha256: str
    title: str
    text: str
    chunk_shas: list[bytes]


@dataclass
class StageResult:
    mode: str  # "full", "assign", "unchanged" or "disabled"
    documents: int = 0
    assigned: int = 0
    removed: int = 0
    k: int = 0
    silhouette: float | None = None
    tried: dict[int, float] = field(default_factory=dict)  # silhouette of each candidate k
    pending: int = 0  # documents added or changed since the last full clustering
    seconds: float = 0.0
    # A fit left to the helper process: the settings it was asked with, for the digest.
    deferred: str = ""

    def digest(self) -> str:
        if self.deferred:
            return f"{self.mode}:{self.documents}:deferred {self.deferred}:{self.pending}"
        return f"{self.mode}:{self.documents}:{self.k}:{self.pending}"


def clear(state: Any) -> None:
    """Clustering turned off: forget everything, so pack publishes no clusters."""
    state.clear_clusters(STATE_KEY)


def rebalance_at(threshold: int, share: float, documents: int) -> int:
    """Changed documents since the last full clustering at which the next one is due."""
    return max(threshold, math.ceil(share * documents))


def run_stage(
    state: Any,
    chunk_key: str,
    model: str,
    dimensions: int,
    max_clusters: int,
    threshold: int,
    full: bool = False,
    share: float = 0.0,
    changes: tuple[list[tuple[str, str]], list[str], int] | None = None,
    helper: Any = None,
) -> StageResult:
    """Bring the stored clustering up to date with the manifest: a full clustering when due
    (docs/clusters.md, "Incremental assign and rebalance"), else the changed documents go to
    their nearest centroid. `changes`: from `changes_of`, else the manifest is diffed."""
    started = time.perf_counter()
    info = state.get_value(STATE_KEY) or {}
    if changes is None:
        changed_rows, removed = state.cluster_changes()
        documents = state.manifest_size()
    else:
        changed_rows, removed, documents = changes
    manifest = dict(changed_rows)
    changed = [path for path, _ in changed_rows]
    settings = {"model": model, "chunk_key": chunk_key, "max_clusters": max_clusters}
    # A fit a failed run left due (`DEFERRED`) is redone in full.
    same_model = all(info.get(key) == value for key, value in settings.items())
    same_model = same_model and not info.get(DEFERRED)
    pending = int(info.get("pending", 0)) + len(changed)
    if not (changed or removed) and same_model and not full:
        result = StageResult("unchanged", documents, pending=pending, k=info.get("k", 0))
    elif full or not same_model or pending >= rebalance_at(threshold, share, documents):
        due = _full(state, chunk_key, model, dimensions, max_clusters, helper)
        if isinstance(due, StageResult):
            result = due
            state.set_value(STATE_KEY, {**settings, **_summary(result)})
        else:
            result, finish = due
            result.deferred = json.dumps(settings, sort_keys=True)
            state.set_value(STATE_KEY, {**settings, DEFERRED: True})

            def settle() -> None:
                state.set_value(STATE_KEY, {**settings, **_summary(finish())})

            state.clusters_due = settle
    else:
        result = _assign(state, chunk_key, model, dimensions, changed, removed, manifest)
        result.documents = documents
        result.pending = pending
        result.k = info.get("k", 0)
        state.set_value(STATE_KEY, {**info, "pending": pending})
    result.seconds = time.perf_counter() - started
    return result


def changes_of(
    state: Any, fresh: list[tuple[str, str]], removed: list[str], documents: int
) -> tuple[list[tuple[str, str]], list[str], int]:
    """`State.cluster_changes` from discover's changes since the last clean run."""
    stored = state.cluster_docs_of([path for path, _ in fresh] + list(removed))
    changed = sorted((p, sha) for p, sha in fresh if (stored.get(p) or (0, 0, None))[2] != sha)
    gone = sorted(p for p in set(removed) if p in stored)
    return changed, gone, documents


def _summary(result: StageResult) -> dict[str, Any]:
    return {
        "k": result.k,
        "silhouette": result.silhouette,
        "tried": result.tried,
        "pending": 0,
        "documents": result.documents,
        "built_at": time.time(),
    }


def load_docs(state: Any, chunk_key: str, paths: list[str], manifest: dict[str, str]) -> list[Doc]:
    """Title, text and chunk hashes of each path (in the given order), from the chunk cache."""
    data = state.get_chunks(chunk_key, {manifest[p] for p in paths})
    docs = []
    for path in paths:
        sha = manifest[path]
        entry = data.get(sha)
        if entry is None:
            continue
        chunks = entry["chunks"]
        docs.append(
            Doc(
                path=path,
                sha256=sha,
                title=entry.get("title") or "",
                text="\n".join(c["text"] for c in chunks),
                chunk_shas=[bytes.fromhex(c["sha256"]) for c in chunks],
            )
        )
    return docs


def doc_matrix(
    state: Any, model: str, dimensions: int, docs: list[Doc], chunk_key: str = ""
) -> np.ndarray:
    """Document vectors, the normalised mean of their chunk vectors (from the state or the
    published index)."""
    chunk_shas = [s for d in docs for s in d.chunk_shas]
    owner = np.repeat(np.arange(len(docs)), [len(d.chunk_shas) for d in docs])
    vectors = state.get_embeddings(model, chunk_shas, dimensions, missing_ok=True)
    return document_vectors(vectors, owner, len(docs))


def finish_deferred(state: Any) -> None:
    """Store a fit the helper was making, waiting for it; what reads the clusters calls this."""
    settle = getattr(state, "clusters_due", None)
    if settle is not None:
        state.clusters_due = None
        settle()


def _full(
    state: Any,
    chunk_key: str,
    model: str,
    dimensions: int,
    max_clusters: int,
    helper: Any = None,
) -> StageResult | tuple[StageResult, Callable[[], StageResult]]:
    """A full clustering; with `helper`, the result so far and the function that finishes it."""
    manifest = state.manifest_shas()
    docs, with_chunks, vectors = _full_inputs(state, chunk_key, model, dimensions, manifest)
    if not with_chunks:
        _store_full(state, docs, [], np.zeros(0), np.zeros(0), [], np.zeros((0, dimensions)))
        return StageResult("full", documents=len(docs), k=0)
    if helper is not None:
        helper.submit(vectors, max_clusters)
        sofar = StageResult("full", documents=len(docs), assigned=len(with_chunks))

        def finish() -> StageResult:
            choice = helper.result()
            helper.close()  # reaped now: its CPU counts in this run's figures
            return _finished(state, docs, with_chunks, vectors, choice)

        return sofar, finish
    return _finished(state, docs, with_chunks, vectors, choose_and_fit(vectors, max_clusters))


def _full_inputs(
    state: Any, chunk_key: str, model: str, dimensions: int, manifest: dict[str, str]
) -> tuple[list[Doc], list[Doc], np.ndarray]:
    """Every document, those with chunks, and their vectors (a pooled first build's
    `DocVectors` when they cover it: no chunk record is decoded)."""
    made = getattr(state, "doc_vectors", None)
    if made is not None:
        state.doc_vectors = None
        found = made.documents(manifest, dimensions)
        known = getattr(state, "label_words", None)
        # Their documents carry no text: only when the labels need none.
        if (
            found is not None
            and len(found[1]) >= NUMPY_BELOW
            and known is not None
            and all(d.sha256 in known.by_sha for d in found[1])
        ):
            return found
    docs = load_docs(state, chunk_key, list(manifest), manifest)
    with_chunks = [d for d in docs if d.chunk_shas]
    return docs, with_chunks, doc_matrix(state, model, dimensions, with_chunks, chunk_key)


def _finished(
    state: Any, docs: list[Doc], with_chunks: list[Doc], vectors: np.ndarray, choice: KChoice
) -> StageResult:
    new_of_old = _size_order(choice.labels, choice.k)
    labels = new_of_old[choice.labels]
    centroids = np.zeros_like(choice.centroids)
    centroids[new_of_old] = choice.centroids
    similarity = np.einsum("ij,ij->i", vectors, centroids[labels])
    known = getattr(state, "label_words", None)  # a pooled first build's, from its workers
    words = None
    if known is not None and all(d.sha256 in known.by_sha for d in with_chunks):
        words = [known.by_sha[d.sha256] for d in with_chunks]
    texts = [label_text(d.title, [d.text]) for d in with_chunks]
    keywords = cluster_keywords(texts, labels, choice.k, words=words, vocabulary=known)
    if known is not None:
        state.label_words = None  # read once: its memory goes before pack's peak
    _store_full(state, docs, with_chunks, labels, similarity, keywords, centroids)
    return StageResult(
        "full",
        documents=len(docs),
        assigned=len(with_chunks),
        k=choice.k,
        silhouette=round(choice.silhouette, 4),
        tried=choice.tried,
    )


def _size_order(labels: np.ndarray, k: int) -> np.ndarray:
    """new id of each old id: the largest cluster becomes 0 (ties: the older id first)."""
    sizes = np.bincount(labels, minlength=k)
    order = np.lexsort((np.arange(k), -sizes))  # old ids, largest first
    new_of_old = np.empty(k, dtype=np.int64)
    new_of_old[order] = np.arange(k)
    return new_of_old


def _store_full(
    state: Any,
    docs: list[Doc],
    with_chunks: list[Doc],
    labels: np.ndarray,
    similarity: np.ndarray,
    keywords: list[list[str]],
    centroids: np.ndarray,
) -> None:
    assigned = {d.path: (int(labels[i]), float(similarity[i])) for i, d in enumerate(with_chunks)}
    state.replace_clusters(
        ((d.path, d.sha256, *assigned.get(d.path, (-1, 0.0))) for d in docs),
        (
            (c, label_of(keywords[c], f"cluster {c}"), json.dumps(keywords[c]), centroids[c])
            for c in range(len(keywords))
        ),
    )


def _assign(
    state: Any,
    chunk_key: str,
    model: str,
    dimensions: int,
    changed: list[str],
    removed: list[str],
    manifest: dict[str, str],
) -> StageResult:
    """Nearest existing centroid for each changed document; nothing else is read."""
    rows = [(cid, blob) for cid, _, _, blob in state.cluster_topics()]
    ids = [cid for cid, _ in rows]
    docs = load_docs(state, chunk_key, changed, manifest)
    with_chunks = [d for d in docs if d.chunk_shas]
    placed: dict[str, tuple[int, float]] = {}
    if with_chunks and rows:
        centroids = np.stack([np.frombuffer(blob, dtype=np.float32) for _, blob in rows])
        vectors = doc_matrix(state, model, dimensions, with_chunks, chunk_key)
        scores = vectors @ centroids.T
        best = scores.argmax(axis=1)
        for i, d in enumerate(with_chunks):
            placed[d.path] = (int(ids[best[i]]), float(scores[i, best[i]]))
    state.update_cluster_docs(
        removed, ((d.path, d.sha256, *placed.get(d.path, (-1, 0.0))) for d in docs)
    )
    return StageResult("assign", assigned=len(with_chunks), removed=len(removed))


# -- what pack reads -----------------------------------------------------------------------


@dataclass
class StoredClusters:
    """The stage's result as pack needs it."""

    paths: list[str]
    cluster_ids: np.ndarray  # int32
    similarity: np.ndarray  # float64, cosine to the centroid
    shas: list[str]  # the file content each assignment was made for
    topics: list[tuple[int, str, list[str], np.ndarray]]  # id, label, keywords, centroid
    info: dict[str, Any]


def load_stored(state: Any) -> StoredClusters | None:
    """None when clustering is off or has never run."""
    if state is None:
        return None
    finish_deferred(state)
    info = state.get_value(STATE_KEY)
    if not info:
        return None
    rows = state.cluster_docs()
    n = len(rows)
    topics = _topics(state)
    return StoredClusters(
        [r[0] for r in rows],
        np.fromiter((r[1] for r in rows), dtype=np.int32, count=n),
        np.fromiter((r[2] for r in rows), dtype=np.float64, count=n),
        [r[3] for r in rows],
        topics,
        info,
    )


def assigned(files: Any, stored: StoredClusters) -> tuple[np.ndarray, np.ndarray]:
    """Cluster id (where the path is assigned at the same content, else -1) and similarity
    of every row of `files`, by one hash join in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = files.num_rows
    if not stored.paths or not n:
        return np.full(n, -1, dtype=np.int32), np.zeros(n, dtype=np.float64)
    at = pc.index_in(files.column("path"), value_set=pa.array(stored.paths, pa.string()))
    found = at.is_valid().to_numpy(zero_copy_only=False)
    rows = at.fill_null(0).to_numpy().astype(np.int64)
    same = pc.equal(files.column("sha256"), pa.array(stored.shas, pa.string()).take(rows))
    same = same.to_numpy(zero_copy_only=False) & found
    ids = np.where(same, stored.cluster_ids[rows], -1).astype(np.int32)
    similarity = np.where(found, stored.similarity[rows], 0.0)
    return ids, similarity


@dataclass(frozen=True)
class ClusterAssignment:
    """pack's `clusters` step: each file row's cluster id, the `clusters` table and the
    `SIMILARITY_TABLE`."""

    cluster_ids: pa.Array  # int32, -1: in no cluster
    table: pa.Table | None  # None: clustering off or never run
    similarity: pa.Table | None = None


# The write side's own table (readers ignore it): each file row's similarity to its centroid,
# so an edit carries unchanged assignments over from the previous index.
SIMILARITY_TABLE = "cluster_similarity"
# Past this many rebuilt file rows, the assignments are read from the state in one pass.
CARRY_MAX = 5000


def _carried(plan: Plan, state: State, info: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """Cluster id and similarity of every file row, from the previous index for reused rows
    and the state for rebuilt ones; None when that index holds another clustering."""
    previous = plan.previous
    if previous is None:
        return None
    from kernel import index_format

    old_table = previous.tables.get("clusters")
    old_similarity = previous.tables.get(SIMILARITY_TABLE)
    old_files = previous.tables["files"]
    if old_table is None or old_similarity is None:
        return None
    if old_similarity.num_rows != old_files.num_rows:
        return None
    raw = (old_table.schema.metadata or {}).get(index_format.CLUSTERS_META_KEY.encode())
    try:
        summary = json.loads(raw) if raw else {}
    except ValueError:
        return None
    if summary.get("built_at") != info.get("built_at") or summary.get("k") != info.get("k"):
        return None
    source = plan.file_source
    fresh = np.flatnonzero(source < 0)
    if len(fresh) > CARRY_MAX:
        return None
    reused = source >= 0
    n = len(source)
    ids = np.full(n, -1, dtype=np.int32)
    similarity = np.zeros(n, dtype=np.float64)
    ids[reused] = index_format.column_array(old_files, "cluster_id").to_numpy()[source[reused]]
    old_values = index_format.column_array(old_similarity, "similarity").to_numpy()
    similarity[reused] = old_values[source[reused]]
    if len(fresh):
        import pyarrow as pa

        at = pa.array(fresh)
        paths = plan.files.column("path").take(at).to_pylist()
        shas = plan.files.column("sha256").take(at).to_pylist()
        stored = state.cluster_docs_of(paths)
        for row, path, sha in zip(fresh.tolist(), paths, shas, strict=True):
            found = stored.get(path)
            if found is not None:
                cid, sim, stored_sha = found
                similarity[row] = sim
                ids[row] = cid if stored_sha == sha else -1
    return ids, similarity


def assign(plan: Plan, state: State | None) -> ClusterAssignment:
    """pack's step: the stage's result laid over the files being packed (all -1 when off)."""
    import pyarrow as pa

    files = plan.files
    if state is not None:
        finish_deferred(state)
    info = state.get_value(STATE_KEY) if state is not None else None
    if not info:
        ids = np.full(files.num_rows, -1, dtype=np.int32)
        return ClusterAssignment(pa.array(ids, pa.int32()), None)
    carried = _carried(plan, state, info)  # type: ignore[arg-type]
    if carried is not None:
        ids, similarity = carried
        topics = _topics(state)
    else:
        stored = load_stored(state)
        assert stored is not None
        ids, similarity = assigned(files, stored)
        topics = stored.topics
    column = pa.array(ids, pa.int32())
    table = _clusters_table(files, ids, similarity, topics, info)
    return ClusterAssignment(
        column, table, pa.table({"similarity": pa.array(similarity, pa.float64())})
    )


def _topics(state: Any) -> list[tuple[int, str, list[str], np.ndarray]]:
    return [
        (cid, label, json.loads(keywords), np.frombuffer(blob, dtype=np.float32))
        for cid, label, keywords, blob in state.cluster_topics()
    ]


def _clusters_table(
    files: Any, ids: np.ndarray, similarity: np.ndarray, topics: list, info: dict
) -> Any:
    """The index's `clusters` table: one row per non-empty cluster, its size and its most
    central documents (ties by path); the stage's summary as schema metadata."""
    import pyarrow as pa

    from kernel import index_format

    n = len(ids)
    order = np.lexsort((np.arange(n), -similarity, ids))
    ordered = ids[order]
    wanted = np.array([cid for cid, *_ in topics], dtype=ordered.dtype)
    first = np.searchsorted(ordered, wanted, side="left")
    last = np.searchsorted(ordered, wanted, side="right")
    rows: dict[str, list] = {name: [] for name in index_format.CLUSTERS_SCHEMA.names}
    picks = [order[a : min(b, a + REPRESENTATIVES)] for a, b in zip(first, last, strict=True)]
    flat = np.concatenate(picks) if picks else np.zeros(0, dtype=np.int64)
    names = files.column("path").take(pa.array(flat, pa.int64())).to_pylist() if len(flat) else []
    at = 0
    for (cid, label, keywords, centroid), a, b, pick in zip(
        topics, first, last, picks, strict=True
    ):
        if b <= a:
            continue
        rows["cluster_id"].append(cid)
        rows["label"].append(label)
        rows["keywords"].append(keywords)
        rows["size"].append(int(b - a))
        rows["representative_paths"].append(names[at : at + len(pick)])
        rows["centroid"].append(centroid.tolist())
        at += len(pick)
    summary = {key: info.get(key) for key in ("k", "silhouette", "pending", "built_at", "tried")}
    summary["unclustered"] = int((ids < 0).sum())
    table = pa.table(rows, schema=index_format.CLUSTERS_SCHEMA)
    return table.replace_schema_metadata({index_format.CLUSTERS_META_KEY: json.dumps(summary)})


def clusters_table(files: Any, state: Any) -> Any:
    """The index's `clusters` table over `files` (with their `cluster_id` column)."""
    stored = load_stored(state)
    if stored is None:
        return None
    ids = files.column("cluster_id").to_numpy()
    return _clusters_table(files, ids, assigned(files, stored)[1], stored.topics, stored.info)
