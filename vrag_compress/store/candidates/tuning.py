"""Search parameters measured on the collection itself: the fewest probes and the shallowest
rerank that reach a recall target.

Fixed rules (probes ∝ K, rerank ∝ √pages) encode the collection they were fitted on; on a
collection whose vectors fall into cells differently the same rules lose recall or time. So
after training, the index measures itself: pseudo-queries are drawn from stored pages, their
exact top-10 is computed with the exact kernel, and for each candidate number of probes the
approximate rank of every true top-10 page tells directly how deep the exact rerank must go
for the target recall (a rerank is exact, so a true page ranked within R approximate places is
found). Of the (probes, depth) pairs that reach the target plus a margin, the cheapest by the
cost model (list entries read + reranked vectors) wins.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vrag_compress.scoring.packed import gather_pages, maxsim_scores, page_chunks, top_k
from vrag_compress.store.candidates import cells as cz

DEFAULT_TARGET = 0.97
MARGIN = 0.01  # the pseudo-queries must beat the target by this much
NPROBE_GRID = (8, 12, 16, 24, 32, 48, 64)
VECTOR_COST = 34  # a reranked vector costs 34 list entries (fit at 100k pages: 348 ns vs 10.3 ns)
QUERY_TOKENS = 24
QUERY_NOISE = 0.5
QUERY_FOREIGN = 0.33
TOP = 10
MAX_QUERIES = 200
MIN_DEPTH = 64
# from this size the pseudo-queries' truth is exact over a superset of candidates, not a pass
# over the whole collection (at 1M pages that pass alone would take over half an hour here)
SUPERSET_MIN_PAGES = 200_000
SUPERSET_DEPTH = 8  # the superset: the best 8 x depth_floor pages at the most probes measured
SWEEP_ROWS = 1 << 20  # rows read at once by the superset's ordered pass (256 MB of fp16)


@dataclass(frozen=True)
class Tuning:
    """What the index chose and what it measured when it chose it."""

    target: float
    nprobe: int
    rerank: int
    recall: float  # measured recall@10 of the pseudo-queries at (nprobe, rerank)
    queries: int
    pages: int
    entries: float  # mean list entries read per query at nprobe
    cost: float  # the cost model: entries + VECTOR_COST × reranked vectors, per query
    reached: bool  # False: no pair reached the target; the deepest measured pair is used

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample_size(n_pages: int) -> int:
    """Pseudo-queries used: 100 (all pages below), growing as √pages/2 from 40,000 pages up to
    200 (their exact top-10 is one pass over the collection per query: the cost of tuning)."""
    return int(min(n_pages, MAX_QUERIES, max(100, math.ceil(math.sqrt(n_pages) / 2))))


def pseudo_queries(
    tokens: Any,
    bounds: np.ndarray,
    n: int,
    *,
    seed: int = 0,
    noise: float = QUERY_NOISE,
    foreign: float = QUERY_FOREIGN,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """``n`` stored pages (their positions) and from each a query of up to 24 vectors: most of
    them the page's own, a share ``foreign`` taken from other random pages, all moved off by
    noise of norm ``noise``. Real queries are not copies of one page: they hold words the page
    lacks and share words with many pages, which is what makes neighbours compete."""
    rng = np.random.default_rng(seed)
    n_pages = len(bounds) - 1
    picked = np.sort(rng.choice(n_pages, size=min(n, n_pages), replace=False))
    queries = []
    for p in picked:
        rows = np.asarray(tokens[int(bounds[p]) : int(bounds[p + 1])], dtype=np.float32)
        size = min(QUERY_TOKENS, len(rows))
        n_foreign = int(round(foreign * size))
        own = rows[np.sort(rng.choice(len(rows), size=size - n_foreign, replace=False))]
        others = rng.integers(0, n_pages, size=n_foreign)
        at = bounds[others] + (rng.random(n_foreign) * (bounds[others + 1] - bounds[others]))
        q = np.concatenate([own, np.asarray(tokens[np.sort(at.astype(np.int64))], np.float32)])
        q = q + rng.normal(scale=noise / np.sqrt(q.shape[1]), size=q.shape)
        queries.append((q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32))
    return picked, queries


def exact_top(queries: list[np.ndarray], tokens: Any, bounds: np.ndarray) -> list[np.ndarray]:
    """Each query's exact top-10 page positions (one batched pass over the collection)."""
    scores = maxsim_scores(queries, tokens, bounds)
    return [top_k(row, TOP) for row in scores]


