"""The one durable write: old file or new file, never a part, and fsynced before it returns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vrag_compress import durable
from vrag_compress.durable import atomic_write
from vrag_compress.store.open import read_store_pointer, write_store_pointer

URLS = ("qdrant://first-host:6333/pages", "qdrant://second-host:6334/other-pages")

WRITER = """
import sys
from vrag_compress.store.open import write_store_pointer
folder, urls = sys.argv[1], sys.argv[2:]
print("ready", flush=True)
i = 0
while True:
    write_store_pointer(folder, urls[i % 2])
    i += 1
"""


def test_text_bytes_and_a_writer_function_all_land(tmp_path: Path):
    atomic_write(tmp_path / "a" / "text.json", '{"x": "é"}')
    atomic_write(tmp_path / "bytes.bin", b"\x00\x01")
    atomic_write(tmp_path / "fn.bin", lambda handle: handle.write(b"written"))
    assert (tmp_path / "a" / "text.json").read_text(encoding="utf-8") == '{"x": "é"}'
    assert (tmp_path / "bytes.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "fn.bin").read_bytes() == b"written"
    assert sorted(p.name for p in tmp_path.rglob(".*")) == []  # no temporary file left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path):
    target = tmp_path / "record.json"
    atomic_write(target, "old")

    def half_then_fail(handle) -> None:
        handle.write(b"new but unfin")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_the_file_and_its_folder_are_fsynced_before_the_write_returns(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(durable.os, "fsync", recording_fsync)
    write_store_pointer(tmp_path, URLS[0])
    pointer_file = next(p for p in tmp_path.iterdir())
    # the temporary file's data first (it becomes the pointer by rename), then the folder
    assert len(synced) == 2 and Path(synced[1]) == tmp_path
    assert Path(synced[0]).parent == tmp_path and Path(synced[0]).name != pointer_file.name


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_writer_killed_mid_write_leaves_a_whole_pointer(tmp_path: Path):
    """kill -9 a process rewriting the pointer as fast as it can: at every kill the pointer reads
    back as one of the two URLs it was writing, never a torn or empty file."""
    write_store_pointer(tmp_path, URLS[0])
    for round_no in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), *URLS],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(0.05 + 0.03 * round_no)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        pointer = read_store_pointer(tmp_path)
        assert pointer is not None and str(pointer) in URLS


def test_a_writer_of_many_files_can_sync_their_folder_once(tmp_path, monkeypatch):
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(durable.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    for name in ("a.npy", "b.npy", "c.npy"):
        atomic_write(tmp_path / name, b"x", sync_folder=False)
    assert len(synced) == 3  # the three files' data, not the folder yet
    durable.fsync_folder(tmp_path)
    assert len(synced) == 4
