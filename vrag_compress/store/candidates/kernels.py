"""The store's compiled loops (numba), where numpy's whole-array passes cost more than the
work: MaxSim straight from residual codes (the rerank of a codes-only store) and the
accumulation of the probed cells' page lists (the candidate stage).

**MaxSim from codes.** Profile of a 1M-page 2-bit store (docs/store.md): 371 of a query's
577 ms went to numpy's decode of the 2,282 reranked pages (unpack to one byte per value, a
fancy-indexed gather of the bucket means, the fp16 round trip, each a full pass over 235k x 128
values) and 23 ms to the product. `coded_maxsim` scores a token as q . centroid (one row of the
query's ``[M, K]`` centroid product) plus q . residual, the residual decoded in cache from a
per-byte table (a packed byte's 2 or 4 bucket means, 128 KB) and dotted with four query tokens
at a time while it is hot. Reading each token's centroid row instead (8 MB of centroids at 16k
cells, a cache miss per token) cost 1.5x the whole kernel at 100k pages. The score is not
rounded through fp16 as `ResidualCodec.decode` rounds a page; the difference is bounded (see
`CODED_SCORE_BAND`) and `maxsim.settled_top_k` rescores every page near the k-th the exact way,
so the answer and its scores are those of the decoded pages. A lookup-table score (a sum of
per-byte query tables) was the other way: 32 (2-bit) or 64 (4-bit) scattered table reads per
page token and query token against 128 contiguous multiply-adds that vectorise here. Each page
is scored one fixed way, so a page's score has the same bits in any batch.

**Page-list accumulation.** `list_gains` walks each query token's probed cells best first and
credits a page the gain of the first (best) cell whose list names it: one pass over the list
entries with a per-page stamp, instead of numpy's repeat/gather/scatter-max passes. Lists hold
ascending pages, so threads split the pages into ranges (each starts every list at its range
by binary search) and never share a page: a page's float64 sum is added in the same order
whatever the number of threads.

The kernels release the GIL; callers split the work over the search threads (`parallel_map`).
Compiled code is cached on disk by numba (next to this file, or numba's user cache folder).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from vrag_compress.scoring.packed import parallel_map
from vrag_compress.store.base import StoreCorruptError

MIN_PAGES_PER_THREAD = 64  # smaller shares cost more to hand out than they save
MIN_ENTRIES_PER_THREAD = 20_000  # list entries: below this one thread reads them as fast
# How far a codes-in-place score may sit from the fp16-decoded page's, per query token and per
# unit of |q||token|: fp16 keeps 11 significant bits, so rounding moves each coordinate by at
# most 2^-11 of itself and a dot product by at most 2^-11 |q||x| (Cauchy-Schwarz); float32
# sums add far less. `settled_top_k` widens its tie band by this.
CODED_SCORE_BAND = 2.0**-11


@dataclass(frozen=True)
class Kernels:
    """The compiled functions (see the module docstring)."""

    coded_maxsim: Any
    list_gains: Any
    decode_rows: Any


@cache
def kernels() -> Kernels:
    """The compiled kernels: numba reads them from its on-disk cache, or compiles them (about
    5 s) and writes the cache, on first use in a process. Where numba finds no writable cache
    folder (a read-only install and home), a temporary one serves this process."""
    try:
        loops = _load_loops()
    except RuntimeError:  # "cannot cache function ...: no locator available"
        loops = _load_loops(tempfile.mkdtemp(prefix="vrag-numba-"))
    return Kernels(loops.coded_maxsim, loops.list_gains, loops.decode_rows)


def _load_loops(cache_dir: str | None = None) -> Any:
    if cache_dir is not None:
        import numba

        numba.config.CACHE_DIR = cache_dir  # type: ignore[attr-defined]
    from vrag_compress.store.candidates import kernel_loops

    return kernel_loops


def byte_table(weights: np.ndarray, nbits: int) -> np.ndarray:
    """``[D·b/8, 256, 8/b]`` float32: for each packed byte position and byte value, the bucket
    means of the dimensions it holds (the packing of `codec._pack`: low bits first)."""
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
    sims: np.ndarray | None = None,
) -> np.ndarray:
    """MaxSim ``[P]`` of query ``q`` against pages whose tokens are candidate-index rows
    ``starts[p] : starts[p] + lengths[p]`` (`candidates.CandidateIndex` with residual codes),
    within `CODED_SCORE_BAND` of the decoded pages' scores. ``sims``: ``q @ centroids.T``
    when the caller has it already (the candidate stage computed it)."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    out = np.empty(len(starts), dtype=np.float32)
    if len(out) == 0:
        return out
    if sims is None:
        sims = q @ index.centroids.T
    sims = np.ascontiguousarray(sims, dtype=np.float32)
    kernel = kernels().coded_maxsim
    args = index.kernel_arrays()

    def run(span: tuple[int, int]) -> None:
        a, b = span
        kernel(q, sims, starts[a:b], lengths[a:b], args, out[a:b])

    shares = max(1, min(threads, len(out) // MIN_PAGES_PER_THREAD))
    parallel_map(run, _spans(len(out), shares), shares)
    if np.isnan(out).any():  # a page with a damaged token (`residual_token`)
        _report_damage(index)
    return out


def _spans(n: int, shares: int) -> list[tuple[int, int]]:
    """``shares`` consecutive ranges covering ``range(n)``, as equal as integers allow."""
    edges = np.linspace(0, n, shares + 1).astype(np.int64)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))


