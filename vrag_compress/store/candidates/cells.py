"""Centroid codes for candidate search: k-means cells, per-cell page lists, approximate scores.

Every stored token is replaced, for candidate generation, by the id of its nearest centroid (one
``uint16`` for K ≤ 65,536). A query token scores all K centroids in one product ``S = Q·Cᵀ`` and
probes its ``nprobe`` best cells; a page's approximate score is the sum over query tokens of the
best probed cell the page holds, where a page holding none of them gets the token's
``(nprobe+1)``-th best cell score (the most it could be worth, so unseen pages are not pushed to
the bottom). The best pages by that score are then reranked exactly by the caller. Everything
here is whole-array numpy or faiss; nothing loops in Python over pages or tokens.

Optional residual codes (codec.py) store each token's residual to its centroid as well, so
vectors can be rebuilt approximately for the rerank without fp16 copies.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from vrag_compress.store.candidates import kernels

log = logging.getLogger(__name__)

MIN_K = 1024
K_PER_SQRT_T = 4
MAX_K = 65536
MIN_POINTS_PER_CENTROID = 32  # below this k-means cells are noise: tiny collections get fewer
CODES = ("none", "4bit", "2bit", "1bit")
RETRAIN_GROWTH = 4
TRAIN_POINTS_PER_CENTROID = 40
HEAVY_CELL_CAP = 8.0  # a cell holding over 8x the mean share of tokens is split
EXACT_ASSIGN_MAX_K = 1024  # above, tokens are assigned through an HNSW graph over the centroids
HNSW_M, HNSW_EF_BUILD, HNSW_EF_SEARCH = 32, 80, 16
TWO_LEVEL_MIN_K = 8192  # from here k-means runs in two levels (`_two_level`)
_ASSIGN_CHUNK = 1 << 17


@dataclass(frozen=True)
class SearchParams:
    """How many cells each query token probes and how many pages are reranked exactly."""

    nprobe: int
    rerank: int


def choose_k(n_tokens: int) -> int:
    """K = 2^round(log2 4√T) clamped to 1,024–65,536, and at most T/32 (rounded down to a power
    of two) so that each cell is trained on enough tokens in small collections.

    4√T rather than √T: finer cells separate more words, so fewer pages share a probed cell
    and the approximate scores rank better (20,000 real-token pages: 4,096 cells instead of
    1,024 read 3x fewer list entries per query and needed 2x shallower reranks for recall@10
    0.97; on a uniform vocabulary 15x shallower)."""
    if n_tokens <= 0:
        return 1
    k = 2 ** round(math.log2(K_PER_SQRT_T * math.sqrt(n_tokens)))
    k = min(max(k, MIN_K), MAX_K)
    cap = n_tokens // MIN_POINTS_PER_CENTROID
    if cap < k:
        k = 2 ** int(math.log2(cap)) if cap >= 1 else 1
    return int(k)


def search_params(n_pages: int, k: int) -> SearchParams:
    """Probes grow with K (K/256, 16–32) and the rerank depth with √pages (at least 256):
    recall is bounded by the rerank depth, not by the probes, once 16 cells are probed (at
    20,000 real-token pages recall@10 moved from 0.903 to 0.907 going from 16 to 32 probes,
    while the page-list work doubled)."""
    nprobe = min(max(k // 256, 16), 32, k)
    rerank = max(256, math.ceil(math.sqrt(max(n_pages, 1))))
    return SearchParams(nprobe=int(nprobe), rerank=int(min(rerank, max(n_pages, 1))))


def needs_retrain(trained_tokens: int, n_tokens: int) -> bool:
    """Retrain once the collection holds 4× the tokens the centroids were trained on (K ∝ √T
    then calls for twice the cells) or has shrunk below a quarter of them."""
    if trained_tokens <= 0:
        return True
    return n_tokens >= RETRAIN_GROWTH * trained_tokens or n_tokens * RETRAIN_GROWTH < trained_tokens


def code_dtype(k: int) -> np.dtype:
    return np.dtype("<u2") if k <= 65536 else np.dtype("<i4")


def code_bytes_per_token(dim: int, codes: str) -> int:
    """Bytes one token takes as codes: its centroid id (uint16) plus ``dim`` residuals at
    4, 2 or 1 bits ("none": the id only)."""
    nbits = {"4bit": 4, "2bit": 2, "1bit": 1}.get(codes, 0)
    return code_dtype(MAX_K).itemsize + dim * nbits // 8


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def train_centroids(
    sample: np.ndarray, k: int, *, seed: int = 0, niter: int = 10, gpu: bool | None = None
) -> np.ndarray:
    """Spherical k-means centroids ``[k, D]`` (unit norm) of ``sample`` with faiss; on a GPU
    when faiss sees one (``gpu=None``) or when asked."""
    import faiss

    x = np.ascontiguousarray(sample, dtype=np.float32)
    if len(x) == 0:
        raise ValueError("cannot train centroids on zero tokens")
    k = max(1, min(k, len(x)))
    if gpu is None:
        gpu = _gpu_count(faiss) > 0
    if k >= TWO_LEVEL_MIN_K and not gpu:
        return _normalise(_two_level(x, k, seed=seed, niter=niter))
    km = faiss.Kmeans(
        x.shape[1],
        k,
        niter=niter,
        spherical=True,
        seed=seed,
        gpu=bool(gpu),
        max_points_per_centroid=256,
        min_points_per_centroid=1,
        verbose=False,
    )
    km.train(x)
    return _normalise(np.asarray(km.centroids, dtype=np.float32).reshape(k, x.shape[1]))


def _two_level(x: np.ndarray, k: int, *, seed: int, niter: int) -> np.ndarray:
    """Two-level k-means (faiss): √K coarse cells, then each cell's tokens split into a share
    of the K centroids proportional to its size. One flat iteration compares every sample
    token with all K centroids; here each compares with √K, then with its cell's ~√K: 32,768
    centroids on 1.3M points took 10-15 s on 2 quiet cores (99 s at load 5), where flat k-means
    had not finished after 47 minutes."""
    from faiss.contrib.clustering import two_level_clustering

    centroids, _ = two_level_clustering(
        x,
        max(1, int(math.sqrt(k))),
        k,
        clustering_niter=niter,
        spherical=True,
        seed=seed,
        min_points_per_centroid=1,  # cells of uneven size: no warning per small cell
    )
    return np.asarray(centroids, dtype=np.float32).reshape(k, x.shape[1])


def training_sample(n_tokens: int, k: int, *, seed: int = 0) -> np.ndarray:
    """Sorted token rows to train K centroids on (at most 40 per centroid)."""
    n = min(n_tokens, TRAIN_POINTS_PER_CENTROID * k)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_tokens, size=n, replace=False))


def assign(tokens: np.ndarray, centroids: np.ndarray, *, chunk: int = _ASSIGN_CHUNK) -> np.ndarray:
    """Nearest centroid (max inner product) of every token, in chunks bounding fp32 copies.

    Up to 1,024 centroids, or on a GPU, every token is compared with every centroid. Above,
    on the CPU, tokens walk an HNSW graph over the centroids (`centroid_graph`). At 32,768
    centroids on 2 quiet cores: 7.5-16 us per token against about 60 comparing with all of
    them; the exact nearest centroid for 98.9% of real-token vectors and 99.6% on a flat
    vocabulary (a miss costs 0.002-0.003 of inner product), 85% on a heavily skewed one,
    where dense regions hold many near-tied centroids (a miss costs 0.015). An IVF over
    the centroids agreed 89% on real tokens, groups of centroids 57-91%. See
    `assign_agreement`."""
    import faiss

    c = np.ascontiguousarray(centroids, dtype=np.float32)
    if len(c) > EXACT_ASSIGN_MAX_K and _gpu_count(faiss) == 0:
        return _nearest(centroid_graph(c), tokens, len(c), chunk)
    return _nearest(_flat_index(c), tokens, len(c), chunk)


def _flat_index(centroids: np.ndarray) -> Any:
    """Every centroid compared with every token (on a GPU when faiss sees one)."""
    import faiss

    index = _on_gpu(faiss, faiss.IndexFlatIP(centroids.shape[1]))
    index.add(centroids)
    return index


def _nearest(index: Any, tokens: np.ndarray, k: int, chunk: int = _ASSIGN_CHUNK) -> np.ndarray:
    """The centroid ``index`` finds nearest to each token, in chunks bounding fp32 copies."""
    out = np.empty(len(tokens), dtype=code_dtype(k))
    for start in range(0, len(tokens), chunk):
        part = np.ascontiguousarray(tokens[start : start + chunk], dtype=np.float32)
        _, ids = index.search(part, 1)
        out[start : start + len(part)] = ids[:, 0]
    return out


def centroid_graph(centroids: np.ndarray) -> Any:
    """An HNSW graph over the centroids (faiss), built on one thread so that the same
    centroids always give the same graph and so the same assignment."""
    import faiss

    index = faiss.IndexHNSWFlat(centroids.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_EF_BUILD
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    finally:
        faiss.omp_set_num_threads(threads)
    index.hnsw.efSearch = HNSW_EF_SEARCH
    return index


def assign_agreement(tokens: np.ndarray, centroids: np.ndarray, sample: int = 20_000) -> float:
    """Share of a token sample that `assign` gives the exact nearest centroid."""
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(len(tokens), size=min(sample, len(tokens)), replace=False))
    x = np.asarray(tokens[rows], dtype=np.float32)
    c = np.ascontiguousarray(centroids, dtype=np.float32)
    exact = _nearest(_flat_index(c), x, len(c))
    return float(np.mean(assign(x, c) == exact))


def split_heavy_cells(
    tokens: np.ndarray,
    centroids: np.ndarray,
    codes: np.ndarray,
    *,
    cap: float = HEAVY_CELL_CAP,
    seed: int = 0,
    gpu: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Split every cell holding more than ``cap`` times the mean share of tokens into as many
    sub-cells (k-means over its own tokens) as bring it under that share.

    Text and page vectors are skewed: a few "function word" cells hold a token of nearly every
    page, so every query token that probes one reads a list naming most of the collection.
    Split, such a cell's pages spread over its sub-cells and a probe reads a fraction of them.
    Returns the centroids (split cells keep their id for their first sub-cell; the others are
    appended) and the tokens' new codes. K stays within `MAX_K`."""
    k = len(centroids)
    counts = np.bincount(codes.astype(np.int64), minlength=k)
    limit = max(1.0, cap * len(codes) / max(k, 1))
    heavy = np.flatnonzero(counts > limit)
    heavy = heavy[np.argsort(-counts[heavy], kind="stable")]
    if len(heavy) == 0:
        return centroids, codes
    out_centroids = [np.asarray(centroids, dtype=np.float32)]
    out_codes = codes.astype(code_dtype(MAX_K))
    total = k
    for cell in heavy:
        parts = int(min(math.ceil(counts[cell] / limit), MAX_K - total + 1))
        if parts < 2:
            break
        rows = np.flatnonzero(codes == cell)
        members = np.asarray(tokens[rows], dtype=np.float32)
        sample = members[training_sample(len(members), parts, seed=seed)]
        sub = train_centroids(sample, parts, seed=seed, gpu=gpu)
        nearest = np.argmax(members @ sub.T, axis=1)
        ids = np.concatenate([[cell], total + np.arange(len(sub) - 1)])
        out_codes[rows] = ids[nearest]
        out_centroids[0][cell] = sub[0]
        out_centroids.append(sub[1:])
        total += len(sub) - 1
    log.info("split %d heavy cells: K %d -> %d", len(heavy), k, total)
    return np.concatenate(out_centroids), out_codes


