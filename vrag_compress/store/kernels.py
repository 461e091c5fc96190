"""The store's compiled loops (numba), where numpy's whole-array passes cost more than the
work: MaxSim straight from residual codes (the rerank of a codes-only store) and the
accumulation of the probed cells' page lists (the candidate stage).

**MaxSim from codes.** Profile of a 1M-page 2-bit store (docs/store.md): 371 of a query's
577 ms went to numpy's decode of the 2,282 reranked pages (unpack to one byte per value, a
fancy-indexed gather of the bucket means, the fp16 round trip, each a full pass over 235k x 128
values) and 23 ms to the product. `coded_maxsim` decodes each token once, in cache, from a
per-byte table (a packed byte's 2 or 4 bucket means, 128 KB), rounds it to fp16 precision as
`ResidualCodec.decode` does, and dots it with four query tokens at a time while it is hot. A
lookup-table score (q . centroid + a sum of per-byte query tables) was the other way: it needs
32 (2-bit) or 64 (4-bit) scattered table reads per page token and query token against 128
contiguous multiply-adds that vectorise here, and it cannot reproduce the fp16 rounding. Each
page is scored one fixed way, so a page's score has the same bits in any batch.

**Page-list accumulation.** `list_gains` walks each query token's probed cells best first and
credits a page the gain of the first (best) cell whose list names it: one pass over the list
entries with a per-page stamp, instead of numpy's repeat/gather/scatter-max passes. Sums are
float64, exact for these float32 gains in any order, so splitting query tokens over threads
gives the same candidates as one thread.

The kernels release the GIL; callers split the work over the search threads (`parallel_map`).
Compiled code is cached on disk by numba (next to this file, or numba's user cache folder).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from vrag_compress.store.maxsim import parallel_map

MIN_PAGES_PER_THREAD = 64  # smaller shares cost more to hand out than they save


@dataclass(frozen=True)
class Kernels:
    """The compiled functions (see the module docstring)."""

    coded_maxsim: Any
    list_gains: Any


@cache
def kernels() -> Kernels:
    """The compiled kernels (numba loads, and compiles or reads its on-disk cache, on first
    use; where no cache folder is writable it compiles in memory, about 2 s per process)."""
    try:
        return _compile(cache=True)
    except RuntimeError:  # numba found no writable place for its cache
        return _compile(cache=False)


def _compile(cache: bool) -> Kernels:
    import numba

    jit = numba.njit(nogil=True, cache=cache, fastmath={"reassoc", "contract"})

    @jit
    def decode(row, n_base, base_codes, base_resid, tail_codes, tail_resid, centroids, table, out):  # noqa: ANN001, ANN202, E501
        """Token ``row`` of the index into ``out`` (float32), rounded to fp16 precision."""
        if row < n_base:
            centroid = centroids[base_codes[row]]
            packed = base_resid[row]
        else:
            centroid = centroids[tail_codes[row - n_base]]
            packed = tail_resid[row - n_base]
        n_bytes, _, per = table.shape
        for j in range(n_bytes):
            means = table[j, packed[j]]
            for i in range(per):
                out[j * per + i] = centroid[j * per + i] + means[i]
        bits = out.view(np.uint32)
        for d in range(len(out)):  # round half to even at fp16's 10 mantissa bits
            u = bits[d]
            bits[d] = (u + np.uint32(0xFFF) + ((u >> np.uint32(13)) & np.uint32(1))) & np.uint32(
                0xFFFFE000
            )

    @jit
    def coded_maxsim(
        q,
        starts,
        lengths,
        n_base,
        base_codes,
        base_resid,
        tail_codes,
        tail_resid,
        centroids,
        table,
        out,
    ):  # noqa: ANN001, ANN202, E501
        """Two page tokens against four query tokens at a time: each load feeds several
        multiply-adds (1.5x the one-by-one dot product, as fast as BLAS on decoded rows)."""
        n_q, dim = q.shape
        a = np.empty(dim, np.float32)
        b = np.empty(dim, np.float32)
        best = np.empty(n_q, np.float32)
        for p in range(len(out)):
            best[:] = np.float32(-3.0e38)
            end = starts[p] + lengths[p]
            row = starts[p]
            while row < end:
                decode(
                    row, n_base, base_codes, base_resid, tail_codes, tail_resid, centroids, table, a
                )  # noqa: E501
                if row + 1 < end:
                    decode(
                        row + 1,
                        n_base,
                        base_codes,
                        base_resid,
                        tail_codes,
                        tail_resid,
                        centroids,
                        table,
                        b,
                    )  # noqa: E501
                else:
                    b[:] = a
                for m in range(0, n_q, 4):  # rows past the end repeat the last (max is idempotent)
                    m1, m2, m3 = min(m + 1, n_q - 1), min(m + 2, n_q - 1), min(m + 3, n_q - 1)
                    sa0 = sa1 = sa2 = sa3 = sb0 = sb1 = sb2 = sb3 = np.float32(0.0)
                    for d in range(dim):
                        va, vb = a[d], b[d]
                        x0, x1, x2, x3 = q[m, d], q[m1, d], q[m2, d], q[m3, d]
                        sa0 += x0 * va
                        sa1 += x1 * va
                        sa2 += x2 * va
                        sa3 += x3 * va
                        sb0 += x0 * vb
                        sb1 += x1 * vb
                        sb2 += x2 * vb
                        sb3 += x3 * vb
                    best[m] = max(best[m], sa0, sb0)
                    best[m1] = max(best[m1], sa1, sb1)
                    best[m2] = max(best[m2], sa2, sb2)
                    best[m3] = max(best[m3], sa3, sb3)
                row += 2
            total = np.float32(0.0)
            for m in range(n_q):
                total += best[m]
            out[p] = total

    @jit
    def list_gains(cells, gains, indptr, lists, total, stamp):  # noqa: ANN001, ANN202
        """Credit each page named by query token ``t``'s probed lists (``cells[t]``, best
        first) with the gain of the first list naming it; ``stamp`` starts at -1."""
        for t in range(cells.shape[0]):
            for j in range(cells.shape[1]):
                cell = cells[t, j]
                gain = np.float64(gains[t, j])
                for entry in range(indptr[cell], indptr[cell + 1]):
                    page = lists[entry]
                    if stamp[page] != t:
                        stamp[page] = t
                        total[page] += gain

    return Kernels(coded_maxsim, list_gains)


def byte_table(weights: np.ndarray, nbits: int) -> np.ndarray:
    """``[D·b/8, 256, 8/b]`` float32: for each packed byte position and byte value, the bucket
    means of the dimensions it holds (the packing of `centroids._pack`: low bits first)."""
    per = 8 // nbits
    n_bytes = weights.shape[0] // per
    values = np.arange(256, dtype=np.int64)
    table = np.empty((n_bytes, 256, per), dtype=np.float32)
    for i in range(per):
        buckets = (values >> (i * nbits)) & ((1 << nbits) - 1)
        dims = np.arange(n_bytes) * per + i
        table[:, :, i] = weights[dims][:, buckets]
    return table


def coded_maxsim(
    q: np.ndarray,
    index: Any,
    starts: np.ndarray,
    lengths: np.ndarray,
    threads: int = 1,
) -> np.ndarray:
    """MaxSim ``[P]`` of query ``q`` against pages whose tokens are candidate-index rows
    ``starts[p] : starts[p] + lengths[p]`` (`candidates.CandidateIndex` with residual codes)."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    out = np.empty(len(starts), dtype=np.float32)
    if len(out) == 0:
        return out
    kernel = kernels().coded_maxsim
    args = index.kernel_arrays()

    def run(span: tuple[int, int]) -> None:
        a, b = span
        kernel(q, starts[a:b], lengths[a:b], *args, out[a:b])

    shares = max(1, min(threads, len(out) // MIN_PAGES_PER_THREAD))
    edges = np.linspace(0, len(out), shares + 1).astype(np.int64)
    parallel_map(run, list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True)), shares)
    return out


def list_gains(
    cells: np.ndarray, gains: np.ndarray, indptr: np.ndarray, lists: np.ndarray, n_pages: int
) -> tuple[np.ndarray, np.ndarray]:
    """The pages (ascending) that query tokens' probed cells ``cells[M, n]`` (best first, with
    ``gains`` over the unprobed floor) name in the CSR lists ``indptr``/``lists``, and each
    page's sum over tokens of its best named cell's gain (float64)."""
    total = np.zeros(n_pages, dtype=np.float64)
    stamp = np.full(n_pages, -1, dtype=np.int32)
    kernels().list_gains(
        np.ascontiguousarray(cells, dtype=np.int64),
        np.ascontiguousarray(gains, dtype=np.float32),
        np.asarray(indptr),
        np.asarray(lists),
        total,
        stamp,
    )
    touched = np.flatnonzero(stamp >= 0)
    return touched, total[touched]
