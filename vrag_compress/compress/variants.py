"""Variants beyond the papers, measured by the retention benchmark before any claim.

- ``sap-sink``: sink-aware SAP. Plain SAP's window in-degree favours attention sinks (in MiniLM,
  a quarter of the kept tokens were "."): tokens that soak up attention from everywhere whatever
  their content, and that look alike. Two label-free guards, both keeping ORIGINAL vectors:
  (1) tokens whose window in-degree is a robust outlier (``z > sink_z`` in median/MAD units)
  are demoted behind every other token; (2) greedy top-k that skips a candidate whose cosine
  similarity to an already kept token exceeds ``dedup`` (near-duplicates add almost no MaxSim).
  Skipped tokens fill the budget last, so k is always met.
- ``uot-anchor``: UOT initialised from SAP's anchors (the top-k SAP tokens) instead of
  k-means++, so representatives start at identifiable tokens.
- ``uot-sap``: UOT whose source mass mu comes from the SAP window's centrality instead of the
  all-layer mean.

Plain ``sap`` and ``uot`` stay exactly as the papers define them; these are separate names with
their own parameters. The registry (`vrag_compress.compress.registry`) lists them with the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from vrag_compress.compress.base import CompressedPage, CompressionError
from vrag_compress.compress.common import merged, page_stat, pruned, top_k_positions
from vrag_compress.compress.sap import SAPCompressor, sap_scores
from vrag_compress.compress.uot import (
    MARGINAL_EPS,
    UOTCompressor,
    _column,
    _pad,
    _padded_uniforms,
    kmeanspp_init,
)
from vrag_compress.encoders.base import PageEncoding

MAD_SCALE = 1.4826
"""MAD -> sigma for normal data, so ``sink_z`` reads like a z-score."""


def robust_z(scores: np.ndarray) -> np.ndarray:
    """(s - median) / (1.4826 MAD); zeros when the MAD is 0 (flat scores)."""
    median = np.median(scores)
    mad = np.median(np.abs(scores - median)) * MAD_SCALE
    if mad <= 0:
        return np.zeros_like(scores, dtype=np.float64)
    return (scores - median) / mad


def sink_aware_top_k(
    vectors: np.ndarray,
    scores: np.ndarray,
    k: int,
    *,
    dedup: float | None = 0.8,
    sink_z: float | None = None,
) -> np.ndarray:
    """k positions (ascending): candidates in descending score order (ties: lower index), sinks
    (robust z > ``sink_z``) moved to the end, near-duplicates (cos > ``dedup`` to a kept token)
    deferred; deferred tokens fill whatever budget is left, in the same order."""
    order = np.argsort(-scores, kind="stable")
    if sink_z is not None:
        is_sink = robust_z(scores)[order] > sink_z
        order = np.concatenate([order[~is_sink], order[is_sink]])
    if dedup is None or k >= len(order):
        return np.sort(order[:k])
    kept: list[int] = []
    deferred: list[int] = []
    nearest = np.full(len(scores), -np.inf, dtype=np.float32)
    for j in order:
        if len(kept) == k:
            break
        if nearest[j] > dedup:
            deferred.append(int(j))
            continue
        kept.append(int(j))
        np.maximum(nearest, vectors @ vectors[j], out=nearest)
    kept.extend(deferred[: k - len(kept)])
    return np.sort(np.asarray(kept, dtype=np.int64))


@dataclass(frozen=True)
class SinkAwareSAPCompressor(SAPCompressor):
    """SAP with sink demotion and near-duplicate deferral (see the module docstring).

    dedup: cosine above which a candidate counts as a duplicate of a kept token (None: off;
    default 0.8).
    sink_z: robust z-score of the window in-degree above which a token counts as a sink
    (None: off; default 3, the usual outlier cut).
    """

    name: ClassVar[str] = "sap-sink"

    dedup: float | None = 0.8
    sink_z: float | None = 3.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dedup is not None and not -1.0 <= float(self.dedup) <= 1.0:
            raise CompressionError(f"sap-sink: dedup must be a cosine in [-1, 1], got {self.dedup}")
        if self.sink_z is not None and not np.isfinite(float(self.sink_z)):
            raise CompressionError(f"sap-sink: sink_z must be finite, got {self.sink_z}")

    def _compress_many(self, pages: list[PageEncoding]) -> list[CompressedPage]:
        out = []
        for page, k in zip(pages, self.keep_counts(pages), strict=True):
            centrality = page_stat(page, "centrality")
            scores = sap_scores(centrality, self.window_for(centrality.shape[0]))
            kept = sink_aware_top_k(
                page.vectors,
                scores,
                k,
                dedup=self.dedup,
                sink_z=self.sink_z,
            )
            out.append(pruned(page, kept))
        return out


def sap_anchors(sap: SAPCompressor, page: PageEncoding, k: int) -> np.ndarray:
    """The vectors of the page's top-k SAP tokens (k may differ from the fixed budget)."""
    centrality = page_stat(page, "centrality")
    scores = sap_scores(centrality, sap.window_for(centrality.shape[0]))
    return pruned(page, top_k_positions(scores, k)).vectors


