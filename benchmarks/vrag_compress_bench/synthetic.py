"""Synthetic clustered multi-vector pages and queries, for store tests and `vrag bench store`.

Real page embeddings are clustered (a page's patches share a few topics; many pages share topics),
which is what makes token-level ANN candidates work. Each page draws a few topic centres and
spreads its tokens around them; a query copies noisy tokens of one page, so it has a clear best
page but near misses from pages on the same topics.
"""

from __future__ import annotations

import numpy as np


def _normalise(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def topic_centres(n_topics: int, dim: int, seed: int = 0) -> np.ndarray:
    return _normalise(np.random.default_rng(seed).normal(size=(n_topics, dim)))


def clustered_pages(
    n_pages: int,
    tokens: int,
    dim: int,
    *,
    n_topics: int = 256,
    topics_per_page: int = 4,
    spread: float = 0.35,
    seed: int = 0,
    centres: np.ndarray | None = None,
) -> np.ndarray:
    """``[n_pages, tokens, dim]`` float32 unit vectors clustered around shared topic centres."""
    rng = np.random.default_rng(seed + 1)
    centres = topic_centres(n_topics, dim, seed) if centres is None else centres
    page_topics = rng.integers(0, len(centres), size=(n_pages, topics_per_page))
    pick = rng.integers(0, topics_per_page, size=(n_pages, tokens))
    topic = np.take_along_axis(page_topics, pick, axis=1)
    noise = rng.normal(scale=spread / np.sqrt(dim), size=(n_pages, tokens, dim)).astype(np.float32)
    return _normalise(centres[topic] + noise)


def queries_for(
    pages: np.ndarray, n_queries: int, tokens: int = 20, *, noise: float = 0.3, seed: int = 0
) -> list[np.ndarray]:
    """Queries of ``tokens`` vectors, each a noisy copy of random tokens of one random page."""
    rng = np.random.default_rng(seed + 2)
    dim = pages.shape[-1]
    out = []
    for page in rng.integers(0, len(pages), size=n_queries):
        rows = rng.integers(0, pages.shape[1], size=tokens)
        q = pages[page, rows] + rng.normal(scale=noise / np.sqrt(dim), size=(tokens, dim))
        out.append(_normalise(q))
    return out
