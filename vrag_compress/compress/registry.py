"""Name -> compressor class, and `get_compressor(name, **params)`, the one way to build one by name.

Built-in methods and the variants are listed here; user-written methods join with
`register_compressor`. To build a compressor for a particular model (layer window, fitting),
use `vrag_compress.compress.compressor_for`, which calls `get_compressor`.
"""

from __future__ import annotations

import inspect
from typing import Any

from vrag_compress.compress.base import CompressionError, Compressor
from vrag_compress.compress.baselines import (
    AdaptiveEOSCompressor,
    ClusterCompressor,
    EOSCompressor,
    IdentityCompressor,
    PoolCompressor,
    RandomCompressor,
)
from vrag_compress.compress.profiles import profile_to_window
from vrag_compress.compress.sap import SAPCompressor
from vrag_compress.compress.uot import UOTCompressor
from vrag_compress.compress.variants import VARIANTS

COMPRESSORS: dict[str, type] = {
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
        *VARIANTS,
    )
}

_PROTOCOL = ("params", "requires_stats", "compress", "compress_many")


def register_compressor(cls: type) -> type:
    """Add a compressor class under ``cls.name`` (usable as a decorator); names are unique.

    The class satisfies the `Compressor` protocol (subclassing `BaseCompressor` is the easy way)
    and ``cls(**instance.params)`` rebuilds an instance: an index records the name and params
    and rebuilds the compressor from them when it is opened again.
    """
    name = getattr(cls, "name", None)
    missing = [attr for attr in _PROTOCOL if not hasattr(cls, attr)]
    if not isinstance(cls, type) or not isinstance(name, str) or not name or missing:
        raise CompressionError(
            f"{cls!r} is not a compressor class: subclass BaseCompressor, or give the class a "
            f"str `name` and {', '.join(_PROTOCOL)}"
            + (f" (missing {missing})" if isinstance(cls, type) and missing else "")
        )
    if COMPRESSORS.get(name, cls) is not cls:
        raise CompressionError(f"a compressor named {name!r} is already registered")
    COMPRESSORS[name] = cls
    return cls


def list_compressors() -> list[str]:
    """Names accepted by `get_compressor`."""
    return list(COMPRESSORS)


def get_compressor(name: str, **params: Any) -> Compressor:
    """Build a compressor by name; ``get_compressor(c.name, **c.params) == c``.

    Budget: ``ratio`` (keep ratio in (0, 1]) or ``merge_factor`` (>= 1, ratio = 1/MF).
    Methods with a SAP layer window also take ``profile=`` (built-in name, model id, JSON path,
    dict or CalibrationProfile), which sets ``layers`` (and ``n_layers`` where the method has it).
    """
    cls = COMPRESSORS.get(name)
    if cls is None:
        raise CompressionError(f"unknown compressor {name!r}; choose one of {list_compressors()}")
    if "merge_factor" in params:
        params = _merge_factor_to_ratio(name, params)
    if "profile" in params:
        params = profile_to_window(name, cls, params)
    try:
        compressor: Compressor = cls(**params)
    except TypeError as exc:
        raise CompressionError(_bad_parameters(name, cls, params, exc)) from exc
    return compressor


def _bad_parameters(name: str, cls: type, params: dict[str, Any], exc: TypeError) -> str:
    """Name only the parameters `cls` does not take (not every one given), and what it takes."""
    accepted = [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    unknown = sorted(set(params) - set(accepted))
    if not unknown:
        return f"{name}: bad parameters: {exc}"
    word = "parameter" if len(unknown) == 1 else "parameters"
    return f"{name}: unknown {word} {', '.join(unknown)}; {name} takes {', '.join(accepted)}"


def _merge_factor_to_ratio(name: str, params: dict[str, Any]) -> dict[str, Any]:
    params = dict(params)
    factor = params.pop("merge_factor")
    if "ratio" in params:
        raise CompressionError(f"{name}: pass ratio or merge_factor, not both")
    if not isinstance(factor, (int, float)) or not factor >= 1:
        raise CompressionError(f"{name}: merge_factor must be a number >= 1, got {factor!r}")
    params["ratio"] = 1.0 / float(factor)
    return params