def build_lists(codes: np.ndarray, bounds: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR page lists: ``pages[indptr[c]:indptr[c+1]]`` are the pages (ascending positions)
    holding a token of cell ``c``."""
    n_pages = len(bounds) - 1
    page_of = np.repeat(np.arange(n_pages, dtype=np.int64), np.diff(bounds))
    keys = np.unique(codes.astype(np.int64) * max(n_pages, 1) + page_of)
    cells = keys // max(n_pages, 1)
    indptr = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(np.bincount(cells, minlength=k), out=indptr[1:])
    return indptr, (keys % max(n_pages, 1)).astype(np.int32)


def probe(
    query: np.ndarray, centroids: np.ndarray, nprobe: int, sims: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each query token's ``nprobe`` best cells ``[M, n]``, their scores, and the imputed score
    of an unprobed cell (the ``(nprobe+1)``-th best; the worst cell when all are probed).
    ``sims``: the query's ``[M, K]`` centroid product when the caller has it."""
    if sims is None:
        sims = np.asarray(query, dtype=np.float32) @ centroids.T
    k = sims.shape[1]
    n = min(nprobe, k)
    if n < k:
        part = np.argpartition(-sims, n, axis=1)[:, : n + 1]
    else:
        part = np.broadcast_to(np.arange(k), sims.shape).copy()
    part_scores = np.take_along_axis(sims, part, axis=1)
    order = np.argsort(-part_scores, axis=1, kind="stable")
    part = np.take_along_axis(part, order, axis=1)
    part_scores = np.take_along_axis(part_scores, order, axis=1)
    floor = part_scores[:, n] if n < k else sims.min(axis=1)
    return part[:, :n], part_scores[:, :n], floor.astype(np.float32)


def list_scores(
    cells: np.ndarray,
    cell_scores: np.ndarray,
    floor: np.ndarray,
    indptr: np.ndarray,
    pages: np.ndarray,
    n_pages: int,
) -> np.ndarray:
    """Approximate page scores ``[n_pages]`` from the probed cells' page lists (pages no
    probed list names score the sum of the floors): the dense form of `touched_scores`."""
    total = np.full(n_pages, floor.sum(dtype=np.float64), dtype=np.float32)
    touched, scores = touched_scores(cells, cell_scores, floor, indptr, pages, n_pages)
    total[touched] = scores
    return total


def touched_scores(
    cells: np.ndarray,
    cell_scores: np.ndarray,
    floor: np.ndarray,
    indptr: np.ndarray,
    pages: np.ndarray,
    n_pages: int,
    threads: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """The pages the probed cells' lists name (ascending) and their approximate scores
    (float64): per query token the best probed cell naming the page, else the token's floor.

    Sub-linear in the collection: only the probed lists' entries are read, in one compiled
    pass (`kernels.list_gains`, ``threads`` splitting the pages; every other page scores the
    sum of the floors)."""
    if n_pages == 0 or cells.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    gains = np.asarray(cell_scores, dtype=np.float32) - floor[:, None]
    touched, total = kernels.list_gains(cells, gains, indptr, pages, n_pages, threads)
    return touched, total + floor.sum(dtype=np.float64)


def code_scores(
    cells: np.ndarray,
    cell_scores: np.ndarray,
    floor: np.ndarray,
    codes: np.ndarray,
    bounds: np.ndarray,
    k: int,
) -> np.ndarray:
    """The same approximate page scores computed straight from the pages' codes (for pages
    not yet in the lists): a ``[M, K]`` gain table gathered at each token's code."""
    n_pages = len(bounds) - 1
    total = np.full(n_pages, floor.sum(dtype=np.float64), dtype=np.float64)
    if n_pages == 0 or len(cells) == 0:
        return total
    gain = np.zeros((len(cells), k), dtype=np.float32)
    np.put_along_axis(gain, cells, cell_scores - floor[:, None], axis=1)
    per_token = gain[:, codes.astype(np.int64)]  # [M, T]
    best = np.maximum.reduceat(per_token, bounds[:-1], axis=1)
    return total + best.sum(axis=0, dtype=np.float64)  # exact, as `touched_scores`'s sums


def top_pages(scores: np.ndarray, live: np.ndarray | None, depth: int) -> np.ndarray:
    """Positions of the ``depth`` best-scoring live pages (any order)."""
    if live is not None:
        scores = np.where(live, scores, -np.inf)
        n_live = int(live.sum())
    else:
        n_live = len(scores)
    depth = min(depth, n_live)
    if depth <= 0:
        return np.empty(0, dtype=np.int64)
    if depth < len(scores):
        return np.argpartition(-scores, depth - 1)[:depth].astype(np.int64)
    return np.flatnonzero(np.isfinite(scores)).astype(np.int64)


def _on_gpu(faiss: Any, index: Any) -> Any:
    """A GPU copy of a faiss index when faiss sees GPUs (the CPU index otherwise or on error)."""
    if _gpu_count(faiss) == 0:
        return index
    try:
        return faiss.index_cpu_to_all_gpus(index)
    except (RuntimeError, AttributeError) as exc:  # an index type without GPU support
        log.warning("faiss GPU copy failed (%s); assigning on the CPU", exc)
        return index


def _gpu_count(faiss) -> int:
    get = getattr(faiss, "get_num_gpus", None)
    return int(get()) if get is not None else 0
