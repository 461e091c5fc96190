"""Crash safety (SIGKILL during writes), concurrent readers, and corruption detection."""

from __future__ import annotations

import inspect
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.scoring import maxsim
from vrag_compress.store import LocalStore, PageRecord, StoreCorruptError
from vrag_compress.store.local.segments import list_segment_files

DIM = 32
CONFIG = {"dim": DIM, "model_id": "crash/test"}


def vectors_for(page_id: str, version: str | int = 0, dim: int = DIM) -> np.ndarray:
    """Vectors as a pure function of (id, version), shared with the child processes."""
    rng = np.random.default_rng(zlib.crc32(f"{page_id}/{version}".encode()))
    n = int(rng.integers(1, 40))
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


VECTORS_SRC = "import zlib\nimport numpy as np\nDIM = 32\n" + inspect.getsource(vectors_for)
WRITER = (
    VECTORS_SRC
    + """
import json, os, pathlib, random, signal, sys
from vrag_compress.store import LocalStore, PageRecord
from vrag_compress.store.local import segments as seg_mod, writer as writer_mod

path, log_path, seed, crash_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def die_after(owner, name, before=False):
    original = getattr(owner, name)
    def wrapped(*a, **kw):
        if before:
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(*a, **kw)
        os.kill(os.getpid(), signal.SIGKILL)
        return result
    setattr(owner, name, wrapped)

store = LocalStore.open(path)
if crash_at == "after_append":
    die_after(seg_mod, "append")
rng = random.Random(seed)
log = open(log_path, "a")

def note(line):
    log.write(line + "\\n"); log.flush(); os.fsync(log.fileno())

for i in range(10**6):
    ids = store.page_ids()
    r = rng.random()
    if crash_at.startswith("compact") and i == 0 and ids:
        op = {"op": "delete", "ids": ids[:1]}
    elif crash_at.startswith("compact") and i == 1:
        op = {"op": "compact"}
    elif r < 0.5 or not ids:
        n = rng.randint(1, 25)
        op = {"op": "add", "ids": [f"s{seed}-{i}-{j}" for j in range(n)]}
    elif r < 0.7:
        op = {"op": "delete", "ids": rng.sample(ids, min(len(ids), rng.randint(1, 20)))}
    elif r < 0.85:
        op = {"op": "upsert", "ids": rng.sample(ids, min(len(ids), rng.randint(1, 5))),
              "version": f"{seed}-{i}"}
    else:
        op = {"op": "compact"}
    note(json.dumps(op))
    if op["op"] == "add":
        store.add([PageRecord(p, "d", 1, vectors_for(p)) for p in op["ids"]])
    elif op["op"] == "upsert":
        store.upsert([PageRecord(p, "d", 1, vectors_for(p, op["version"])) for p in op["ids"]])
    elif op["op"] == "delete":
        store.delete(page_ids=op["ids"])
    else:
        if crash_at == "compact_before_commit":  # new segments written, catalog not switched
            die_after(writer_mod.PageWriter, "_copy_live")
        elif crash_at == "compact_before_unlink":  # committed, old segments still on disk
            die_after(pathlib.Path, "unlink", before=True)
        store.compact()
    note("DONE")
"""
)


def apply(model: dict[str, str | int], op: dict) -> dict[str, str | int]:
    model = dict(model)
    if op["op"] == "add":
        model.update({p: 0 for p in op["ids"]})
    elif op["op"] == "upsert":
        model.update({p: op["version"] for p in op["ids"]})
    elif op["op"] == "delete":
        for p in op["ids"]:
            model.pop(p, None)
    return model


def replay(log_path: Path, model: dict) -> tuple[dict, dict]:
    """(state after the last finished op, state if the unfinished op also committed)."""
    lines = log_path.read_text().splitlines() if log_path.exists() else []
    pending = None
    for line in lines:
        if line == "DONE":
            model, pending = apply(model, pending), None
        else:
            pending = json.loads(line)
    return model, (apply(model, pending) if pending else model)


def store_state(path: Path) -> dict[str, np.ndarray]:
    with LocalStore.open(path) as store:
        report = store.verify()
        assert report.ok, report.problems
        ids = store.page_ids()
        return {p.page_id: p.vectors for p in store.get(ids)}


def matches(actual: dict[str, np.ndarray], model: dict) -> bool:
    if set(actual) != set(model):
        return False
    return all(
        np.array_equal(actual[p], vectors_for(p, v).astype(np.float16).astype(np.float32))
        for p, v in model.items()
    )


