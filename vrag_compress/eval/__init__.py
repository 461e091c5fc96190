"""Kept for old imports: retrieval evaluation now lives in :mod:`vrag_compress.bench.eval`."""

from vrag_compress.bench.eval import (
    METRICS,
    BeirDataset,
    DatasetError,
    evaluate,
    load_beir,
    load_dataset,
)

__all__ = ["METRICS", "BeirDataset", "DatasetError", "evaluate", "load_beir", "load_dataset"]
