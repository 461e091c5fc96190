"""The loops `kernels` compiles, at module level so that numba's on-disk cache finds them
again in the next process (a function built inside another one is compiled anew each time).

Imported only through `kernels.kernels()`: importing this module compiles nothing, but it
imports numba (0.3 s), which plain store use never pays.
"""

from __future__ import annotations

import numba
import numpy as np

JIT = numba.njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})


@JIT
def decode_token(
    row, n_base, base_codes, base_resid, tail_codes, tail_resid, centroids, table, out
):
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


@JIT
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
):
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
            decode_token(
                row, n_base, base_codes, base_resid, tail_codes, tail_resid, centroids, table, a
            )
            if row + 1 < end:
                decode_token(
                    row + 1,
                    n_base,
                    base_codes,
                    base_resid,
                    tail_codes,
                    tail_resid,
                    centroids,
                    table,
                    b,
                )
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


@JIT
def list_gains(cells, gains, indptr, lists, total, stamp):
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