def run_child(
    crash_child, path: Path, log: Path, seed: int, crash_at: str, kill_after: float | None
) -> None:
    """One writer, SIGKILLed ``kill_after`` seconds after it starts or at ``crash_at``."""
    child = crash_child(WRITER, path, log, seed, crash_at)
    try:
        if kill_after is not None:
            time.sleep(kill_after)
            child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL, child.stderr


@pytest.mark.crash
def test_crash_anywhere_keeps_exactly_the_committed_pages(tmp_path, crash_child):
    path = tmp_path / "store"
    LocalStore.create(path, CONFIG).close()
    model: dict = {}
    delays = random.Random(7)
    rounds = [("", delays.uniform(0.35, 1.2)) for _ in range(8)]
    rounds += [
        ("after_append", None),
        ("compact_before_commit", None),
        ("compact_before_unlink", None),
        ("after_append", None),
    ]
    rounds += [("", delays.uniform(0.35, 1.2)) for _ in range(6)]
    torn_tails = 0
    for seed, (crash_at, delay) in enumerate(rounds):
        log = tmp_path / f"log{seed}.txt"
        run_child(crash_child, path, log, seed, crash_at, delay)
        torn_tails += any("torn tail" in n for n in LocalStore.verify_path(path).notes)
        before, after = replay(log, model)
        state = store_state(path)
        assert matches(state, before) or matches(state, after), f"round {seed} ({crash_at})"
        model = before if matches(state, before) else after
        assert not any(
            "torn tail" in n or "orphan" in n for n in LocalStore.verify_path(path).notes
        )  # writer open cleaned up
    assert torn_tails >= 1  # the after_append crashes left torn tails that were ignored
    assert len(model) > 0


def test_reader_sees_only_committed_pages_during_writes(tmp_path):
    path = tmp_path / "store"
    LocalStore.create(path, CONFIG).close()
    writer_src = VECTORS_SRC + textwrap.dedent("""
        import sys, time
        from vrag_compress.store import LocalStore, PageRecord
        store = LocalStore.open(sys.argv[1])
        end = time.time() + float(sys.argv[2])
        i = 0
        while time.time() < end:
            store.add([PageRecord(f"b{i}-{j}", f"b{i}", j + 1, vectors_for(f"b{i}-{j}"))
                       for j in range(5)])
            if i % 3 == 2:
                store.delete(doc_id=f"b{i - 2}")
            if i % 10 == 9:
                store.compact()
            i += 1
        store.close()
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    writer = subprocess.Popen([sys.executable, "-c", writer_src, str(path), "4"], env=env)
    rng = np.random.default_rng(0)
    searches = 0
    try:
        with LocalStore.open(path, readonly=True) as reader:
            while writer.poll() is None:
                q = rng.normal(size=(4, DIM)).astype(np.float32)
                mode = "exact" if searches % 2 else "two_stage"
                for hit in reader.search(q, k=20, mode=mode):
                    ref = maxsim(q, vectors_for(hit.page_id).astype(np.float16).astype(np.float32))
                    assert abs(hit.score - ref) < 1e-3 * max(1.0, abs(ref)), hit.page_id
                ids = reader.page_ids()
                per_doc: dict[str, int] = {}
                for p in ids:
                    per_doc[p.split("-")[0]] = per_doc.get(p.split("-")[0], 0) + 1
                assert set(per_doc.values()) <= {5}, per_doc  # batches appear whole or not at all
                searches += 1
    finally:
        writer.wait(timeout=60)
    assert writer.returncode == 0
    assert searches >= 2


def test_get_beside_a_compacting_writer_never_raises_keyerror(tmp_path):
    """Issue 49.7: `get` read the pages and the segment lengths in two snapshots, so a
    compaction committed between them left a page in a segment the lengths no longer held (a
    raw `KeyError`, a 500 from the page-image route). A writer upserts and compacts for about
    three seconds while a reader fetches the pages; every fetch returns every page whole."""
    path = tmp_path / "store"
    ids = [f"g{i}" for i in range(8)]
    with LocalStore.create(path, CONFIG) as store:
        store.add([PageRecord(i, "g", 1, vectors_for(i)) for i in ids])
    writer_src = VECTORS_SRC + textwrap.dedent("""
        import sys, time
        from vrag_compress.store import LocalStore, PageRecord
        store = LocalStore.open(sys.argv[1])
        end = time.time() + float(sys.argv[2])
        i = 0
        while time.time() < end:
            store.upsert([PageRecord(f"g{i % 8}", "g", 1, vectors_for(f"g{i % 8}"))])
            store.compact()
            i += 1
        store.close()
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    writer = subprocess.Popen([sys.executable, "-c", writer_src, str(path), "3"], env=env)
    gets = 0
    try:
        with LocalStore.open(path, readonly=True) as reader:
            while writer.poll() is None:
                records = reader.get(ids)  # a KeyError fails the test
                assert [r.page_id for r in records] == ids
                for record in records:
                    assert record.vectors.shape == vectors_for(record.page_id).shape
                gets += 1
    finally:
        writer.wait(timeout=60)
    assert writer.returncode == 0
    assert gets >= 10


# ----------------------------------------------------------------- corruption


def build(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with LocalStore.create(path, CONFIG, segment_max_bytes=20_000) as store:
        for start in range(0, 40, 10):
            store.add(
                [
                    PageRecord(
                        f"page-{i:03d}",
                        "doc",
                        i + 1,
                        vectors_for(f"page-{i:03d}"),
                        {"marker": f"MARKER{i:03d}"},
                    )
                    for i in range(start, start + 10)
                ]
            )
        store.delete(page_ids=["page-001"])
    assert len(list_segment_files(path)) > 1
    return path


def flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ mask]))


