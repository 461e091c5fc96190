"""FAISS token index for two-stage search: candidate pages from each query token's neighbours.

Every live token is one entry labelled ``(pid << 16) | row``; ``pid`` is the catalog's
never-reused page key, so deletes and upserts map to `remove_ids` and adds to `add_with_ids`
and the index follows the catalog incrementally. Small collections use ``IndexIDMap2`` over
``IndexFlatIP``; from ``ivf_min_tokens`` on, an IVF index with 8-bit scalar quantisation (the
exact rerank restores full precision, so candidates can be coarse). Searches run on GPU copies
when FAISS sees GPUs. The index lives in memory and is rebuilt lazily after a reopen.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from vrag_compress.scoring.packed import gather_pages

log = logging.getLogger(__name__)

ROW_BITS = 16
ADD_CHUNK_TOKENS = 1 << 20


def token_labels(pids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Labels of all tokens of the given pages, in page order."""
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    rows = np.arange(starts[-1], dtype=np.int64) - np.repeat(starts[:-1], lengths)
    return (np.repeat(pids.astype(np.int64), lengths) << ROW_BITS) | rows


class TokenIndex:
    """Candidate generator over the tokens of a store snapshot."""

    def __init__(self, dim: int, *, ivf_min_tokens: int, nprobe: int, seed: int = 0):
        self.dim = dim
        self.ivf_min_tokens = ivf_min_tokens
        self.nprobe = nprobe
        self.seed = seed
        self.generation = -1
        self.kind = ""
        self._index: Any = None  # faiss objects (untyped)
        self._quantizer: Any = None  # faiss objects (untyped)
        self._gpu_index: Any = None  # faiss objects (untyped)
        self._trained_on = 0
        self._pids = np.empty(0, dtype=np.int64)  # indexed pages, sorted
        self._lengths = np.empty(0, dtype=np.int64)

    @property
    def ntotal(self) -> int:
        return 0 if self._index is None else int(self._index.ntotal)

    def sync(
        self, generation: int, pids: np.ndarray, bounds: np.ndarray, tokens: np.ndarray
    ) -> None:
        """Bring the index to the snapshot: rebuild when the size class changes, else diff."""
        if generation == self.generation:
            return
        total = int(bounds[-1])
        if self._needs_rebuild(total):
            self._build(pids, bounds, tokens)
        else:
            self._apply_diff(pids, bounds, tokens)
        self.generation = generation
        self._gpu_index = None

    def candidates(self, query: np.ndarray, per_token: int) -> np.ndarray:
        """Sorted unique pids among the ``per_token`` nearest tokens of each query token."""
        if self.ntotal == 0:
            return np.empty(0, dtype=np.int64)
        if self.kind == "ivf":
            self._index.nprobe = self.nprobe
        _, labels = self._searcher().search(query, min(per_token, self.ntotal))
        labels = labels[labels >= 0]
        return np.unique(labels >> ROW_BITS)

    def _needs_rebuild(self, total: int) -> bool:
        if self._index is None:
            return True
        if self.kind == "flat":
            return total >= self.ivf_min_tokens
        return total > 8 * self._trained_on or total < self.ivf_min_tokens // 2

    def _build(self, pids: np.ndarray, bounds: np.ndarray, tokens: np.ndarray) -> None:
        import faiss

        total = int(bounds[-1])
        if total < self.ivf_min_tokens:
            self._quantizer = None
            self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
            self.kind = "flat"
        else:
            self._index = self._train_ivf(faiss, tokens, total)
            self.kind = "ivf"
        self._trained_on = total
        self._pids = np.empty(0, dtype=np.int64)
        self._lengths = np.empty(0, dtype=np.int64)
        self._add(pids, bounds, tokens, np.arange(len(pids)))

    def _train_ivf(self, faiss, tokens: np.ndarray, total: int):
        nlist = int(min(65536, max(256, math.sqrt(total))))
        self._quantizer = faiss.IndexFlatIP(self.dim)
        index = faiss.IndexIVFScalarQuantizer(
            self._quantizer,
            self.dim,
            nlist,
            faiss.ScalarQuantizer.QT_8bit,
            faiss.METRIC_INNER_PRODUCT,
        )
        index.cp.niter = 10  # coarse lists are enough: the exact rerank fixes the order
        rng = np.random.default_rng(self.seed)
        n_train = min(total, nlist * 30)
        sample = np.sort(rng.choice(total, size=n_train, replace=False))
        index.train(np.ascontiguousarray(tokens[sample], dtype=np.float32))
        index.nprobe = self.nprobe
        log.info("trained IVF token index: %d lists on %d of %d tokens", nlist, n_train, total)
        return index

    def _apply_diff(self, pids: np.ndarray, bounds: np.ndarray, tokens: np.ndarray) -> None:
        gone = ~np.isin(self._pids, pids)
        if gone.any():
            self._index.remove_ids(token_labels(self._pids[gone], self._lengths[gone]))
            self._pids, self._lengths = self._pids[~gone], self._lengths[~gone]
        new = np.flatnonzero(~np.isin(pids, self._pids))
        if len(new):
            self._add(pids, bounds, tokens, new)

    def _add(
        self, pids: np.ndarray, bounds: np.ndarray, tokens: np.ndarray, pos: np.ndarray
    ) -> None:
        lengths = (bounds[1:] - bounds[:-1])[pos]
        start = 0
        while start < len(pos):
            end = (
                start
                + 1
                + int(np.searchsorted(np.cumsum(lengths[start:]), ADD_CHUNK_TOKENS, side="right"))
            )
            chunk = pos[start:end]
            rows, _ = gather_pages(bounds, chunk)
            vectors = np.ascontiguousarray(tokens[rows], dtype=np.float32)
            self._index.add_with_ids(vectors, token_labels(pids[chunk], lengths[start:end]))
            start = end
        all_pids = np.concatenate([self._pids, pids[pos]])
        order = np.argsort(all_pids)
        self._pids = all_pids[order]
        self._lengths = np.concatenate([self._lengths, lengths])[order]

    def _searcher(self):
        """The CPU index, or a GPU copy when FAISS has GPU support and sees GPUs."""
        import faiss

        if self._gpu_index is None and _gpu_count(faiss) > 0:
            try:
                self._gpu_index = faiss.index_cpu_to_all_gpus(self._index)
            except (RuntimeError, AttributeError) as exc:  # e.g. an index type without GPU support
                log.warning("FAISS GPU copy failed (%s); searching on the CPU", exc)
                self._gpu_index = self._index
        return self._gpu_index if self._gpu_index is not None else self._index


def _gpu_count(faiss) -> int:
    get = getattr(faiss, "get_num_gpus", None)
    return int(get()) if get is not None else 0