def _report_damage(index: Any) -> None:
    """A stored centroid id or a page's rows outside the index: damaged codes or bounds."""
    raise StoreCorruptError(
        str(index.root / "centroids"),
        "residual codes name centroids or rows that do not exist (run verify)",
    )


def list_gains(
    cells: np.ndarray,
    gains: np.ndarray,
    indptr: np.ndarray,
    lists: np.ndarray,
    n_pages: int,
    threads: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """The pages (ascending) that query tokens' probed cells ``cells[M, n]`` (best first, with
    ``gains`` over the unprobed floor) name in the CSR lists ``indptr``/``lists``, and each
    page's sum over tokens of its best named cell's gain (float64; the same bits for any
    ``threads``, which split the pages into ranges)."""
    cells = np.ascontiguousarray(cells, dtype=np.int64)
    gains = np.ascontiguousarray(gains, dtype=np.float32)
    indptr, lists = np.asarray(indptr), np.asarray(lists)
    total = np.zeros(n_pages, dtype=np.float64)
    stamp = np.full(n_pages, -1, dtype=np.int32)
    kernel = kernels().list_gains
    entries = _entries(cells, indptr)
    shares = max(1, min(threads, entries // MIN_ENTRIES_PER_THREAD, n_pages))
    sound = parallel_map(
        lambda span: kernel(cells, gains, indptr, lists, total, stamp, *span),
        _spans(n_pages, shares),
        shares,
    )
    if not all(sound):  # what numpy raises for it, so the store names the damaged file
        raise IndexError("candidate page lists point outside their arrays")
    touched = np.flatnonzero(stamp >= 0)
    return touched, total[touched]


def _entries(cells: np.ndarray, indptr: np.ndarray) -> int:
    """List entries the probed cells hold (0 where a cell id is out of range: the kernel
    reports that damage itself)."""
    valid = cells[(cells >= 0) & (cells + 1 < len(indptr))]
    return int((indptr[valid + 1] - indptr[valid]).sum())


def decode_rows(index: Any, rows: np.ndarray) -> np.ndarray:
    """Float32 tokens ``[len(rows), D]`` of candidate-index rows from their codes: bit for bit
    what `ResidualCodec.decode` gives, in one compiled pass instead of numpy's four."""
    out = np.empty((len(rows), index.centroids.shape[1]), dtype=np.float32)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if len(rows) and not kernels().decode_rows(rows, index.kernel_arrays(), out):
        _report_damage(index)
    return out