def superset_top(
    index: Any,
    queries: list[np.ndarray],
    tokens: Any,
    bounds: np.ndarray,
    slot_pos: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Each query's exact top-10 among the ``SUPERSET_DEPTH x depth_floor`` pages the index
    ranks best at the most probes measured: the truth of a large collection at a cost that
    does not grow with it. It can only miss a true page that the widest search measured
    would rank below that depth (8x the deepest rerank ever chosen), where the tuning's
    rerank could not find it either."""
    candidates = [_superset(index, q, len(bounds) - 1, slot_pos) for q in queries]
    exact = _sweep_scores(queries, candidates, tokens, bounds)
    return [c[top_k(s, TOP)] for c, s in zip(candidates, exact, strict=True)]


def _superset(index: Any, q: np.ndarray, n_pages: int, slot_pos: np.ndarray | None) -> np.ndarray:
    """The positions (sorted) of the pages the widest measured search ranks best for ``q``."""
    depth = min(n_pages, SUPERSET_DEPTH * depth_floor(n_pages))
    slots, scores, _ = index.probed_scores(
        *cz.probe(q, index.centroids, min(max(NPROBE_GRID), index.k))
    )
    pos = slots if slot_pos is None else slot_pos[slots]
    live = pos >= 0
    pos, scores = pos[live], scores[live]
    return np.sort(pos[top_k(scores, depth)])


def _sweep_scores(
    queries: list[np.ndarray], candidates: list[np.ndarray], tokens: Any, bounds: np.ndarray
) -> list[np.ndarray]:
    """Exact MaxSim of each query over its candidate pages, reading the collection once, in
    order, block by block. Gathering each query's pages straight from the rows would read
    them in random order: at 1M pages the 200 queries' 8,000 pages each are 42 GB of fp16
    rows from a 26 GB map that does not fit the page cache, and read-ahead around every
    random page made that 1.4 TB of disk reads (measured). One ordered pass reads 26 GB."""
    exact = [np.zeros(len(c), dtype=np.float32) for c in candidates]
    wanted = np.zeros(len(bounds) - 1, dtype=bool)
    for c in candidates:
        wanted[c] = True
    for p0, p1 in page_chunks(bounds, SWEEP_ROWS):
        if not wanted[p0:p1].any():
            continue
        r0 = int(bounds[p0])
        block = np.asarray(tokens[r0 : int(bounds[p1])])
        for q, c, out in zip(queries, candidates, exact, strict=True):
            lo, hi = np.searchsorted(c, (p0, p1))
            if lo == hi:
                continue
            rows, sub_bounds = gather_pages(bounds, c[lo:hi])
            out[lo:hi] = maxsim_scores([q], block[rows - r0].astype(np.float32), sub_bounds)[0]
    return exact


def approximate_ranks(
    index: Any,
    queries: list[np.ndarray],
    truth: list[np.ndarray],
    nprobe: int,
    slot_pos: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """The approximate rank (0 = best) of every true top-10 page (positions) under ``nprobe``
    probes (``inf`` where no probed list names it), and the mean list entries read per query.
    ``slot_pos`` maps index slots to positions (-1: deleted); None: slot = position."""
    ranks = np.full((len(queries), TOP), np.nan)  # nan: fewer than 10 pages in all
    entries = 0.0
    n_pos = index.n_slots if slot_pos is None else int(slot_pos.max(initial=-1)) + 1
    for i, (q, want) in enumerate(zip(queries, truth, strict=True)):
        probed = cz.probe(q, index.centroids, nprobe)
        cells = probed[0]
        entries += float((index.indptr[cells + 1] - index.indptr[cells]).sum())
        slots, scores, _ = index.probed_scores(*probed)
        pos = slots if slot_pos is None else slot_pos[slots]
        live = pos >= 0
        slots, scores, pos = slots[live], scores[live], pos[live]
        # pages no index part covers (unindexed) have positions past every slot's
        where = np.full(max(n_pos, int(want.max(initial=-1)) + 1, 1), -1, dtype=np.int64)
        where[pos] = np.arange(len(pos))
        at = where[want]
        found = at >= 0
        ranks[i, : len(want)] = np.inf
        # rank: touched pages scoring higher, ties counted half (their order is arbitrary)
        ordered = np.sort(scores)
        above = len(ordered) - np.searchsorted(ordered, scores[at[found]], side="right")
        ties = np.searchsorted(ordered, scores[at[found]], side="right") - np.searchsorted(
            ordered, scores[at[found]], side="left"
        )
        ranks[i, : len(want)][found] = above + (ties - 1) / 2
    return ranks, entries / max(len(queries), 1)


def depth_for(ranks: np.ndarray, goal: float) -> float:
    """The smallest rerank depth at which a share ``goal`` of the true pages is found."""
    flat = np.sort(ranks[~np.isnan(ranks)])
    if len(flat) == 0:
        return 1.0
    need = min(len(flat), max(1, math.ceil(goal * len(flat))))
    return float(flat[need - 1] + 1)


def tune(
    index: Any,
    tokens: Any,
    bounds: np.ndarray,
    *,
    target: float = DEFAULT_TARGET,
    seed: int = 0,
    grid: tuple[int, ...] = NPROBE_GRID,
    slot_pos: np.ndarray | None = None,
) -> Tuning:
    """The cheapest (probes, depth) reaching ``target`` recall@10 on pseudo-queries of this
    collection (plus `MARGIN`). ``tokens``/``bounds``
    are the live pages by position; ``slot_pos`` maps the index's slots to them."""
    n_pages = len(bounds) - 1
    _, queries = pseudo_queries(tokens, bounds, sample_size(n_pages), seed=seed)
    if n_pages >= SUPERSET_MIN_PAGES:
        truth = superset_top(index, queries, tokens, bounds, slot_pos)
    else:
        truth = exact_top(queries, tokens, bounds)
    per_page = float(bounds[-1]) / max(n_pages, 1)
    goal = min(1.0, target + MARGIN)
    best: Tuning | None = None
    fallback: Tuning | None = None
    for nprobe in sorted({min(p, index.k) for p in grid}):
        ranks, entries = approximate_ranks(index, queries, truth, nprobe, slot_pos)
        depth = depth_for(ranks, goal)
        reached = math.isfinite(depth)
        rerank = _rounded_depth(depth if reached else n_pages, n_pages)
        recall = recall_at(ranks, rerank)
        cost = entries + VECTOR_COST * rerank * per_page
        choice = Tuning(
            target, nprobe, rerank, round(recall, 4), len(queries), n_pages,
            round(entries, 1), round(cost, 1), reached,
        )  # fmt: skip
        if not reached:
            fallback = choice
        elif best is None or cost < best.cost:
            best = choice
    if best is not None:
        return best
    assert fallback is not None
    return fallback


def recall_at(ranks: np.ndarray, depth: int) -> float:
    """Share of the true pages a rerank of ``depth`` pages finds."""
    valid = ~np.isnan(ranks)
    return float(np.mean(ranks[valid] < depth)) if valid.any() else 1.0


def _rounded_depth(depth: float, n_pages: int) -> int:
    return int(min(n_pages, max(depth_floor(n_pages), math.ceil(depth))))


def depth_floor(n_pages: int) -> int:
    """The shallowest rerank the tuning keeps: √pages (at least 64). Pseudo-queries drawn from
    pages can be easier than real queries whose near-ties grow with the collection (a uniform
    vocabulary at 100,000 pages: tuned at 64, real recall 0.9265), so the measured depth is
    never trusted below the depth the previous size rule used."""
    return max(MIN_DEPTH, math.ceil(math.sqrt(max(n_pages, 1))))


def scaled_rerank(tuned: dict[str, Any], n_pages: int) -> int:
    """The tuned depth for a collection that grew (or shrank) since: ∝ √pages, as the share of
    near-ties a query meets grows with the collection, until a retrain tunes it again."""
    depth = int(tuned["rerank"]) * math.sqrt(max(n_pages, 1) / max(int(tuned["pages"]), 1))
    return int(min(max(n_pages, 1), max(depth_floor(n_pages), math.ceil(depth))))
