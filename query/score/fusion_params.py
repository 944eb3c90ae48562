"""The fusion settings an index is searched with: the defaults of `query.score.fusion`,
overridden by those its model calls for (`kernel.fusion_models`), as recorded in the index's
meta at ingest."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from kernel.fusion_models import fusion_settings
from query.score.fusion import FusionParams, current


def params_for_meta(meta: dict[str, Any]) -> FusionParams:
    """Recorded settings first; its model's for any name not recorded (an index from before
    they were recorded, or before a setting joined the model's table). Unknown names (written
    by another version) are ignored, bad values too."""
    recorded = meta.get("fusion")
    settings = fusion_settings(meta.get("provider"), meta.get("model"))
    if isinstance(recorded, dict):
        settings = {**settings, **recorded}
    base = current()
    known = {f.name for f in fields(base)}
    clean = {}
    for name, value in settings.items():
        if name in known and isinstance(value, int | float) and not isinstance(value, bool):
            kind = type(getattr(base, name))
            if kind in (int, float):
                clean[name] = kind(value)
    return replace(base, **clean) if clean else base


def params_for(index) -> FusionParams:
    """The settings for this index's current snapshot. Not cached: the defaults are read at
    call time (`query.score.fusion.current`), so a benchmark that swaps them is followed."""
    return params_for_meta(index.snapshot.meta)
