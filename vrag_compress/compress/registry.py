"""Name -> compressor class, and `get_compressor(name, **params)`, the one way to build one."""

from __future__ import annotations

from typing import Any

from vrag_compress.compress.base import CompressionError
from vrag_compress.compress.baselines import (
    AdaptiveEOSCompressor,
    ClusterCompressor,
    EOSCompressor,
    IdentityCompressor,
    PoolCompressor,
    RandomCompressor,
)
from vrag_compress.compress.common import BaseCompressor
from vrag_compress.compress.sap import SAPCompressor
from vrag_compress.compress.uot import UOTCompressor

COMPRESSORS: dict[str, type[BaseCompressor]] = {
    cls.name: cls
    for cls in (
        IdentityCompressor,
        SAPCompressor,
        UOTCompressor,
        RandomCompressor,
        EOSCompressor,
        AdaptiveEOSCompressor,
        ClusterCompressor,
        PoolCompressor,
    )
}


def register_compressor(cls: type[BaseCompressor]) -> type[BaseCompressor]:
    """Add a compressor class under ``cls.name`` (usable as a decorator); names are unique."""
    if not (isinstance(cls, type) and issubclass(cls, BaseCompressor)):
        raise CompressionError(f"{cls!r} is not a BaseCompressor subclass")
    if COMPRESSORS.get(cls.name, cls) is not cls:
        raise CompressionError(f"a compressor named {cls.name!r} is already registered")
    COMPRESSORS[cls.name] = cls
    return cls


def list_compressors() -> list[str]:
    """Names accepted by `get_compressor`."""
    return list(COMPRESSORS)


def get_compressor(name: str, **params: Any) -> BaseCompressor:
    """Build a compressor by name; ``get_compressor(c.name, **c.params) == c``.

    Budget: ``ratio`` (keep ratio in (0, 1]) or ``merge_factor`` (>= 1, ratio = 1/MF).
    SAP also takes ``profile=`` (built-in name, model id, JSON path, dict or CalibrationProfile).
    """
    cls = COMPRESSORS.get(name)
    if cls is None:
        raise CompressionError(f"unknown compressor {name!r}; choose one of {list_compressors()}")
    if "merge_factor" in params:
        params = _merge_factor_to_ratio(name, params)
    try:
        if cls is SAPCompressor:
            return SAPCompressor.create(**params)
        return cls(**params)
    except TypeError as exc:
        raise CompressionError(f"{name}: bad parameters {sorted(params)}: {exc}") from exc


def _merge_factor_to_ratio(name: str, params: dict[str, Any]) -> dict[str, Any]:
    params = dict(params)
    factor = params.pop("merge_factor")
    if "ratio" in params:
        raise CompressionError(f"{name}: pass ratio or merge_factor, not both")
    if not isinstance(factor, (int, float)) or not factor >= 1:
        raise CompressionError(f"{name}: merge_factor must be a number >= 1, got {factor!r}")
    params["ratio"] = 1.0 / float(factor)
    return params
