"""A 2-D map of the documents coloured by cluster, as SVG or a self-contained HTML page,
written by hand (no plotting dependency)."""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

WIDTH, HEIGHT = 960, 720  # the plot area
LEGEND_WIDTH = 380
MARGIN = 24
MAX_POINTS = 20000  # beyond this, an even sample of documents is drawn (the file stays small)


@dataclass
class MapLabel:
    cluster_id: int
    text: str
    size: int


def colour(cluster_id: int) -> str:
    """Distinct colours for up to ~50 clusters: golden-angle hues, alternating lightness
    (hex, not hsl(): some SVG renderers draw hsl() colours black)."""
    import colorsys

    if cluster_id < 0:
        return "#b3b3b3"
    hue = (cluster_id * 0.381966) % 1.0
    light = (0.42, 0.58, 0.34)[cluster_id % 3]
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.7)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def _darker(hex_colour: str) -> str:
    """The label's colour: its cluster's, darkened so that it reads on white."""
    rgb = [int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(v * 0.7):02x}" for v in rgb)


def project(vectors: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(n, 2) coordinates: clusters placed by multidimensional scaling of their centres' cosine
    distances, each one's documents spread in a disc sized by the cluster along the two main
    directions of their offsets (docs/clusters.md, "The map")."""
    from threadpoolctl import threadpool_limits

    ids = sorted(set(labels.tolist()) - {-1})
    if not ids:
        return np.zeros((len(vectors), 2))
    centres = np.stack([vectors[labels == c].mean(axis=0) for c in ids])
    centres /= np.maximum(np.linalg.norm(centres, axis=1, keepdims=True), 1e-9)
    with threadpool_limits(1):
        places = _centre_layout(centres)
        offsets = vectors - np.where(
            (labels >= 0)[:, None], centres[np.searchsorted(ids, np.maximum(labels, 0))], 0.0
        )
        from sklearn.decomposition import PCA

        spread = (
            PCA(n_components=2, random_state=0).fit_transform(offsets)
            if len(vectors) > 2
            else (np.zeros((len(vectors), 2)))
        )
    spread /= max(float(np.percentile(np.linalg.norm(spread, axis=1), 95)), 1e-9)
    sizes = np.array([(labels == c).sum() for c in ids], dtype=float)
    gap = _nearest_gap(places)
    radius = 0.8 * gap * np.sqrt(sizes / sizes.max())
    coords = np.zeros((len(vectors), 2))
    for j, c in enumerate(ids):
        members = labels == c
        coords[members] = places[j] + spread[members] * radius[j]
    unclustered = labels < 0
    coords[unclustered] = spread[unclustered] * gap
    return coords


def _centre_layout(centres: np.ndarray) -> np.ndarray:
    if len(centres) == 1:
        return np.zeros((1, 2))
    if len(centres) == 2:
        return np.array([[-1.0, 0.0], [1.0, 0.0]])
    from sklearn.manifold import MDS

    distances = np.clip(1.0 - centres @ centres.T, 0.0, 2.0)
    np.fill_diagonal(distances, 0.0)
    distances = (distances + distances.T) / 2
    import inspect

    # scikit-learn 1.8 renamed `dissimilarity` to `metric` and will change `init`'s default.
    options = {"n_components": 2, "random_state": 0, "n_init": 1}
    params = inspect.signature(MDS).parameters
    if "init" in params:
        options["init"] = "random"
    if "dissimilarity" in params and params["dissimilarity"].default != "deprecated":
        options["dissimilarity"] = "precomputed"
    else:
        options["metric"] = "precomputed"
    mds = MDS(**options)
    return mds.fit_transform(distances)


def _nearest_gap(places: np.ndarray) -> float:
    """The median distance from a cluster's place to its nearest neighbour's."""
    if len(places) < 2:
        return 1.0
    d = np.linalg.norm(places[:, None, :] - places[None, :, :], axis=2)
    np.fill_diagonal(d, np.inf)
    return float(np.median(d.min(axis=1))) or 1.0


def _scale(coords: np.ndarray) -> np.ndarray:
    """Fit the points into the plot area, keeping the aspect ratio."""
    if not len(coords):
        return coords
    low = coords.min(axis=0)
    span = float(max((coords.max(axis=0) - low).max(), 1e-9))
    unit = (coords - low) / span
    x = MARGIN + unit[:, 0] * (WIDTH - 2 * MARGIN)
    y = MARGIN + 20 + (1.0 - unit[:, 1]) * (HEIGHT - 2 * MARGIN - 20)
    return np.column_stack([x, y])


def _label_boxes(anchors: dict[int, tuple[float, float]], texts: dict[int, str]) -> dict:
    """Place each label at its cluster's centre, then push overlapping ones apart vertically
    (a few passes of a greedy sweep): readable without a layout library."""
    placed: dict[int, list[float]] = {}
    for cid, (x, y) in anchors.items():
        width = 7.6 * len(texts[cid]) + 8  # bold 12 px DejaVu Sans: ~7.3 px a character
        placed[cid] = [
            min(max(x - width / 2, 2), WIDTH - width - 2),
            y,
            width,
        ]
    height = 16.0
    for _ in range(30):
        moved = False
        order = sorted(placed, key=lambda c: placed[c][1])
        for i, a in enumerate(order):
            for b in order[i + 1 :]:
                ax, ay, aw = placed[a]
                bx, by, bw = placed[b]
                if by - ay >= height:
                    break
                if ax < bx + bw and bx < ax + aw:
                    shift = (height - (by - ay)) / 2 + 0.5
                    placed[a][1] -= shift
                    placed[b][1] += shift
                    moved = True
        for box in placed.values():
            box[1] = min(max(box[1], MARGIN), HEIGHT - 6)
        if not moved:
            break
    return placed


def render_svg(
    coords: np.ndarray,
    labels: np.ndarray,
    paths: list[str],
    clusters: list[MapLabel],
    title: str,
) -> str:
    xy = _scale(coords)
    if len(xy) > MAX_POINTS:
        keep = np.linspace(0, len(xy) - 1, MAX_POINTS).round().astype(int)
    else:
        keep = np.arange(len(xy))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH + LEGEND_WIDTH}" '
        f'height="{max(HEIGHT, 60 + 17 * len(clusters))}" font-family="DejaVu Sans, Arial, '
        'sans-serif">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{MARGIN}" y="16" font-size="13" fill="#333">{html.escape(title)}</text>',
        '<g fill-opacity="0.55">',
    ]
    for i in keep:
        cid = int(labels[i])
        parts.append(
            f'<circle cx="{xy[i, 0]:.1f}" cy="{xy[i, 1]:.1f}" r="2.3" fill="{colour(cid)}">'
            f"<title>{html.escape(paths[i])} (cluster {cid})</title></circle>"
        )
    parts.append("</g>")
    anchors, texts = {}, {}
    for c in clusters:
        members = xy[labels == c.cluster_id]
        if len(members):
            anchors[c.cluster_id] = tuple(np.median(members, axis=0))
            texts[c.cluster_id] = f"{c.cluster_id}: {c.text}"
    boxes = _label_boxes(anchors, texts)
    parts.append(
        # A white halo under each label, then the label: two passes rather than
        # paint-order, which not every SVG renderer honours.
        '<g font-size="12" font-weight="bold">'
    )
    for halo in (True, False):
        for cid, (x, y, _) in boxes.items():
            paint = (
                'fill="white" stroke="white" stroke-width="4" stroke-linejoin="round"'
                if halo
                else f'fill="{_darker(colour(cid))}"'
            )
            parts.append(
                f'<text x="{x + 3:.1f}" y="{y + 4:.1f}" {paint}>{html.escape(texts[cid])}</text>'
            )
    parts.append("</g>")
    lx = WIDTH + 10
    parts.append(f'<g font-size="12" fill="#222"><text x="{lx}" y="40" font-weight="bold">')
    parts.append("cluster: label (documents)</text>")
    for row, c in enumerate(clusters):
        y = 58 + 17 * row
        swatch = colour(c.cluster_id)
        parts.append(f'<rect x="{lx}" y="{y - 10}" width="11" height="11" fill="{swatch}"/>')
        parts.append(
            f'<text x="{lx + 16}" y="{y}">{c.cluster_id}: {html.escape(c.text)} ({c.size})</text>'
        )
    parts.append("</g></svg>")
    return "\n".join(parts)


def render_html(svg: str, title: str) -> str:
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{margin:12px;font-family:sans-serif}</style></head><body>\n"
        f"{svg}\n<p style='color:#666;font-size:12px'>Hover a point for its path. "
        "Clusters are placed by the similarity of their centres (MDS); each cluster's "
        "documents spread around its place along their two main directions (PCA).</p>"
        "</body></html>\n"
    )
