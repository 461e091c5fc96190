"""A synthetic token family whose cell occupancy goes from uniform to heavily skewed.

Real collections differ in how their vectors fall into k-means cells: text has a few function
words that every page holds (one cell can name most pages), figures and scans have other shapes.
This family makes that one knob: a vocabulary of random "word" directions, and documents whose
tokens are half "common" words drawn with Zipf exponent ``skew`` over the whole vocabulary (0:
uniform, 1.5: the most common word is about a third of them) and half the words of the
document's own topic (also Zipf-distributed), each token its word plus context noise. Queries
are drawn the same way from a random document's topic, with more noise. The corpus feeds the
same resampler as the real corpora (`real_pages.pool_of`), so only the distribution differs.
"""

from __future__ import annotations

import numpy as np

from vrag_compress.bench.real_pages import TokenPool, pool_of

VOCAB = 8192
TOPICS = 64
CONTEXT_NOISE = 0.75  # norm of a token's context noise: cosine to its word about 0.8


def _zipf(n: int, skew: float) -> np.ndarray:
    weights = np.arange(1, n + 1, dtype=np.float64) ** -skew
    return weights / weights.sum()


def _tokens(rng: np.random.Generator, words: np.ndarray, ids: np.ndarray, noise: float):
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
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(document tokens [N, dim], document bounds, query token arrays) of the family."""
    if skew < 0:
        raise ValueError(f"skew must be >= 0, got {skew}")
    rng = np.random.default_rng(seed)
    words = rng.normal(size=(VOCAB, dim))
    words /= np.linalg.norm(words, axis=1, keepdims=True)
    common = rng.permutation(VOCAB)  # common-word rank -> word
    topic_words = rng.permutation(VOCAB).reshape(TOPICS, -1)  # each topic owns VOCAB/TOPICS
    p_common = _zipf(VOCAB, skew)
    p_topic = _zipf(topic_words.shape[1], skew)

    def draw(topic: int, n: int, common_share: float, noise: float) -> np.ndarray:
        n_common = rng.binomial(n, common_share)
        ids = np.concatenate(
            [
                common[rng.choice(VOCAB, size=n_common, p=p_common)],
                topic_words[topic, rng.choice(topic_words.shape[1], size=n - n_common, p=p_topic)],
            ]
        )
        return _tokens(rng, words, ids, noise)

    topics = rng.integers(0, TOPICS, size=n_docs)
    docs = [draw(int(t), doc_tokens, 0.5, CONTEXT_NOISE) for t in topics]
    queries = [
        draw(int(topics[rng.integers(n_docs)]), query_tokens, 0.4, 1.5 * CONTEXT_NOISE)
        for _ in range(n_queries)
    ]
    bounds = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    return np.concatenate(docs), bounds, queries


def skewed_pool(dim: int, skew: float, *, seed: int = 0) -> TokenPool:
    """The family's corpus clustered for the page resampler."""
    tokens, bounds, queries = skewed_corpus(dim, skew, seed=seed)
    return pool_of(tokens, bounds, queries, seed=seed)
