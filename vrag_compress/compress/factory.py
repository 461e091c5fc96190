"""`compressor_for`: the one place that turns a method choice into a compressor for an encoder.

Methods describe themselves with capability attributes (see `capabilities`); this function reads
them and fills in what depends on the model: the keep ratio, the SAP layer window (given window,
calibration profile, the model's built-in profile, or the uncalibrated fallback with a warning)
and the fitting step. The index, the CLI and the benchmarks all build compressors here, so a new
method needs only its class and its registration.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrag_compress.compress.base import CompressionError, Compressor
from vrag_compress.compress.profiles import (
    CalibrationProfile,
    UncalibratedWindowWarning,
    builtin_profile,
    fallback_window,
    resolve_profile,
    takes_param,
)
from vrag_compress.compress.registry import COMPRESSORS, get_compressor
from vrag_compress.encoders.base import Encoder, PageEncoding

ProfileLike = str | Path | dict | CalibrationProfile
DEFAULT_METHOD = "sap"


@dataclass(frozen=True)
class Capabilities:
    """What a compression method needs, as declared on its class.

    kind: "pruning" (keeps source tokens), "merging" (builds new vectors) or "none".
    stats: the attention statistic every page must carry ("centrality", "eos_attention"), or
    None when the method needs none (it may still use them: see ``requires_stats``).
    takes_ratio: the method has a keep ratio (its constructor has a ``ratio`` parameter).
    uses_window: the method reads a SAP layer window (``layers=``), chosen per model.
    needs_fit: the method has a fitting step on pages (``fit(pages)``) unless its parameters
    already fix what fitting would (``fit_params``; check ``fitted`` on an instance).
    """

    kind: str = "unknown"
    stats: str | None = None
    takes_ratio: bool = True
    uses_window: bool = False
    needs_fit: bool = False
    fit_params: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The capabilities as JSON (what `vrag methods --json` prints)."""
        return dataclasses.asdict(self)


def capabilities(method: str | type | Compressor) -> Capabilities:
    """The capabilities of a registered method name, a compressor class or an instance.

    Classes that do not subclass `BaseCompressor` may omit any attribute; the defaults above
    apply (no statistics, no window, no fitting)."""
    if isinstance(method, str):
        cls: type = _registered(method)
    else:
        cls = method if isinstance(method, type) else type(method)
    default = Capabilities()
    declared = {
        f.name: getattr(cls, f.name, getattr(default, f.name))
        for f in dataclasses.fields(default)
        if f.name != "takes_ratio"
    }
    return Capabilities(**declared, takes_ratio=takes_param(cls, "ratio"))


