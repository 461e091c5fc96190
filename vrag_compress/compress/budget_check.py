"""Does the adaptive budget's page signal predict where vectors help, on this collection?

The adaptive budget moves vectors towards pages whose coverage curve falls fastest. Whether that
helps retrieval depends on the method and the collection: on Cranfield it helps UOT and hurts
SAP, and on another judged collection it hurt UOT too (docs/retention.md). So before a batch
(or the calibration pages of ``fit``) is budgeted adaptively, the signal is checked on the
collection's own pages, without labels:

- pseudo-queries: a span of each sampled page's own tokens (``SPAN_TOKENS``, at most a third
  of the page) is its query and is removed from the page (inverse cloze on vectors, the same
  pseudo-queries the estimate uses for pages without text);
- the pages are compressed with the adaptive budget and with the fixed budget (same total);
- each budget's pseudo-NDCG@10 is computed with graded pseudo-relevance (the query's own page
  gain 2, the ``NEIGHBOURS`` pages nearest to it by the cosine of their mean vectors gain 1).

The adaptive budget is kept only when its mean pseudo-NDCG@10 beats the fixed shares' by more
than ``MARGIN``; otherwise the batch falls back to the fixed shares. Span pseudo-queries favour
the adaptive budget: the coverage signal moves vectors from long pages to short ones (on
Cranfield the shortest quarter of the pages got 2.6 times their fixed share and the longest
quarter 0.55 times; page length explained 85-93% of the shares' spread), and a short page's own
span is found better with more vectors, whether or not users' questions are. On abstract-like
pages of similar lengths that bias alone is the whole of what the check saw (docs/retention.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from vrag_compress.compress.allocation import fixed_count
from vrag_compress.encoders.base import PageEncoding

CHECK_MIN_PAGES = 50
"""Below this many pages in one call the signal is not checked (a commit batch of an index):
the pseudo-NDCG of a few pages says nothing. ``fit(pages)`` checks on calibration pages."""
CHECK_SAMPLE = 200
SPAN_TOKENS = 12
NEIGHBOURS = 5
TOP = 10
SEED = 0
MARGIN = 0.04
"""The pseudo-NDCG@10 gain over the fixed shares that keeps the adaptive budget (chosen on four
judged collections, MiniLM, docs/retention.md): on Cranfield and two variants of its abstracts
the span check gained 0.010-0.030 while judged queries gained nothing (-0.034 to +0.024, all
within noise; on an outside collection of such pages the budget lost 0.063); on the Semanlink
bookmarks, whose lengths vary more than twice as much, it gained 0.053-0.066 and judged queries
gained +0.008 to +0.075."""


@dataclass(frozen=True)
class BudgetCheck:
    """The check's figures: mean pseudo-NDCG@10 with each budget, and the decision."""

    adaptive: float
    fixed: float
    n_queries: int

    @property
    def signal_helps(self) -> bool:
        """Whether the adaptive budget beats the fixed shares by more than ``MARGIN``."""
        return self.adaptive > self.fixed + MARGIN


def fixed_shares(ratio: float, lengths: Sequence[int]) -> list[int]:
    """The fixed budget per page, ``max(1, ceil(ratio * N))``: what an adaptive budget falls
    back to. Its total is the adaptive budget's own (`fixed_total`), so falling back changes
    where the vectors go, never how many."""
    return [fixed_count(ratio, n) for n in lengths]


def span_queries(
    pages: Sequence[PageEncoding], rng: np.random.Generator, span: int = SPAN_TOKENS
) -> tuple[list[PageEncoding], list[np.ndarray], list[int]]:
    """(pages with their span removed, the spans as queries, each query's page); pages under
    3 tokens stay whole and ask nothing."""
    out: list[PageEncoding] = []
    queries: list[np.ndarray] = []
    sources: list[int] = []
    for page in pages:
        take = min(span, page.n_tokens // 3)
        if take >= 1:
            start = int(rng.integers(0, page.n_tokens - take + 1))
            keep = np.r_[0:start, start + take : page.n_tokens]
            queries.append(np.ascontiguousarray(page.vectors[start : start + take]))
            sources.append(len(out))
            page = _rows(page, keep)
        out.append(page)
    return out, queries, sources


def _rows(page: PageEncoding, keep: np.ndarray) -> PageEncoding:
    def cut(stat: np.ndarray | None) -> np.ndarray | None:
        return None if stat is None else np.ascontiguousarray(stat[:, keep])

    return PageEncoding(
        np.ascontiguousarray(page.vectors[keep]),
        centrality=cut(page.centrality),
        eos_attention=cut(page.eos_attention),
    )


def maxsim(queries: Sequence[np.ndarray], pages: Sequence[np.ndarray]) -> np.ndarray:
    """Exact MaxSim [n_queries, n_pages] (small sets: the check's sample)."""
    rows = np.concatenate(queries).astype(np.float32)
    owner = np.repeat(np.arange(len(queries)), [len(q) for q in queries])
    out = np.zeros((len(queries), len(pages)))
    for j, page in enumerate(pages):
        best = (rows @ np.asarray(page, np.float32).T).max(axis=1)
        out[:, j] = np.bincount(owner, weights=best, minlength=len(queries))
    return out


def neighbour_gains(pages: Sequence[np.ndarray], sources: Sequence[int], k: int) -> np.ndarray:
    """Graded pseudo-relevance [n_queries, n_pages]: the own page 2, its ``k`` nearest pages
    (cosine of mean vectors) 1."""
    means = np.stack([p.mean(axis=0) for p in pages]).astype(np.float64)
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    gains = np.zeros((len(sources), len(pages)))
    for row, source in enumerate(sources):
        near = [int(j) for j in np.argsort(-(means @ means[source]), kind="stable") if j != source]
        gains[row, near[:k]] = 1.0
        gains[row, source] = 2.0
    return gains


def ndcg_at(scores: np.ndarray, gains: np.ndarray, top: int = TOP) -> np.ndarray:
    """NDCG@top (linear gains) of each row's ranking of ``scores`` under ``gains``."""
    k = min(top, scores.shape[1])
    discount = 1.0 / np.log2(np.arange(k) + 2.0)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    dcg = (np.take_along_axis(gains, order, axis=1) * discount).sum(axis=1)
    ideal = (-np.sort(-gains, axis=1)[:, :k] * discount).sum(axis=1)
    return np.asarray(dcg / np.where(ideal > 0, ideal, 1.0))


Compress = Callable[[list[PageEncoding], bool], list[np.ndarray]]
"""``compress(pages, adaptive)``: the pages' kept vectors with the adaptive budget (True) or
the fixed shares (False)."""


def check_signal(compress: Compress, pages: Sequence[PageEncoding]) -> BudgetCheck:
    """Compare the adaptive budget with the fixed shares on span pseudo-queries of up to
    ``CHECK_SAMPLE`` of ``pages`` (seeded, so a collection always gets the same answer)."""
    rng = np.random.default_rng(SEED)
    picked = sorted(rng.choice(len(pages), min(CHECK_SAMPLE, len(pages)), replace=False))
    cut, queries, sources = span_queries([pages[int(i)] for i in picked], rng)
    if len(cut) < 2 or not queries:
        return BudgetCheck(math.nan, math.nan, 0)
    gains = neighbour_gains([p.vectors for p in cut], sources, NEIGHBOURS)
    means = [
        float(ndcg_at(maxsim(queries, compress(cut, adaptive)), gains).mean())
        for adaptive in (True, False)
    ]
    return BudgetCheck(means[0], means[1], len(queries))
