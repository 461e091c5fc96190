"""Batched exact MaxSim over a concatenated token matrix (no per-page Python loop): the one
packed MaxSim kernel, used by the store, the estimate, calibration and the benchmarks.

Pages are contiguous row ranges of one ``[T, D]`` matrix described by ``bounds`` (``P + 1``
ascending row offsets). One BLAS product per chunk scores every query token against every page
token, then ``np.maximum.reduceat`` takes each page's max per query token and ``np.add.reduceat``
sums over each query's tokens. Chunks bound the temporary ``[M, chunk]`` score matrix and let fp16
storage be converted to fp32 a slice at a time. With ``threads = 1`` BLAS threads the product
itself; ``threads > 1`` splits the pages into at least that many chunks scored on a thread pool
(numpy releases the GIL in the product and the reductions) with BLAS on one thread meanwhile, so
the two never oversubscribe the cores. Many queries are split into blocks of whole queries so
that the score block stays bounded too. Sums are fp32 (the store) or fp64 (the evaluations, whose
metrics compare scores across compressors).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

SCORE_BUDGET = 1 << 26  # floats in one temporary [M, chunk] score block (256 MB)
FP16_CHUNK_TOKENS = 1 << 18  # rows converted to fp32 at a time when the matrix is fp16
MIN_CHUNK_TOKENS = 8192  # page tokens per product at least (smaller products waste BLAS)
QUERY_ROWS = SCORE_BUDGET // MIN_CHUNK_TOKENS  # query tokens per block by default


def auto_chunk(query_rows: int, dtype: np.dtype) -> int:
    """Page-chunk size in tokens: as large as the score budget allows (one big BLAS call is
    fastest, measured here), smaller when fp16 rows must be converted to fp32 first."""
    chunk = max(MIN_CHUNK_TOKENS, SCORE_BUDGET // max(1, query_rows))
    return min(chunk, FP16_CHUNK_TOKENS) if dtype != np.float32 else chunk


def pack_pages(pages: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Pages' vectors as one fp32 ``[T, D]`` matrix and its ``bounds`` (``P + 1`` row offsets)."""
    bounds = np.zeros(len(pages) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in pages], out=bounds[1:])
    if not pages:
        return np.zeros((0, 0), dtype=np.float32), bounds
    return np.ascontiguousarray(np.concatenate(pages), dtype=np.float32), bounds


