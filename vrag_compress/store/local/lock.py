"""The single-writer lock of a `LocalStore` folder: an flock on ``LOCK`` with the holder's pid."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from vrag_compress.store.base import StoreLockedError

LOCK_NAME = "LOCK"


class WriterLock:
    """An exclusive flock on ``LOCK``; the kernel drops it when the holder dies (no stale locks)."""

    def __init__(self, root: Path):
        self.path = root / LOCK_NAME
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(self.fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StoreLockedError(
                    f"store {root} is open for writing by another handle (pid {holder}); close it "
                    "first or open with readonly=True"
                ) from exc
            raise
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1