def coverage_top_k(vectors: np.ndarray, weights: np.ndarray, k: int) -> np.ndarray:
    """k positions (ascending) chosen greedily to maximise ``sum_j w_j max_{i kept} cos(x_j, x_i)``:
    the kept tokens that best stand in, under MaxSim, for every token of the page (facility
    location; each step adds the token with the largest weighted coverage gain)."""
    n = len(weights)
    if k >= n:
        return np.arange(n)
    sim = np.asarray(vectors, dtype=np.float32) @ np.asarray(vectors, dtype=np.float32).T
    w = np.asarray(weights, dtype=np.float32)
    nearest = np.full(n, -1.0, dtype=np.float32)
    kept = np.zeros(n, dtype=bool)
    for _ in range(k):
        gains = np.maximum(sim - nearest[None, :], 0.0) @ w
        gains[kept] = -1.0
        pick = int(np.argmax(gains))
        kept[pick] = True
        np.maximum(nearest, sim[pick], out=nearest)
    return np.flatnonzero(kept)


def capped_weights(scores: np.ndarray, alpha: float, sink_z: float = 3.0) -> np.ndarray:
    """Token weights ``s^alpha`` from SAP window scores, with attention sinks (robust z above
    ``sink_z``) capped at the sink threshold so that they cannot dominate; alpha 0 is uniform."""
    scores = np.asarray(scores, dtype=np.float64)
    if alpha == 0:
        return np.ones_like(scores)
    median = np.median(scores)
    mad = np.median(np.abs(scores - median)) * MAD_SCALE
    capped = np.minimum(scores, median + sink_z * mad) if mad > 0 else scores
    low = capped.min()
    return (capped - low + 1e-6 * (capped.max() - low + 1e-12)) ** alpha


@dataclass(frozen=True)
class CoverageSAPCompressor(SAPCompressor):
    """``sap-auto``: pruning that keeps the original tokens which best cover the page under
    MaxSim, each token weighted by its SAP window in-degree to the power ``alpha`` (sinks
    capped). See docs/retention.md for how ``alpha`` was chosen without judgments."""

    name: ClassVar[str] = "sap-auto"

    alpha: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        alpha = float(self.alpha)
        if not np.isfinite(alpha) or alpha < 0:
            raise CompressionError(f"sap-auto: alpha must be a finite number >= 0, got {alpha}")
        object.__setattr__(self, "alpha", alpha)

    def _compress_many(self, pages: list[PageEncoding]) -> list[CompressedPage]:
        out = []
        for page, k in zip(pages, self.keep_counts(pages), strict=True):
            centrality = page_stat(page, "centrality")
            scores = sap_scores(centrality, self.window_for(centrality.shape[0]))
            kept = coverage_top_k(page.vectors, capped_weights(scores, self.alpha), k)
            out.append(pruned(page, kept))
        return out


