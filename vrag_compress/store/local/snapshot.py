"""The reader's view of a `LocalStore`: committed pages at one catalog generation and their
token matrix, rebuilt only when a writer committed since.

A snapshot is read in one catalog read transaction, and segments are mapped only up to their
committed lengths, so a reader never sees uncommitted pages. Loading one reads the page list,
never the vectors: the token matrix reads the segment maps on demand (`SegmentTokens`: a rerank
reads its pages' rows; the first exact search keeps an fp32 copy while it fits
``cache_fp32_max_bytes``). A store without fp16 vectors decodes its pages' codes from the
candidate index committed in the same transaction, on demand (`CodedTokens`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vrag_compress.store.base import StoreCorruptError, StoreError
from vrag_compress.store.candidates.token_rows import SegmentTokens
from vrag_compress.store.local import catalog as cat
from vrag_compress.store.local import segments as seg
from vrag_compress.store.local.context import StoreContext


@dataclass
class Snapshot:
    """Committed pages at one catalog generation, in page_id order, with their token matrix."""

    generation: int
    pids: np.ndarray
    bounds: np.ndarray
    tokens: Any  # np.ndarray, or `CodedTokens` (decoded on demand) without fp16 vectors
    pid_sorted: np.ndarray
    pos_of_sorted: np.ndarray

    def positions(self, pids: np.ndarray) -> np.ndarray:
        """Snapshot positions (ascending) of the given pids that the snapshot holds."""
        idx = np.searchsorted(self.pid_sorted, pids)
        idx = np.minimum(idx, max(len(self.pid_sorted) - 1, 0))
        ok = (len(self.pid_sorted) > 0) & (self.pid_sorted[idx] == pids)
        return np.sort(self.pos_of_sorted[idx[ok]])


class Snapshots:
    """Holds the current snapshot; `current` reloads it when the catalog generation moved."""

    def __init__(self, ctx: StoreContext, coded: Callable[[Any, np.ndarray], Any] | None = None):
        self.ctx = ctx
        self.coded = coded  # (conn, pids) -> their decoded-on-demand tokens (no-fp16 stores)
        self._snap: Snapshot | None = None

    def current(self) -> Snapshot:
        """The committed pages and their token matrix, rebuilt when the generation moved."""
        with self.ctx.catalog.read() as conn:
            gen = cat.generation(conn)
        if self._snap is not None and self._snap.generation == gen:
            return self._snap
        for attempt in range(5):
            try:
                self._snap = self._load()
                return self._snap
            except FileNotFoundError as exc:  # a compaction removed a file we were to map ...
                self.ctx.maps.clear()
                if self._generation() == gen:  # ... or nobody did: the store lacks it
                    raise StoreCorruptError(str(exc.filename), "file is missing") from None
                gen = self._generation()
                time.sleep(0.01 * (attempt + 1))
        raise StoreError(f"segments of {self.ctx.root} kept disappearing while loading; retry")

    def _generation(self) -> int:
        with self.ctx.catalog.read() as conn:
            return cat.generation(conn)

    def invalidate(self) -> None:
        """Forget the cached snapshot (the next `current` reloads it)."""
        self._snap = None

    def _load(self) -> Snapshot:
        with self.ctx.catalog.snapshot() as conn:
            gen = cat.generation(conn)
            self.ctx.refresh_config(conn)
            rows = cat.snapshot_pages(conn)
            seg_rows = cat.segment_rows(conn)
            info = np.array(rows, dtype=np.int64).reshape(-1, 4)
            pids, seg_ids, offsets, lengths = info.T
            bounds = np.zeros(len(pids) + 1, dtype=np.int64)
            np.cumsum(lengths, out=bounds[1:])
            coded = not self.ctx.fp16 and bool((seg_ids == seg.NO_SEGMENT).any())
            if not coded or self.coded is None:  # fp16 rows (also a no-fp16 store's staged ones)
                tokens = self._segment_tokens(seg_ids, offsets, lengths, bounds, seg_rows)
            else:
                tokens = self.coded(conn, pids)
        order = np.argsort(pids)
        return Snapshot(gen, pids.copy(), bounds, tokens, pids[order], order)

    def _segment_tokens(
        self,
        seg_ids: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        bounds: np.ndarray,
        seg_rows: dict[int, int],
    ) -> SegmentTokens:
        """The pages' fp16 rows read from the segment maps on demand (nothing copied here);
        each page's rows must lie inside its segment's committed rows."""
        dim = self.ctx.dim
        unique = np.unique(seg_ids).tolist()
        for sid in unique:
            sel = seg_ids == sid
            committed = seg_rows.get(sid, -1)
            if (
                committed < 0
                or (offsets[sel] < 0).any()
                or (lengths[sel] < 1).any()
                or (offsets[sel] + lengths[sel] > committed).any()
            ):
                raise StoreCorruptError(
                    str(self.ctx.catalog.path),
                    f"pages point outside the committed rows of segment {sid}; run `verify`",
                )
        maps = {sid: self.ctx.maps.rows(sid, seg_rows[sid], dim) for sid in unique}
        return SegmentTokens(
            maps, seg_ids, offsets, bounds, dim, self.ctx.options.cache_fp32_max_bytes
        )


def page_vectors(
    ctx: StoreContext,
    conn: sqlite3.Connection,
    rows: list[tuple],
    coded_rows: Callable[[sqlite3.Connection, np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> list[np.ndarray]:
    """Vectors of pages given as ``(pid, segment_id, row_offset, n_vectors)`` rows: the stored
    fp16 rows, or for pages without them (a codes-only store) their decoded residual codes, which
    ``coded_rows`` reads from the committed candidate index as ``(tokens, bounds)``."""
    seg_rows = cat.segment_rows(conn)
    coded = [r[0] for r in rows if r[1] == seg.NO_SEGMENT]
    decoded: dict[int, np.ndarray] = {}
    if coded:
        flat, b = coded_rows(conn, np.array(coded, dtype=np.int64))
        decoded = {p: flat[b[i] : b[i + 1]] for i, p in enumerate(coded)}
    return [
        decoded[p] if s == seg.NO_SEGMENT else ctx.vectors(s, seg_rows[s], off, n)
        for p, s, off, n in rows
    ]
