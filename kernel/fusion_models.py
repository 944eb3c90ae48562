"""Hybrid fusion settings per embedding model, recorded in the index meta at ingest
(docs/architecture.md, "Fusion settings per model").
"""

from __future__ import annotations

from kernel.config import local_model_is_encoder

# Overrides of query.score.fusion.FusionParams fields for the local BERT-style encoders: every
# held-out set of the five picks these.
LOCAL_ENCODER: dict[str, float] = {
    "dense_weight": 0.4,
    "feedback_weight": 0.4,
    "dense_feedback_weight": 0.5,
    # page-level evidence on the dense side and section k1 were chosen with WordLlama
    # (docs/search-quality.md, "CACM round 3: idf forms that keep a folder's topic word,
    # page-level evidence on the dense side") and not measured with an encoder: off here
    "page_dense_weight": 0.0,
    "section_k1": 0.0,
    # the stub prior for catalogue records was measured with WordLlama only
    # (docs/search-quality.md, "CACM round 5, dense side and priors")
    "stub_weight": 0.0,
}


def fusion_settings(provider: str | None, model: str | None) -> dict[str, float]:
    """The FusionParams overrides for an index embedded by (provider, model); {} = defaults.
    Remote models are left at the defaults: they were not measured here."""
    if provider == "local" and local_model_is_encoder(model):
        return dict(LOCAL_ENCODER)
    return {}
