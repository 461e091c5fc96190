"""A synthetic token family whose cell occupancy goes from uniform to heavily skewed.

Real collections differ in how their vectors fall into k-means cells: text has a few function
words that every page holds (one cell can name most pages), figures and scans have other shapes.
This family makes that one knob: a vocabulary of random "word" directions, and documents whose
tokens are half "common" words drawn with Zipf exponent ``skew`` over the whole vocabulary (0:
uniform, 1.5: the most common word is about a third of them) and half the words of the
document's own topic (also Zipf-distributed), each token its word plus context noise. Queries
are drawn the same way from a random document's topic, with more noise. The corpus feeds the
same page resampler as the real corpora, with the words as its clusters (a resampled token is
another occurrence of the same word), so only the distribution differs.
"""

from __future__ import annotations

import numpy as np

from vrag_compress_bench.real_pages import TokenPool

VOCAB = 8192
TOPICS = 64
CONTEXT_NOISE = 0.75  # norm of a token's context noise: cosine to its word about 0.8


def _zipf(n: int, skew: float) -> np.ndarray:
    weights = np.arange(1, n + 1, dtype=np.float64) ** -skew
    return weights / weights.sum()


def _tokens(
    rng: np.random.Generator, words: np.ndarray, ids: np.ndarray, noise: float
) -> np.ndarray:
    out = words[ids] + rng.normal(
        scale=noise / np.sqrt(words.shape[1]), size=(len(ids), words.shape[1])
    )
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def skewed_corpus(
    dim: int,
    skew: float,
    *,
    n_docs: int = 2000,
    doc_tokens: int = 150,
    n_queries: int = 225,
    query_tokens: int = 20,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """(document tokens [N, dim], their word ids, document bounds, query token arrays)."""
    if skew < 0:
        raise ValueError(f"skew must be >= 0, got {skew}")
    rng = np.random.default_rng(seed)
    words = rng.normal(size=(VOCAB, dim))
    words /= np.linalg.norm(words, axis=1, keepdims=True)
    common = rng.permutation(VOCAB)  # common-word rank -> word
    topic_words = rng.permutation(VOCAB).reshape(TOPICS, -1)  # each topic owns VOCAB/TOPICS
    p_common = _zipf(VOCAB, skew)
    p_topic = _zipf(topic_words.shape[1], skew)

    def draw(topic: int, n: int, common_share: float) -> np.ndarray:
        n_common = rng.binomial(n, common_share)
        return np.concatenate(
            [
                common[rng.choice(VOCAB, size=n_common, p=p_common)],
                topic_words[topic, rng.choice(topic_words.shape[1], size=n - n_common, p=p_topic)],
            ]
        )

    topics = rng.integers(0, TOPICS, size=n_docs)
    doc_words = [draw(int(t), doc_tokens, 0.5) for t in topics]
    queries = [
        _tokens(
            rng,
            words,
            draw(int(topics[rng.integers(n_docs)]), query_tokens, 0.4),
            1.5 * CONTEXT_NOISE,
        )
        for _ in range(n_queries)
    ]
    ids = np.concatenate(doc_words)
    bounds = np.concatenate([[0], np.cumsum([len(d) for d in doc_words])]).astype(np.int64)
    return _tokens(rng, words, ids, CONTEXT_NOISE), ids, bounds, queries


def skewed_pool(dim: int, skew: float, *, seed: int = 0) -> TokenPool:
    """The family's corpus grouped by word for the page resampler."""
    tokens, ids, bounds, queries = skewed_corpus(dim, skew, seed=seed)
    members = np.argsort(ids, kind="stable")
    cluster_bounds = np.zeros(VOCAB + 1, dtype=np.int64)
    np.cumsum(np.bincount(ids, minlength=VOCAB), out=cluster_bounds[1:])
    return TokenPool(tokens, bounds, members, cluster_bounds, ids.astype(np.int64), queries)
