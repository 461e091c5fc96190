"""How rankings are compared: exact MaxSim of every query against every page, graded
pseudo-relevance, NDCG@10 predicted at the collection's size, and bootstrap intervals. Shared by
the label-free estimate and the estimate on users' own questions (`questions`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vrag_compress.compress.budget_check import ndcg_at, neighbour_gains
from vrag_compress.encoders.base import PageEncoding
from vrag_compress.estimate.report import RELEVANCE, EstimateError
from vrag_compress.scoring.packed import maxsim_scores, pack_pages

TOP = 10
BOOTSTRAP = 1000


def maxsim_matrix(queries: Sequence[np.ndarray], pages: Sequence[np.ndarray]) -> np.ndarray:
    """Exact MaxSim of every query against every page -> [n_queries, n_pages] (fp64 sums)."""
    return maxsim_scores(queries, *pack_pages(pages), sum_dtype=np.float64)


def pseudo_gains(
    pages: Sequence[PageEncoding], sources: Sequence[int], neighbours: int, relevance: str = "own"
) -> np.ndarray:
    """Graded pseudo-relevance [n_queries, n_pages]: gain 1 for the ``neighbours`` pages
    closest to the query's own page (cosine of the mean of their uncompressed token vectors):
    a topic is rarely covered by one page, and real queries are judged on topics. The own page
    gets gain 2 (``relevance="own"``) or is left out of the query's ranking (``"away"``: NaN,
    see `leave_out`), so that the query must find pages it was not cut from."""
    if relevance not in RELEVANCE:
        raise EstimateError(f"relevance must be one of {', '.join(RELEVANCE)}, got {relevance!r}")
    if relevance == "away" and neighbours < 1:
        raise EstimateError("relevance 'away' needs at least 1 neighbour to find")
    gains = neighbour_gains([p.vectors for p in pages], sources, neighbours)
    if relevance == "away":
        gains[np.arange(len(sources)), list(sources)] = math.nan
    return gains


def leave_out(scores: np.ndarray, gains: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(scores, gains) with the pages whose gain is NaN (a query's own page under
    ``relevance="away"``) ranked last and counted irrelevant."""
    gone = np.isnan(gains)
    if not gone.any():
        return scores, gains
    return np.where(gone, -np.inf, scores), np.where(gone, 0.0, gains)


def collection_ndcg(scores: np.ndarray, gains: np.ndarray, collection_pages: int) -> np.ndarray:
    """Expected NDCG@10 of each ranking in a collection of ``collection_pages`` pages, of which
    the sampled ones (the columns) are a uniform draw: a query's relevant pages are all in the
    sample, and each of the unsampled pages outranks a relevant page as often as the sampled
    distractors do (a relevant page with ``c`` of the ``m`` sampled distractors above it has
    Binomial(unsampled, c / m) more above it in the collection). No parameter: the collection's
    size is known. Plain NDCG@10 when the sample is the whole collection."""
    scores, gains = leave_out(scores, gains)
    unsampled = collection_pages - scores.shape[1]
    if unsampled <= 0:
        return ndcg_at(scores, gains, TOP)
    from scipy.stats import binom  # type: ignore[import-untyped]

    width = max(int((gains > 0).sum(axis=1).max()), 1)
    relevant = np.argsort(-gains, axis=1, kind="stable")[:, :width]
    gain = np.take_along_axis(gains, relevant, axis=1)
    score = np.where(gain > 0, np.take_along_axis(scores, relevant, axis=1), -np.inf)
    by_score = np.argsort(-score, axis=1, kind="stable")
    gain, score = (np.take_along_axis(a, by_score, axis=1) for a in (gain, score))
    distractor = (gains <= 0) & np.isfinite(scores)
    sampled = np.maximum(distractor.sum(axis=1), 1)[:, None]
    above = ((scores[:, None, :] > score[:, :, None]) & distractor[:, None, :]).sum(axis=2)
    rank0 = np.arange(width)[None, :] + above  # 0-based rank in the sample
    more = np.arange(TOP)
    chance = binom.pmf(more, unsampled, (above / sampled)[:, :, None])
    position = rank0[:, :, None] + more
    discount = np.where(position < TOP, 1.0 / np.log2(np.minimum(position, TOP) + 2.0), 0.0)
    dcg = (gain * (chance * discount).sum(axis=2)).sum(axis=1)
    top = min(TOP, scores.shape[1])
    ideal = (-np.sort(-gains, axis=1)[:, :top] / np.log2(np.arange(top) + 2.0)).sum(axis=1)
    return np.asarray(dcg / np.where(ideal > 0, ideal, 1.0))


def retention_interval(
    compressed: np.ndarray, full: np.ndarray, seed: int = 0, level: float = 0.9
) -> tuple[float, float]:
    """Bootstrap interval (``level``) of mean(compressed) / mean(full) over paired per-query
    values: how far another draw of as many queries could move the retention."""
    if len(full) < 2 or not (full > 0).any():
        return math.nan, math.nan  # one query, or nothing relevant found: no interval to give
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(full), (BOOTSTRAP, len(full)))
    means = full[draws].mean(axis=1)
    usable = means > 0  # a resample of only zero-NDCG queries has no ratio
    ratios = compressed[draws[usable]].mean(axis=1) / means[usable]
    tail = (1.0 - level) / 2
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return float(low), float(high)


def top_overlap(full: np.ndarray, compressed: np.ndarray) -> float:
    k = min(TOP, full.shape[1])
    a = np.argsort(-full, axis=1, kind="stable")[:, :k]
    b = np.argsort(-compressed, axis=1, kind="stable")[:, :k]
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b, strict=True)]))
