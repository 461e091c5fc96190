"""One durable write for every small file the library replaces: a store pointer, a page asset,
a job record, a candidate array. A reader sees the old file or the new one, never a part of
either, after a crash of the process and (because the file and its folder are fsynced before the
write returns) after a power loss too."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

Content = bytes | str | Callable[[BinaryIO], object]


def atomic_write(
    path: str | os.PathLike[str], content: Content, *, sync_folder: bool = True
) -> None:
    """Write ``content`` (bytes, text as UTF-8, or a function writing to a binary handle) to
    ``path``: a temporary file beside it (``.<name>.<pid>.tmp``), fsynced, renamed over ``path``,
    the folder fsynced. ``sync_folder=False`` leaves the folder's fsync to the caller, who writes
    many files into one folder and syncs it once before committing them. On any error the
    temporary file is removed and ``path`` is left as it was."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(partial, "wb") as handle:
            if callable(content):
                content(handle)
            else:
                handle.write(content.encode() if isinstance(content, str) else content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if sync_folder:
        fsync_folder(target.parent)


def fsync_folder(folder: str | os.PathLike[str]) -> None:
    """Make a rename inside ``folder`` survive a power loss (a no-op where folders cannot be
    opened, as on Windows)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:  # some file systems refuse fsync on a folder; the rename itself still held
        pass
    finally:
        os.close(handle)
