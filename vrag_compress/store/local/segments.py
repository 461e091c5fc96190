"""Append-only fp16 segment files: raw little-endian rows of D halves, nothing else.

A segment only ever grows by appends followed by fsync; bytes past the length the catalog has
committed are a torn tail (a crash between the append and the commit) and are never read. Segment
ids are never reused, so a reader's memory map of an old segment can never alias a new file.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path

import numpy as np

from vrag_compress.store.base import StoreCorruptError

DTYPE = np.dtype("<f2")
NO_SEGMENT = -1  # segment_id of a page whose vectors only the candidate index holds (no fp16)
SEGMENT_DIR = "segments"
_NAME = re.compile(r"^seg-(\d{8})\.f16$")


def segment_path(root: Path, segment_id: int) -> Path:
    return root / SEGMENT_DIR / f"seg-{segment_id:08d}.f16"


def list_segment_files(root: Path) -> dict[int, Path]:
    """Segment files on disk by id (whether or not the catalog knows them)."""
    found = {}
    for entry in (root / SEGMENT_DIR).iterdir():
        match = _NAME.match(entry.name)
        if match:
            found[int(match.group(1))] = entry
    return found


def fsync_dir(path: Path) -> None:
    """Make a file creation or removal in the folder ``path`` durable (or, given a file, its
    contents)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append(path: Path, expected_size: int, data: bytes | memoryview) -> None:
    """Append ``data`` at ``expected_size`` (dropping any torn tail first), then fsync."""
    existed = path.exists()
    with open(path, "ab") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size < expected_size:
            raise StoreCorruptError(str(path), f"is {size} bytes, catalog expects {expected_size}")
        if size > expected_size:
            handle.truncate(expected_size)
            handle.seek(expected_size)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    if not existed:
        fsync_dir(path.parent)


def drop_tail(path: Path, committed_bytes: int) -> int:
    """Truncate bytes past the committed length; returns how many were dropped."""
    size = path.stat().st_size
    if size > committed_bytes:
        os.truncate(path, committed_bytes)
        return size - committed_bytes
    return 0


def open_rows(path: Path, rows: int, dim: int) -> np.ndarray:
    """Read-only memory map of the first ``rows`` committed rows (a corrupt error if too short)."""
    need = rows * dim * DTYPE.itemsize
    size = path.stat().st_size
    if size < need:
        raise StoreCorruptError(str(path), f"is {size} bytes, catalog expects at least {need}")
    if rows == 0:
        return np.empty((0, dim), dtype=DTYPE)
    return np.memmap(path, dtype=DTYPE, mode="r", shape=(rows, dim))


def vectors_crc(vectors: np.ndarray) -> int:
    """CRC32 of the stored fp16 bytes of one page."""
    return zlib.crc32(np.ascontiguousarray(vectors, dtype=DTYPE).data)


class SegmentMaps:
    """Memory maps of segments' committed rows, kept between reads and remapped when one grew."""

    def __init__(self, root: Path):
        self.root = root
        self._maps: dict[int, np.ndarray] = {}

    def rows(self, seg_id: int, rows: int, dim: int) -> np.ndarray:
        """The first ``rows`` committed rows of a segment."""
        current = self._maps.get(seg_id)
        if current is None or len(current) < rows:
            current = open_rows(segment_path(self.root, seg_id), rows, dim)
            self._maps[seg_id] = current
        return current[:rows]

    def drop(self, seg_id: int) -> None:
        self._maps.pop(seg_id, None)

    def clear(self) -> None:
        self._maps.clear()


class SegmentWriter:
    """Streams rows into a new segment file in bounded buffers (used by compaction)."""

    FLUSH_BYTES = 64 << 20

    def __init__(self, root: Path, row_bytes: int):
        self.root = root
        self.row_bytes = row_bytes
        self.seg_id = -1
        self.rows = 0
        self._flushed = 0
        self._buffer: list[np.ndarray] = []

    def start(self, seg_id: int) -> None:
        self.seg_id, self.rows, self._flushed, self._buffer = seg_id, 0, 0, []

    def write(self, vectors: np.ndarray) -> None:
        self._buffer.append(np.asarray(vectors))
        self.rows += len(vectors)
        if (self.rows - self._flushed) * self.row_bytes >= self.FLUSH_BYTES:
            self._flush()

    def finish(self) -> tuple[int, int]:
        self._flush()
        return self.seg_id, self.rows

    def _flush(self) -> None:
        if self._buffer:
            append(
                segment_path(self.root, self.seg_id),
                self._flushed * self.row_bytes,
                np.concatenate(self._buffer).data,
            )
        self._flushed, self._buffer = self.rows, []