def query_blocks(lengths: Sequence[int], max_rows: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` query ranges of at most ``max_rows`` rows (at least one
    query each)."""
    blocks, start, rows = [], 0, 0
    for i, length in enumerate(lengths):
        if i > start and rows + length > max_rows:
            blocks.append((start, i))
            start, rows = i, 0
        rows += length
    if start < len(lengths):
        blocks.append((start, len(lengths)))
    return blocks


def stack_queries(queries: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate queries into one fp32 matrix plus each query's first row."""
    lengths = np.array([q.shape[0] for q in queries], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return np.ascontiguousarray(np.concatenate(queries, axis=0), dtype=np.float32), starts


def page_chunks(bounds: np.ndarray, chunk_tokens: int) -> list[tuple[int, int]]:
    """Split pages ``[0, P)`` into runs of whole pages holding about ``chunk_tokens`` rows each."""
    n_pages = len(bounds) - 1
    chunks: list[tuple[int, int]] = []
    start = 0
    while start < n_pages:
        limit = bounds[start] + chunk_tokens
        end = int(np.searchsorted(bounds, limit, side="right")) - 1
        end = min(max(end, start + 1), n_pages)
        chunks.append((start, end))
        start = end
    return chunks


def _score_chunk(
    q: np.ndarray,
    q_starts: np.ndarray,
    tokens: np.ndarray,
    bounds: np.ndarray,
    p0: int,
    p1: int,
    sum_dtype: type[np.floating[Any]],
) -> np.ndarray:
    rows = tokens[bounds[p0] : bounds[p1]]
    if rows.dtype != np.float32:
        rows = rows.astype(np.float32)
    sims = q @ rows.T  # [M_total, rows]
    per_token = np.maximum.reduceat(sims, bounds[p0:p1] - bounds[p0], axis=1)  # [M_total, pages]
    return np.add.reduceat(per_token.astype(sum_dtype, copy=False), q_starts, axis=0)  # [Q, pages]


def maxsim_scores(
    queries: Sequence[np.ndarray],
    tokens: np.ndarray,
    bounds: np.ndarray,
    *,
    chunk_tokens: int | None = None,
    threads: int = 1,
    sum_dtype: type[np.floating[Any]] = np.float32,
    query_rows: int = QUERY_ROWS,
) -> np.ndarray:
    """``[Q, P]`` MaxSim of each query against each page of ``tokens`` split by ``bounds``.

    Pages must not be empty. ``sum_dtype`` is the type of the per-query sums (and of the result);
    ``query_rows`` bounds the query tokens scored in one block."""
    n_pages = len(bounds) - 1
    out = np.empty((len(queries), n_pages), dtype=sum_dtype)
    if n_pages == 0 or not queries:
        return out
    for start, stop in query_blocks([len(q) for q in queries], query_rows):
        out[start:stop] = _score_block(
            queries[start:stop], tokens, bounds, chunk_tokens, threads, sum_dtype
        )
    return out


def _score_block(
    queries: Sequence[np.ndarray],
    tokens: np.ndarray,
    bounds: np.ndarray,
    chunk_tokens: int | None,
    threads: int,
    sum_dtype: type[np.floating[Any]],
) -> np.ndarray:
    """`maxsim_scores` of one block of queries, chunk of pages by chunk of pages."""
    q, q_starts = stack_queries(queries)
    out = np.empty((len(queries), len(bounds) - 1), dtype=sum_dtype)
    # tokens decoded on demand (no fp16 store) are chunked like fp16: one chunk's fp32 at a time
    dtype = tokens.dtype if isinstance(tokens, np.ndarray) else np.dtype(np.float16)
    chunk = chunk_tokens or auto_chunk(len(q), dtype)
    if threads > 1:  # every thread gets a share
        chunk = min(chunk, -(-int(bounds[-1]) // threads))
    chunks = page_chunks(bounds, chunk)

    def run(chunk: tuple[int, int]) -> None:
        out[:, chunk[0] : chunk[1]] = _score_chunk(q, q_starts, tokens, bounds, *chunk, sum_dtype)

    parallel_map(run, chunks, threads)
    return out


T = TypeVar("T")
R = TypeVar("R")
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def parallel_map(fn: Callable[[T], R], items: Sequence[T], threads: int) -> list[R]:
    """``[fn(x) for x in items]`` on ``threads`` threads (BLAS on one thread meanwhile), in
    order. Pools are shared per thread count and kept (no start-up cost per search); ``fn``
    must not call `parallel_map` itself with more than one thread (it would wait on its own
    pool)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with _POOLS_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="vrag-search")
    with one_blas_thread():
        return list(pool.map(fn, items))


_BLAS: Any = None


def one_blas_thread() -> Any:
    """Context running BLAS on one thread: for small products (a rerank of a few hundred pages)
    waking threads costs more than it saves (5 ms against 36 ms for 300 pages, measured on a
    loaded 2-core machine), and search threads (`parallel_map`, whose caller holds it for them)
    must not each wake BLAS's own. The setting is process-wide, and threadpoolctl lets only
    one thread change OpenBLAS's, so the caller that starts threads sets and restores it."""
    global _BLAS
    from threadpoolctl import ThreadpoolController

    if _BLAS is None:
        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")


def gather_pages(bounds: np.ndarray, pages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the selected pages (in the given order) and their new ``bounds``."""
    starts = bounds[pages]
    lengths = bounds[pages + 1] - starts
    new_bounds = np.zeros(len(pages) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_bounds[1:])
    rows = np.repeat(starts - new_bounds[:-1], lengths) + np.arange(new_bounds[-1], dtype=np.int64)
    return rows, new_bounds


# Scores within this share of (|k-th score| + query tokens) of the k-th are rescored by
# `settled_top_k`: fp32 products of one page differ between product shapes by about 1e-7 per
# query token (measured: 2.4e-7 on 2-token queries), far inside it.
TIE_BAND = 2.0**-12


def settled_top_k(
    q: np.ndarray,
    scores: np.ndarray,
    k: int,
    tokens: Any,
    bounds: np.ndarray,
    pages: np.ndarray | None = None,
    error: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``scores`` of the ``k`` best pages and their scores, best first, ties to the
    lower position: the same bits however the fast ``scores`` were batched or computed.
    ``scores[i]`` is page ``pages[i]`` of ``tokens``/``bounds`` (page ``i`` without ``pages``);
    ``error``: how far a fast score may sit from the page's exact one (codes scored in place).

    A BLAS product rounds a page's score differently with the product's shape (how many other
    queries or pages share it), so near-ties could swap places between a lone search and the
    same search batched with others. The pages within `TIE_BAND` of the k-th are rescored here
    one fixed way (float64, then rounded to float32), and the top ``k`` are taken from those."""
    n = len(scores)
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    kth = float(np.partition(scores, n - k)[n - k]) if k < n else float(scores.min())
    band = TIE_BAND * (abs(kth) + len(q)) + 2 * error  # a page and the k-th can move apart
    idx = np.flatnonzero(scores >= kth - band)
    settled = canonical_maxsim(q, tokens, bounds, idx if pages is None else pages[idx])
    order = np.lexsort((idx, -settled))[:k]
    return idx[order], settled[order]


def canonical_maxsim(
    q: np.ndarray, tokens: Any, bounds: np.ndarray, pages: np.ndarray
) -> np.ndarray:
    """MaxSim of one query against the given pages in float64, rounded to float32: the result
    does not depend on which other pages or queries are scored (the float64 rounding is far
    below float32's)."""
    rows, new_bounds = gather_pages(bounds, pages)
    page_rows = np.asarray(tokens[rows], dtype=np.float64)
    sims = np.asarray(q, dtype=np.float64) @ page_rows.T
    per_token = np.maximum.reduceat(sims, new_bounds[:-1], axis=1)
    return per_token.sum(axis=0).astype(np.float32)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` best scores, best first; ties go to the lower position."""
    n = len(scores)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if k < n:
        kth = np.partition(scores, n - k)[n - k]
        idx = np.flatnonzero(scores >= kth)
    else:
        idx = np.arange(n)
    order = np.lexsort((idx, -scores[idx]))
    return idx[order][:k]
