"""SAP, Structural Anchor Pruning: keep the tokens with the highest mean visual
in-degree over a window of middle decoder layers."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from vrag_compress.compress.base import BaseCompressor, CompressedPage, CompressionError
from vrag_compress.compress.common import check_ratio, page_stat, pruned, top_k_positions
from vrag_compress.compress.profiles import (
    CalibrationProfile,
    UncalibratedWindowWarning,
    fallback_window,
    profile_to_window,
)
from vrag_compress.encoders.base import PageEncoding


def sap_scores(centrality: np.ndarray, window: Sequence[int]) -> np.ndarray:
    """``s_j = mean_{l in W} S^(l)_j`` (float64) for [L, N] or batched [B, L, N] centrality."""
    return centrality[..., list(window), :].mean(axis=-2, dtype=np.float64)


@dataclass(frozen=True)
class SAPCompressor(BaseCompressor):
    """Top-k tokens by mean centrality over ``layers``.

    layers: explicit 0-based window; else ``profile`` (built-in name, model id, JSON path, dict);
    else the uncalibrated fallback window from each page's layer count (with a warning).
    n_layers: when known (from a profile), pages with another layer count are rejected.
    """

    name: ClassVar[str] = "sap"
    stats: ClassVar[str | None] = "centrality"
    uses_window: ClassVar[bool] = True

    ratio: float = 0.1
    layers: tuple[int, ...] | None = None
    n_layers: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", check_ratio(self.ratio))
        if self.layers is not None:
            layers = tuple(int(layer) for layer in self.layers)
            if not layers:
                raise CompressionError("sap: layers is empty; pass at least one decoder layer")
            if min(layers) < 0:
                raise CompressionError(f"sap: layers must be 0-based and >= 0, got {list(layers)}")
            if len(set(layers)) != len(layers):
                raise CompressionError(f"sap: layers has duplicates: {list(layers)}")
            object.__setattr__(self, "layers", layers)
        super().__post_init__()

    @classmethod
    def create(
        cls,
        ratio: float = 0.1,
        layers: list[int] | tuple[int, ...] | None = None,
        profile: str | Path | dict | CalibrationProfile | None = None,
        n_layers: int | None = None,
    ) -> SAPCompressor:
        """Build from explicit layers or a profile; the same as ``get_compressor(cls.name, ...)``
        (a profile fixes both window and layer count)."""
        params = {"ratio": ratio, "layers": layers, "profile": profile, "n_layers": n_layers}
        return cls(**profile_to_window(cls.name, cls, params))

    def window_for(self, n_layers: int) -> tuple[int, ...]:
        """The layer window used on a page with ``n_layers`` decoder layers (validated)."""
        if self.n_layers is not None and n_layers != self.n_layers:
            raise CompressionError(
                f"sap: the profile is for {self.n_layers} decoder layers but the page has "
                f"{n_layers}; use the profile of this model or calibrate it (vrag calibrate)"
            )
        if self.layers is None:
            window = fallback_window(n_layers)
            warnings.warn(
                f"sap: no layer window given; using the uncalibrated fallback {list(window)} "
                f"for {n_layers} layers. Calibrate with `vrag calibrate`.",
                UncalibratedWindowWarning,
                stacklevel=4,
            )
            return window
        if max(self.layers) >= n_layers:
            raise CompressionError(
                f"sap: window {list(self.layers)} is outside the page's decoder layers "
                f"0..{n_layers - 1}; pass layers within range or the model's profile"
            )
        return self.layers

    def _compress_many(self, pages: list[PageEncoding]) -> list[CompressedPage]:
        """Pages with the same (L, N) and budget go through one vectorised score + top-k."""
        out: list[CompressedPage | None] = [None] * len(pages)
        groups: dict[tuple[int, int, int], list[int]] = {}
        for i, (page, k) in enumerate(zip(pages, self.keep_counts(pages), strict=True)):
            groups.setdefault((*page_stat(page, "centrality").shape, k), []).append(i)
        for (n_layers, _, k), idx in groups.items():
            rows = list(self.window_for(n_layers))
            stats = np.stack([page_stat(pages[i], "centrality")[rows] for i in idx])
            kept = top_k_positions(sap_scores(stats, range(len(rows))), k)
            for row, i in enumerate(idx):
                out[i] = pruned(pages[i], kept[row])
        return out  # type: ignore[return-value]
