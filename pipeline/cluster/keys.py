"""Where the clustering's summary sits in the state, importable without NumPy: every
ingest, a no-op's included, checks it before it knows whether anything will cluster."""

from __future__ import annotations

from typing import Any

STATE_KEY = "clustering"
# In that summary: a full clustering's fit was left to the helper process
# (`pipeline.cluster_helper`) and not stored yet. A run that failed before pack leaves it;
# the next run clusters in full.
DEFERRED = "deferred"


def is_deferred(state: Any) -> bool:
    return bool((state.get_value(STATE_KEY) or {}).get(DEFERRED))
