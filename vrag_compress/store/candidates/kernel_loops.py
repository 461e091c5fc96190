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
def decode_token(row, index, out):
    """Token ``row`` of the index into ``out`` (float32), rounded to fp16 precision. False
    (and NaN in ``out``) where the row or its stored centroid id is out of range: damaged
    codes, which the caller reports. ``index``: `CandidateIndex.kernel_arrays` (n_base, base
    codes and residuals, tail codes and residuals, centroids, byte table)."""
    code = residual_token(row, index, out)
    if code < 0:
        return False
    centroid = index[5][code]
    for d in range(len(out)):
        out[d] += centroid[d]
    round_to_fp16(out)
    return True


@JIT
def unpack_residual(packed, table, out):
    """A token's packed residual bytes into its float32 residual ``out``: each byte's 2 (4-bit
    codes), 4 (2-bit) or 8 (1-bit) bucket means from the byte table. Written out per width: a
    loop over a width known only at run time, or a row view of the table per byte, made this 2.6x
    slower (the decode was 60% of the rerank kernel's time)."""
    n_bytes, _, per = table.shape
    if per == 2:
        for j in range(n_bytes):
            byte = packed[j]
            out[2 * j] = table[j, byte, 0]
            out[2 * j + 1] = table[j, byte, 1]
    elif per == 4:
        for j in range(n_bytes):
            byte = packed[j]
            out[4 * j] = table[j, byte, 0]
            out[4 * j + 1] = table[j, byte, 1]
            out[4 * j + 2] = table[j, byte, 2]
            out[4 * j + 3] = table[j, byte, 3]
    elif per == 8:
        for j in range(n_bytes):
            byte = packed[j]
            for i in range(8):
                out[8 * j + i] = table[j, byte, i]
    else:
        for j in range(n_bytes):
            for i in range(per):
                out[j * per + i] = table[j, packed[j], i]


@JIT
def round_to_fp16(values):
    """Round float32 values in place as numpy's float16 conversion does (half to even): 10
    mantissa bits, and steps of 2^-24 below fp16's smallest normal 2^-14 (values past fp16's
    range do not occur in unit-vector tokens and are left alone)."""
    bits = values.view(np.uint32)
    for d in range(len(values)):
        u = bits[d]
        if (u & np.uint32(0x7FFFFFFF)) < np.uint32(0x38800000):  # |x| < 2^-14: subnormal
            values[d] = np.rint(values[d] * np.float32(16777216.0)) * np.float32(2.0**-24)
        else:
            bits[d] = (u + np.uint32(0xFFF) + ((u >> np.uint32(13)) & np.uint32(1))) & np.uint32(
                0xFFFFE000
            )


@JIT
def decode_rows(rows, index, out):
    """Tokens ``rows`` of the index into ``out[len(rows), D]``, as `decode_token` makes them;
    False when one of them is damaged."""
    sound = True
    for i in range(len(rows)):
        sound &= decode_token(rows[i], index, out[i])
    return sound


@JIT
def residual_token(row, index, out):
    """Token ``row``'s decoded residual into ``out`` (float32, no centroid, no rounding) and
    its centroid id; -1 (and NaN in ``out``) where the row or the id is out of range."""
    n_base, base_codes, base_resid, tail_codes, tail_resid, centroids, table = index
    if row < 0 or row >= n_base + len(tail_codes):  # damaged page bounds
        out[:] = np.nan
        return -1
    if row < n_base:
        code = np.int64(base_codes[row])
        packed = base_resid[row]
    else:
        code = np.int64(tail_codes[row - n_base])
        packed = tail_resid[row - n_base]
    if code < 0 or code >= centroids.shape[0]:
        out[:] = np.nan
        return -1
    unpack_residual(packed, table, out)
    return code


@JIT
def coded_maxsim(q, sims, starts, lengths, index, out):
    """MaxSim of ``q`` against pages of coded tokens, a token's score taken as q.centroid (from
    ``sims = q @ centroids.T``, computed once per query) plus q.residual: no centroid row is read
    (at 16k+ centroids they miss the cache) and nothing is rounded, so a score differs from the
    fp16-decoded page's by at most 2^-11 of |q||token| per query token (`settled_top_k` rescores
    the near-ties exactly). Two page tokens against four query tokens at a time: each load
    feeds several multiply-adds."""
    n_q, dim = q.shape
    a = np.empty(dim, np.float32)
    b = np.empty(dim, np.float32)
    best = np.empty(n_q, np.float32)
    for p in range(len(out)):
        best[:] = np.float32(-3.0e38)
        end = starts[p] + lengths[p]
        row = starts[p]
        ok = True
        while row < end and ok:
            ca = residual_token(row, index, a)
            cb = residual_token(min(row + 1, end - 1), index, b)  # an odd page repeats its last
            ok = ca >= 0 and cb >= 0
            if not ok:
                break
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
                best[m] = max(best[m], sa0 + sims[m, ca], sb0 + sims[m, cb])
                best[m1] = max(best[m1], sa1 + sims[m1, ca], sb1 + sims[m1, cb])
                best[m2] = max(best[m2], sa2 + sims[m2, ca], sb2 + sims[m2, cb])
                best[m3] = max(best[m3], sa3 + sims[m3, ca], sb3 + sims[m3, cb])
            row += 2
        if not ok:  # damaged codes: the caller raises
            out[p] = np.nan
            continue
        total = np.float32(0.0)
        for m in range(n_q):
            total += best[m]
        out[p] = total


@JIT
def list_gains(cells, gains, indptr, lists, total, stamp, lo, hi):
    """Credit each page in ``[lo, hi)`` named by query token ``t``'s probed lists
    (``cells[t]``, best first) with the gain of the first list naming it; ``stamp`` starts at
    -1. Lists hold ascending pages, so a thread owning a range of pages starts each list at
    its range by binary search: threads split the work without sharing a page, and a page's
    sum is added in the same order whatever the split. False when a list or an entry points
    outside the arrays (damaged files: the caller raises)."""
    n_pages = len(total)
    for t in range(cells.shape[0]):
        for j in range(cells.shape[1]):
            cell = cells[t, j]
            if cell < 0 or cell + 1 >= len(indptr):
                return False
            start, stop = indptr[cell], indptr[cell + 1]
            if start < 0 or stop > len(lists) or start > stop:
                return False
            gain = np.float64(gains[t, j])
            entry = start + np.searchsorted(lists[start:stop], lo)
            while entry < stop:
                page = lists[entry]
                if page < 0 or page >= n_pages:
                    return False
                if page >= hi:
                    break
                if stamp[page] != t:
                    stamp[page] = t
                    total[page] += gain
                entry += 1
    return True