def parse_method_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``name:key=value:key=value`` -> (name, params); values parsed as JSON when they can be."""
    name, _, rest = spec.strip().partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(":")):
        key, eq, value = item.partition("=")
        if not eq:
            raise CompressionError(f"method {spec!r}: parameter {item!r} needs key=value")
        try:
            params[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            params[key.strip()] = value.strip()
    return name, params


def compressor_for(
    method: str | Compressor | None = None,
    *,
    encoder: Encoder | None = None,
    model_id: str | None = None,
    n_layers: int | None = None,
    ratio: float | None = None,
    window: Sequence[int] | None = None,
    profile: ProfileLike | None = None,
    fit_pages: Sequence[PageEncoding] | None = None,
    **params: Any,
) -> Compressor:
    """The compressor to use with one encoder.

    method: a registered name (default "sap") with ``params``, or a compressor object, used as
    given except that a missing layer window is filled in.
    encoder (or model_id and n_layers): the model whose pages will be compressed.
    ratio: the keep ratio for a method built by name that takes one (identity ignores it).
    window / profile: the model's SAP layer window, explicitly or from a calibration profile,
    for methods that read one (others ignore it); otherwise the model's built-in profile when
    its layer count matches, else the uncalibrated fallback window for ``n_layers`` with an
    `UncalibratedWindowWarning`.
    fit_pages: pages to fit methods with a fitting step on (adaptive-eos without ``kappa``).
    """
    if encoder is not None:
        model_id = model_id or getattr(encoder, "model_id", None)
        n_layers = n_layers if n_layers is not None else int(encoder.n_layers)
    if method is None or isinstance(method, str):
        compressor = _by_name(
            method or DEFAULT_METHOD, ratio, params, model_id, n_layers, window, profile
        )
    else:
        if params:
            raise CompressionError(
                f"parameters {sorted(params)} given with a compressor object; set them on it"
            )
        compressor = _with_window(method, model_id, n_layers, window, profile)
    return _fitted(compressor, fit_pages)


def _registered(name: str) -> type:
    cls = COMPRESSORS.get(name)
    if cls is None:
        raise CompressionError(f"unknown compressor {name!r}; choose one of {list(COMPRESSORS)}")
    return cls


def _by_name(
    name: str,
    ratio: float | None,
    params: dict[str, Any],
    model_id: str | None,
    n_layers: int | None,
    window: Sequence[int] | None,
    profile: ProfileLike | None,
) -> Compressor:
    caps = capabilities(name)
    params = dict(params)
    if caps.takes_ratio and ratio is not None and "merge_factor" not in params:
        params.setdefault("ratio", ratio)
    if caps.uses_window and "layers" not in params and "profile" not in params:
        params.update(_window_params(_registered(name), model_id, n_layers, window, profile))
    return get_compressor(name, **params)


def _with_window(
    compressor: Compressor,
    model_id: str | None,
    n_layers: int | None,
    window: Sequence[int] | None,
    profile: ProfileLike | None,
) -> Compressor:
    """The object as given, with the model's window when it reads one and has none yet."""
    if not capabilities(compressor).uses_window:
        return compressor
    recorded = getattr(compressor, "n_layers", None)
    if recorded is not None and n_layers is not None and recorded != n_layers:
        raise CompressionError(
            f"{compressor.name}: its layer window is for {recorded} decoder layers but the "
            f"model has {n_layers}; use this model's profile or calibrate it (vrag calibrate)"
        )
    if getattr(compressor, "layers", None) is not None:
        return compressor
    if not dataclasses.is_dataclass(compressor):
        raise CompressionError(
            f"{compressor.name}: set its layer window (layers=...) before passing it; only "
            "dataclass compressors get the model's window filled in"
        )
    changes = _window_params(type(compressor), model_id, n_layers, window, profile)
    if not changes:
        return compressor
    return dataclasses.replace(compressor, **changes)


def _window_params(
    cls: type,
    model_id: str | None,
    n_layers: int | None,
    window: Sequence[int] | None,
    profile: ProfileLike | None,
) -> dict[str, Any]:
    """``layers`` (and ``n_layers`` where the class takes it) for the model, or {} when the
    model is unknown (SAP then falls back per page, with its own warning)."""
    layers, depth = _window(model_id, n_layers, window, profile)
    if layers is None:
        return {}
    out: dict[str, Any] = {"layers": list(layers)}
    if depth is not None and takes_param(cls, "n_layers"):
        out["n_layers"] = depth
    return out


def _window(
    model_id: str | None,
    n_layers: int | None,
    window: Sequence[int] | None,
    profile: ProfileLike | None,
) -> tuple[tuple[int, ...] | None, int | None]:
    if window is not None:
        return tuple(int(layer) for layer in window), n_layers
    if profile is not None:
        found = resolve_profile(profile)
        if n_layers is not None and found.n_layers != n_layers:
            raise CompressionError(
                f"the SAP profile for {found.model_id!r} is for {found.n_layers} decoder layers "
                f"but the model has {n_layers}; calibrate this model with `vrag calibrate`"
            )
        return found.window, found.n_layers
    known = builtin_profile(model_id) if model_id else None
    if known is not None and n_layers in (None, known.n_layers):
        return known.window, known.n_layers
    if n_layers is None:
        return None, None
    fallback = fallback_window(n_layers)
    warnings.warn(
        f"no calibrated SAP layer window for {model_id or 'this model'} ({n_layers} layers); "
        f"using the uncalibrated fallback layers {list(fallback)}. Calibrate one with "
        "`vrag calibrate` and pass it as the profile.",
        UncalibratedWindowWarning,
        stacklevel=4,
    )
    return fallback, n_layers


def _fitted(compressor: Compressor, pages: Sequence[PageEncoding] | None) -> Compressor:
    """Fit a method with a fitting step on ``pages``; without pages it must already be fitted."""
    if not capabilities(compressor).needs_fit or getattr(compressor, "fitted", True):
        return compressor
    if pages:
        return compressor.fit(list(pages))  # type: ignore[attr-defined]
    given = " or ".join(f"{p}=..." for p in capabilities(compressor).fit_params)
    raise CompressionError(
        f"{compressor.name} must be fitted on pages before it compresses: pass "
        f"{given or 'its fitted parameters'}, or a compressor fitted with .fit(pages)"
    )
