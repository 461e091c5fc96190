"""Kept for old imports: the shared data folder now lives in :mod:`vrag_compress.bench.paths`."""

from vrag_compress.bench.paths import DATA_ENV, data_dir

__all__ = ["DATA_ENV", "data_dir"]
