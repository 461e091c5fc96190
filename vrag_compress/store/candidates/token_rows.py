"""Token matrices read on demand: what a snapshot searches instead of a copy of the collection.

A `LazyTokens` is a ``[T, D]`` matrix whose rows come from somewhere else: the fp16 segment
maps (`SegmentTokens`) or the candidate index's residual codes (`candidates.CodedTokens`).
Reading rows (a rerank's pages, or a chunk of an exact search) converts just those rows to fp32;
while the whole matrix would fit ``cache_bytes`` as fp32, converted rows are kept, so later
searches skip the conversion (fp16 to fp32 costs about 10 ns per value with this numpy, more
than the product). The cache is allocated untouched (no memory until rows are written), so
opening a store and its first two-stage answer read, convert and keep only the reranked pages,
and the cache warms with use; the first exact search fills it.
"""

from __future__ import annotations

import mmap
import threading
from typing import Any

import numpy as np


class LazyTokens:
    """A token matrix whose rows `_read` produces on demand (see the module docstring)."""

    ndim = 2
    dtype = np.dtype(np.float32)

    def __init__(self, n_rows: int, dim: int, cache_bytes: int = 0):
        self.shape = (n_rows, dim)
        self.cache_bytes = cache_bytes
        self._cache: np.ndarray | None = None  # fp32 rows, valid where `_cached`
        self._cached: np.ndarray | None = None
        self._allocating = threading.Lock()

    def _read(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``[len(rows), D]`` (fp32 or fp16) by their positions in the matrix."""
        raise NotImplementedError

    def _read_range(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop``; subclasses with contiguous storage return a view."""
        return self._read(np.arange(start, stop, dtype=np.int64))

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def cached_rows(self) -> int:
        """Rows converted and kept so far (0 without a cache)."""
        return 0 if self._cached is None else int(self._cached.sum())

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                return self[np.arange(start, stop, step, dtype=np.int64)]
            stop = max(start, stop)
            if not self._use_cache():
                return self._read_range(start, stop)
            return self._fill_range(start, stop)
        rows = np.asarray(key, dtype=np.int64)
        if not self._use_cache():
            return self._read(rows)
        assert self._cache is not None and self._cached is not None
        missing = rows[~self._cached[rows]]
        if len(missing):
            missing = np.unique(missing)
            self._cache[missing] = self._read(missing)
            self._cached[missing] = True
        return self._cache[rows]

    def _fill_range(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` from the cache (a view), converting those not kept yet."""
        assert self._cache is not None and self._cached is not None
        have = self._cached[start:stop]
        if not have.all():
            if not have.any():
                self._cache[start:stop] = self._read_range(start, stop)
            else:
                missing = start + np.flatnonzero(~have)
                self._cache[missing] = self._read(missing)
            self._cached[start:stop] = True
        return self._cache[start:stop]

    def _use_cache(self) -> bool:
        if self._cache is not None:
            return True
        if self.shape[0] * self.shape[1] * 4 > self.cache_bytes or not self.shape[0]:
            return False
        with self._allocating:
            if self._cache is None:
                self._cached = np.zeros(self.shape[0], dtype=bool)
                self._cache = _untouched_fp32(self.shape)
        return True

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)


def _untouched_fp32(shape: tuple[int, int]) -> np.ndarray:
    """A zero fp32 array whose memory is taken page by page as rows are written: an anonymous
    map without transparent huge pages (numpy asks for them on large arrays, and then writing
    one row makes 2 MB resident: scattered rerank rows would fill the whole cache at once)."""
    n_bytes = max(shape[0] * shape[1] * 4, 1)
    area = mmap.mmap(-1, n_bytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        area.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(area, dtype=np.float32, count=shape[0] * shape[1]).reshape(shape)


class SegmentTokens(LazyTokens):
    """The fp16 rows of a snapshot's pages (in snapshot order) read from the segment maps.

    ``maps`` holds each segment's committed rows (memory maps, kept by this object so a
    compaction that unlinks a file later cannot pull it away); page ``i`` is ``bounds[i+1] -
    bounds[i]`` rows of segment ``seg_ids[i]`` from ``offsets[i]`` on. Without a cache, reads
    return the stored fp16 (callers convert chunk by chunk)."""

    def __init__(
        self,
        maps: dict[int, np.ndarray],
        seg_ids: np.ndarray,
        offsets: np.ndarray,
        bounds: np.ndarray,
        dim: int,
        cache_bytes: int = 0,
    ):
        super().__init__(int(bounds[-1]), dim, cache_bytes)
        self.maps = maps
        self.seg_ids = seg_ids
        self.offsets = offsets
        self.bounds = bounds
        # one segment holding the pages back to back in snapshot order: rows are a plain shift
        self._shift: int | None = None
        if len(maps) == 1 and len(offsets):
            shift = int(offsets[0])
            if (offsets - bounds[:-1] == shift).all():
                self._shift = shift
        elif not len(offsets):
            self._shift = 0

    def _read_range(self, start: int, stop: int) -> np.ndarray:
        if self._shift is not None and self.maps:
            (rows,) = self.maps.values()
            return rows[start + self._shift : stop + self._shift]
        return super()._read_range(start, stop)

    def _read(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((len(rows), self.shape[1]), dtype=np.float16)
        if not len(rows):
            return out
        if self._shift is not None:
            (segment,) = self.maps.values()
            out[:] = segment[rows + self._shift]
            return out
        page = np.searchsorted(self.bounds, rows, side="right") - 1
        src = self.offsets[page] + (rows - self.bounds[page])
        sids = self.seg_ids[page]
        for sid in np.unique(sids).tolist():
            sel = sids == sid
            out[sel] = self.maps[sid][src[sel]]
        return out
