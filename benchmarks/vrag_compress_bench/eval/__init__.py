"""Retrieval evaluation: BEIR datasets, metrics through ranx, and the retention benchmark."""

from vrag_compress.beir import BeirDataset, DatasetError, load_beir, load_dataset
from vrag_compress_bench.eval.metrics import METRICS, evaluate

__all__ = ["METRICS", "BeirDataset", "DatasetError", "evaluate", "load_beir", "load_dataset"]
