"""The fusion settings an index is searched with: the defaults of `query.fusion`, overridden by
those its model calls for (`mdvdb.fusion_models`), as recorded in the index's meta at ingest."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from mdvdb.fusion_models import fusion_settings
from query.fusion import PARAMS, FusionParams


def params_for_meta(meta: dict[str, Any]) -> FusionParams:
    """Recorded settings first; an index from before they were recorded gets its model's.
    Unknown names (written by another version) are ignored, bad values too."""
    settings = meta.get("fusion")
    if not isinstance(settings, dict):
        settings = fusion_settings(meta.get("provider"), meta.get("model"))
    known = {f.name: f.type for f in fields(PARAMS)}
    clean = {}
    for name, value in settings.items():
        if name in known and isinstance(value, int | float) and not isinstance(value, bool):
            clean[name] = int(value) if isinstance(getattr(PARAMS, name), int) else float(value)
    return replace(PARAMS, **clean) if clean else PARAMS


def params_for(index) -> FusionParams:
    """The settings for this index's current snapshot (computed once per snapshot)."""
    snap = index.snapshot
    params = snap.cache.get("fusion_params")
    if params is None:
        params = params_for_meta(snap.meta)
        snap.cache["fusion_params"] = params
    return params
