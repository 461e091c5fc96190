"""Baselines compared against SAP and UOT at the same budget."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from vrag_compress.compress.base import (
    BaseCompressor,
    CompressedPage,
    CompressionError,
    check_page,
)
from vrag_compress.compress.common import (
    check_ratio,
    merged,
    page_seed,
    page_stat,
    pruned,
    top_k_positions,
)
from vrag_compress.encoders.base import PageEncoding


@dataclass(frozen=True)
class IdentityCompressor(BaseCompressor):
    """No compression: every token is kept (the uncompressed reference)."""

    name: ClassVar[str] = "identity"
    kind: ClassVar[str] = "none"

    def _compress(self, page: PageEncoding) -> CompressedPage:
        return pruned(page, np.arange(page.n_tokens))


@dataclass(frozen=True)
class RandomCompressor(BaseCompressor):
    """k tokens drawn uniformly without replacement; the draw depends on seed and page content."""

    name: ClassVar[str] = "random"

    ratio: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", check_ratio(self.ratio))
        object.__setattr__(self, "seed", int(self.seed))
        super().__post_init__()

    def _compress_k(self, page: PageEncoding, k: int) -> CompressedPage:
        rng = page_seed(self.seed, page)
        kept = rng.choice(page.n_tokens, size=k, replace=False)
        return pruned(page, np.sort(kept))


def _layer_row(stats: np.ndarray, layer: int, method: str) -> np.ndarray:
    n_layers = stats.shape[0]
    if not -n_layers <= layer < n_layers:
        raise CompressionError(
            f"{method}: layer {layer} is outside the page's decoder layers 0..{n_layers - 1}"
        )
    return stats[layer]


@dataclass(frozen=True)
class EOSCompressor(BaseCompressor):
    """Top-k tokens by the EOS token's attention at one decoder layer (default the last)."""

    name: ClassVar[str] = "eos"
    stats: ClassVar[str | None] = "eos_attention"

    ratio: float = 0.1
    layer: int = -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", check_ratio(self.ratio))
        object.__setattr__(self, "layer", int(self.layer))
        super().__post_init__()

    def _compress_k(self, page: PageEncoding, k: int) -> CompressedPage:
        scores = _layer_row(page_stat(page, "eos_attention"), self.layer, self.name).astype(
            np.float64
        )
        return pruned(page, top_k_positions(scores, k))


def eos_zscores(page: PageEncoding, layer: int = -1) -> np.ndarray:
    """Per-page z-scores of one layer's EOS attention with the population sigma (ddof=0);
    a constant row gives all zeros."""
    row = _layer_row(page_stat(page, "eos_attention"), layer, "adaptive-eos").astype(np.float64)
    sigma = row.std()
    if sigma == 0.0:
        return np.zeros_like(row)
    return (row - row.mean()) / sigma


def calibrate_kappa(pages: list[PageEncoding], ratio: float, layer: int = -1) -> float:
    """kappa such that ``z > kappa`` keeps about ``ratio`` of the pooled tokens: the (1 - ratio)
    quantile of all calibration pages' z-scores (numpy's linear interpolation)."""
    ratio = check_ratio(ratio)
    if not pages:
        raise CompressionError("adaptive-eos: calibrate_kappa needs at least one page")
    for page in pages:
        check_page(page, "adaptive-eos", "eos_attention")
    pooled = np.concatenate([eos_zscores(page, layer) for page in pages])
    return float(np.quantile(pooled, 1.0 - ratio))


@dataclass(frozen=True)
class AdaptiveEOSCompressor(BaseCompressor):
    """DocPruner-style adaptive pruning: keep tokens whose EOS-attention z-score exceeds kappa.

    Native mode: pass ``kappa`` (the budget then varies per page). Calibrated mode: ``fit(pages)``
    returns a copy whose kappa keeps ``ratio`` of the tokens on average. The argmax is always
    kept. The z-score uses the population sigma (ddof=0).
    """

    name: ClassVar[str] = "adaptive-eos"
    stats: ClassVar[str | None] = "eos_attention"
    needs_fit: ClassVar[bool] = True
    fit_params: ClassVar[tuple[str, ...]] = ("kappa",)
    adaptive_budget: ClassVar[bool] = False

    ratio: float = 0.1
    kappa: float | None = None
    layer: int = -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", check_ratio(self.ratio))
        object.__setattr__(self, "layer", int(self.layer))
        if self.kappa is not None:
            kappa = float(self.kappa)
            if not np.isfinite(kappa):
                raise CompressionError(f"adaptive-eos: kappa must be finite, got {self.kappa}")
            object.__setattr__(self, "kappa", kappa)
        super().__post_init__()

    @property
    def fitted(self) -> bool:
        """Native mode (kappa given) needs no fitting."""
        return self.kappa is not None

    def fit(self, pages: list[PageEncoding]) -> AdaptiveEOSCompressor:
        """A copy with kappa calibrated on ``pages`` so the mean keep ratio is about ``ratio``."""
        return replace(self, kappa=calibrate_kappa(pages, self.ratio, self.layer))

    def _compress(self, page: PageEncoding) -> CompressedPage:
        if self.kappa is None:
            raise CompressionError(
                "adaptive-eos: kappa is not set; pass kappa=... (native mode) or call "
                ".fit(calibration_pages) (calibrated mode)"
            )
        z = eos_zscores(page, self.layer)
        keep = z > self.kappa
        keep[int(np.argmax(z))] = True
        return pruned(page, np.flatnonzero(keep))


