"""What a packed index is built with besides the settings (the BM25F parameters and tables,
the analyzer, the near-duplicate signature), importable without NumPy or Arrow: every run, a
no-op included, reads these to decide whether pack is up to date."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kernel.text_analysis import ANALYZER_VERSION

FIELDS = ("title", "headings", "body")
TF_TABLE = "lexical_tf"
LENGTHS_TABLE = "lexical_lengths"

SIGNATURE_VERSION = "simhash64-w3-plain-1"
MAX_DISTANCE = 3  # bits
META_KEY = "near_duplicates"


def _float32(value: float) -> float:
    """`value` as the float32 the postings store it as, back as a Python float."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


@dataclass(frozen=True)
class Bm25fParams:
    k1: float = 1.2
    b: float = 0.75
    title: float = 2.0
    headings: float = 2.0
    body: float = 1.0

    def weights(self):  # -> np.ndarray
        import numpy as np

        return np.array([self.title, self.headings, self.body], dtype=np.float32)

    def to_json(self) -> dict:
        weights = (self.title, self.headings, self.body)
        return {
            "k1": self.k1,
            "b": self.b,
            "field_weights": {f: _float32(w) for f, w in zip(FIELDS, weights, strict=True)},
        }


PARAMS = Bm25fParams()


def lexical_meta(params: Bm25fParams = PARAMS) -> dict:
    return {
        "analyzer": ANALYZER_VERSION,
        "tables": ["lexical", "lexical_forward", TF_TABLE, LENGTHS_TABLE],
        **params.to_json(),
    }


def near_duplicates_meta() -> dict:
    return {"signature": SIGNATURE_VERSION, "max_distance": MAX_DISTANCE}