INITS = ("kmeans++", "sap")
MASSES = ("all", "window")


@dataclass(frozen=True)
class GuidedUOTCompressor(UOTCompressor):
    """UOT steered by SAP's layer window.

    init: "kmeans++" (as plain UOT) or "sap" (start from the top-k SAP anchors' vectors).
    mass: "all" (as plain UOT: all-layer mean in-degree) or "window" (mean over ``layers`` only).
    layers: the SAP window (0-based); None = the uncalibrated fallback window, with a warning.
    """

    name: ClassVar[str] = "uot-guided"
    stats: ClassVar[str | None] = "centrality"
    uses_window: ClassVar[bool] = True

    layers: tuple[int, ...] | None = None
    init: str = "sap"
    mass: str = "all"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.init not in INITS:
            raise CompressionError(f"{self.name}: init must be one of {INITS}, got {self.init!r}")
        if self.mass not in MASSES:
            raise CompressionError(f"{self.name}: mass must be one of {MASSES}, got {self.mass!r}")
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(int(layer) for layer in self.layers))
        self._sap()  # validates the window

    def _sap(self) -> SAPCompressor:
        return SAPCompressor(ratio=self.ratio, layers=self.layers)

    def _marginal(self, page: PageEncoding) -> np.ndarray:
        rows = page_stat(page, "centrality")
        if self.mass == "window":
            rows = rows[list(self._sap().window_for(rows.shape[0]))]
        a = rows.astype(np.float64).mean(axis=0) + MARGINAL_EPS
        return a / a.sum()

    def _run_batch(self, pages: list[PageEncoding], ks: list[int]) -> list[CompressedPage]:
        import torch

        device = torch.device(self.device)
        k_max = max(ks)
        x, mask = _pad([p.vectors for p in pages], device)
        mu, _ = _pad([self._marginal(p)[:, None] for p in pages], device)
        cols = torch.arange(k_max, device=device)[None, :] < _column(ks, device)
        if self.init == "sap":
            sap = self._sap()
            anchors = [sap_anchors(sap, p, k) for p, k in zip(pages, ks, strict=True)]
            y0 = _pad(anchors, device)[0]
            y0 = torch.nn.functional.pad(y0, (0, 0, 0, k_max - y0.shape[1]))
        else:
            draws = [
                _padded_uniforms(self.seed, p, k, k_max) for p, k in zip(pages, ks, strict=True)
            ]
            y0 = kmeanspp_init(x, mask, k_max, torch.as_tensor(np.stack(draws), device=device))
        y, assignment = self._em(x, mu.squeeze(2).to(x.dtype), y0 * cols.unsqueeze(2), cols)
        y, assignment = y.cpu().numpy(), assignment.cpu().numpy()
        return [
            merged(y[b, :k], assignment[b, : p.n_tokens])
            for b, (p, k) in enumerate(zip(pages, ks, strict=True))
        ]


@dataclass(frozen=True)
class AnchorUOTCompressor(GuidedUOTCompressor):
    """``uot-anchor``: UOT initialised from SAP's anchors, with plain UOT's (all-layer) mass."""

    name: ClassVar[str] = "uot-anchor"

    init: str = "sap"
    mass: str = "all"


@dataclass(frozen=True)
class SAPGuidedUOTCompressor(GuidedUOTCompressor):
    """``uot-sap``: UOT with mass from the SAP window's in-degree, plain UOT's k-means++ init."""

    name: ClassVar[str] = "uot-sap"

    init: str = "kmeans++"
    mass: str = "window"


VARIANTS = (
    SinkAwareSAPCompressor,
    CoverageSAPCompressor,
    AnchorUOTCompressor,
    SAPGuidedUOTCompressor,
)
"""The variants the registry lists beside the papers' methods."""