def catalog_offset_of(path: Path, needle: bytes) -> int:
    data = (path / "catalog.sqlite").read_bytes()
    offset = data.find(needle)
    assert offset > 0
    return offset


def segment_file(path: Path) -> Path:
    return sorted(list_segment_files(path).values())[1]


def page_size(path: Path) -> int:
    return int(sqlite3.connect(path / "catalog.sqlite").execute("PRAGMA page_size").fetchone()[0])


DAMAGES = {
    "segment_flip": (lambda p: flip(segment_file(p), 1001), "seg-"),
    "segment_truncated": (lambda p: os.truncate(segment_file(p), 100), "seg-"),
    "segment_missing": (lambda p: segment_file(p).unlink(), "seg-"),
    "catalog_header": (lambda p: flip(p / "catalog.sqlite", 3), "catalog.sqlite"),
    "catalog_row": (
        lambda p: flip(p / "catalog.sqlite", catalog_offset_of(p, b"MARKER017") + 7),
        "catalog.sqlite",
    ),
    "catalog_row_text": (  # stays valid UTF-8: only the row checksum can notice
        lambda p: flip(p / "catalog.sqlite", catalog_offset_of(p, b"MARKER017") + 8, 0x01),
        "catalog.sqlite",
    ),
    "catalog_btree": (lambda p: flip(p / "catalog.sqlite", 3 * page_size(p)), "catalog.sqlite"),
    "catalog_truncated": (
        lambda p: os.truncate(p / "catalog.sqlite", 3 * page_size(p)),
        "catalog.sqlite",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damage_is_reported_on_open_and_by_verify(tmp_path, damage):
    path = build(tmp_path)
    assert LocalStore.verify_path(path).ok
    hurt, file_part = DAMAGES[damage]
    hurt(path)
    with pytest.raises(StoreCorruptError) as info:
        with LocalStore.open(path, readonly=True) as store:
            store.search(np.ones((1, DIM), dtype=np.float32), mode="exact")
    assert file_part in info.value.file
    report = LocalStore.verify_path(path)
    assert not report.ok and any(file_part in p for p in report.problems), report
    with pytest.raises(StoreCorruptError):
        LocalStore.open(path).close()


def test_flipped_vectors_caught_by_verify_when_open_skips_checksums(tmp_path):
    path = build(tmp_path)
    flip(segment_file(path), 2001)
    with LocalStore.open(path, readonly=True, verify_on_open_max_bytes=0) as store:
        report = store.verify()
        assert not report.ok and "checksum" in report.problems[0]
        with pytest.raises(StoreCorruptError, match="checksum"):
            store.get(store.page_ids())


def test_torn_tail_is_ignored_then_truncated(tmp_path):
    path = build(tmp_path)
    last = sorted(list_segment_files(path).values())[-1]
    size = last.stat().st_size
    with open(last, "ab") as f:
        f.write(os.urandom(999))
    with LocalStore.open(path, readonly=True) as reader:
        report = reader.verify()
        assert report.ok and any("torn tail" in n for n in report.notes)
        assert reader.count() == 39
    LocalStore.open(path).close()
    assert last.stat().st_size == size
    shutil.rmtree(path)


def test_vectors_crc_matches_stored_bytes():
    v = vectors_for("x")
    assert zlib.crc32(v.astype("<f2").tobytes()) == zlib.crc32(
        np.ascontiguousarray(v.astype(np.float16)).data
    )
