"""The helpers compressors share: the ratio check, normalisation, top-k, seeding, results.

Every method validates its input the same way so that bad pages fail with the same clear message.
"""

from __future__ import annotations

import zlib

import numpy as np

from vrag_compress.compress.base import CompressedPage, CompressionError
from vrag_compress.encoders.base import PageEncoding

UNIT_TOLERANCE = 1e-4


def check_ratio(ratio: float) -> float:
    """The keep ratio as a float in (0, 1], or a `CompressionError` saying how to fix it."""
    try:
        value = float(ratio)
    except (TypeError, ValueError) as exc:
        raise CompressionError(f"ratio must be a number in (0, 1], got {ratio!r}") from exc
    if not 0.0 < value <= 1.0 or not np.isfinite(value):
        raise CompressionError(
            f"ratio must be in (0, 1] (keep ratio; merge factor MF means ratio=1/MF), got {ratio!r}"
        )
    return value


def page_stat(page: PageEncoding, stats: str) -> np.ndarray:
    """The page's attention statistic ``stats`` ("centrality" or "eos_attention"); `check_page`
    has already rejected pages without it for methods that declare it."""
    value = getattr(page, stats)
    if value is None:
        raise CompressionError(f"the page has no {stats}; encode it with with_stats=True")
    return np.asarray(value)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Float32 copy of ``x`` with L2-normalised rows; rows already unit are returned unchanged."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))[:, None]
    if np.all(np.abs(norms - 1.0) <= UNIT_TOLERANCE):
        return x.copy()
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


def top_k_positions(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores along the last axis (ties: lower index first), ascending.

    Works on [N] or batched [..., N] scores in O(N): everything above the k-th largest value,
    then the lowest-index tokens equal to it until k are taken.
    """
    scores = np.asarray(scores)
    n = scores.shape[-1]
    if k >= n:
        return np.broadcast_to(np.arange(n), scores.shape).copy()
    kth = -np.partition(-scores, k - 1, axis=-1)[..., k - 1 : k]
    above = scores > kth
    tied = scores == kth
    room = k - above.sum(axis=-1, keepdims=True)
    keep = above | (tied & (np.cumsum(tied, axis=-1) <= room))
    return np.nonzero(keep)[-1].reshape(*scores.shape[:-1], k)


def page_seed(seed: int, page: PageEncoding) -> np.random.Generator:
    """A generator that depends on the seed and the page content only, so a page gets the same
    draws whether it is compressed alone or inside any batch."""
    digest = zlib.crc32(np.ascontiguousarray(page.vectors).data)
    return np.random.default_rng([int(seed), page.n_tokens, digest])


def pruned(page: PageEncoding, kept: np.ndarray) -> CompressedPage:
    """The CompressedPage of a pruning method: the kept rows (sorted positions) of the page."""
    kept = np.asarray(kept, dtype=np.int64)
    return CompressedPage(vectors=unit_rows(page.vectors[kept]), kept=kept)


def merged(vectors: np.ndarray, assignment: np.ndarray) -> CompressedPage:
    """The CompressedPage of a merging method: representatives and each token's representative."""
    return CompressedPage(vectors=unit_rows(vectors), assignment=np.asarray(assignment, np.int64))