def _first_seen_labels(labels: np.ndarray) -> np.ndarray:
    """Relabel clusters 0..k-1 in order of first appearance, so output order is deterministic."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def cluster_means(x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean vector of each cluster (labels 0..k-1); rows are not normalised here."""
    k = int(labels.max()) + 1
    sums = np.zeros((k, x.shape[1]), dtype=np.float64)
    np.add.at(sums, labels, x.astype(np.float64))
    counts = np.bincount(labels, minlength=k)[:, None]
    return sums / counts


@dataclass(frozen=True)
class ClusterCompressor(BaseCompressor):
    """Light-ColPali-style semantic clustering: agglomerative, average linkage on cosine distance,
    k clusters, stored as L2-normalised cluster means (scikit-learn)."""

    name: ClassVar[str] = "cluster"
    kind: ClassVar[str] = "merging"

    ratio: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", check_ratio(self.ratio))
        super().__post_init__()

    def _compress_k(self, page: PageEncoding, k: int) -> CompressedPage:
        from sklearn.cluster import AgglomerativeClustering

        if k >= page.n_tokens:
            return merged(page.vectors, np.arange(page.n_tokens))
        model = AgglomerativeClustering(n_clusters=k, metric="cosine", linkage="average")
        labels = _first_seen_labels(model.fit_predict(page.vectors.astype(np.float64)))
        return merged(cluster_means(page.vectors, labels), labels)


def _import_pooler() -> type:
    """colpali-engine's HierarchicalTokenPooler; colpali-engine imports torchvision through
    transformers, so the package's torchvision compatibility guard runs first."""
    from vrag_compress.compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    from colpali_engine.compression.token_pooling import HierarchicalTokenPooler

    return HierarchicalTokenPooler


@dataclass(frozen=True)
class PoolCompressor(BaseCompressor):
    """colpali-engine's hierarchical (Ward) token pooling with pool factor ``round(1/ratio)``.

    The library decides the count: ``max(N // pool_factor, 1)`` clusters (the budget's ceil rule
    would need a non-integer factor); pages with N <= that count are stored as is.
    """

    name: ClassVar[str] = "pool"
    kind: ClassVar[str] = "merging"
    adaptive_budget: ClassVar[bool] = False

    ratio: float = 0.1
    num_workers: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", check_ratio(self.ratio))
        super().__post_init__()

    @property
    def pool_factor(self) -> int:
        return max(1, round(1.0 / self.ratio))

    def n_kept(self, n_tokens: int) -> int:
        """How many vectors the library keeps for a page of ``n_tokens`` (absent ties)."""
        return min(n_tokens, max(n_tokens // self.pool_factor, 1))

    def _compress(self, page: PageEncoding) -> CompressedPage:
        return self._compress_many([page])[0]

    def _compress_many(self, pages: list[PageEncoding]) -> list[CompressedPage]:
        import torch

        out: list[CompressedPage | None] = [None] * len(pages)
        todo = []
        for i, page in enumerate(pages):
            if self.n_kept(page.n_tokens) < page.n_tokens:
                todo.append(i)
            else:
                out[i] = merged(page.vectors, np.arange(page.n_tokens))
        if todo:
            pooler = _import_pooler()()
            tensors = [torch.from_numpy(pages[i].vectors.copy()) for i in todo]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = pooler.pool_embeddings(
                    tensors,
                    pool_factor=self.pool_factor,
                    num_workers=self.num_workers,
                    return_dict=True,
                )
            pooled, groups = result.pooled_embeddings, result.cluster_id_to_indices
            for i, vectors, clusters in zip(todo, pooled, groups, strict=True):
                out[i] = merged(vectors.numpy(), _assignment(clusters, pages[i].n_tokens))
        return out  # type: ignore[return-value]


def _assignment(clusters: dict, n_tokens: int) -> np.ndarray:
    """Token -> pooled-row id from the pooler's {cluster id: (indices,)}, skipping empty clusters
    exactly as the pooler does when it stacks the pooled rows."""
    assignment = np.full(n_tokens, -1, dtype=np.int64)
    row = 0
    for cluster_id in sorted(clusters):
        indices = clusters[cluster_id][0].numpy()
        if indices.size:
            assignment[indices] = row
            row += 1
    return assignment
