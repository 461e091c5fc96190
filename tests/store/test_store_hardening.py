"""The embedded store under attack: writes racing checks, failed opens, concurrent and crashed
creates, hand-edited and crafted catalogs. Each test reproduces a failure an outside attack found.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord, StoreCorruptError, StoreError
from vrag_compress.store.base import StoreExistsError
from vrag_compress.store.local import catalog as cat

DIM = 16
CONFIG = {"dim": DIM, "model_id": "harden/test", "compressor": "sap"}


def pages(n: int, prefix: str = "p", seed: int = 0) -> list[PageRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        v = rng.normal(size=(int(rng.integers(2, 9)), DIM)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        out.append(PageRecord(f"{prefix}{i}", f"doc{i % 3}", i + 1, v, {"i": i}))
    return out


@pytest.fixture
def store_path(tmp_path) -> Path:
    path = tmp_path / "store"
    with LocalStore.create(path, CONFIG) as store:
        store.add(pages(6))
    return path


def edit_catalog(path: Path, sql: str, params: tuple = (), *, reseal: bool = False) -> None:
    """Change the catalog behind the store's back (``reseal``: recompute the meta checksum too,
    as a deliberate forger would)."""
    conn = sqlite3.connect(path / cat.CATALOG_NAME, isolation_level=None)
    try:
        conn.execute(sql, params)
        if reseal:
            cat.seal_meta(conn)
    finally:
        conn.close()


# --- item 5: a failed writer open releases the writer lock --------------------------------------


def test_a_failed_writer_open_does_not_keep_the_lock(store_path, monkeypatch):
    real = cat.connect

    def broken(*args, **kwargs):
        raise StoreError("catalog cannot be opened (simulated)")

    monkeypatch.setattr(cat, "connect", broken)
    with pytest.raises(StoreError, match="simulated"):
        LocalStore.open(store_path)
    monkeypatch.setattr(cat, "connect", real)
    with LocalStore.open(store_path) as store:  # was: "open for writing by another handle"
        assert store.count() == 6


# --- item 6: create is all or nothing, leftovers are recoverable, one of many creators wins -----

_CRASHING_CREATE = """
import os, sys
from vrag_compress.store import LocalStore
from vrag_compress.store.local import catalog
real = catalog.create_catalog
def create_then_die(path, meta):
    real(path, meta)
    os._exit(9)  # killed after building the catalog, before it got its real name
catalog.create_catalog = create_then_die
LocalStore.create(sys.argv[1], {"dim": 16, "model_id": "harden/test"})
"""


@pytest.mark.crash
def test_a_crashed_create_leaves_no_store_and_can_be_redone(tmp_path, crash_child):
    path = tmp_path / "store"
    run = crash_child(textwrap.dedent(_CRASHING_CREATE), path)
    assert run.wait(timeout=120) == 9 and path.is_dir(), run.stderr
    assert not (path / cat.CATALOG_NAME).exists()
    with LocalStore.create(path, CONFIG) as store:  # was: "not an empty directory"
        store.add(pages(2))
    assert sorted(p.name for p in path.iterdir()) == ["LOCK", cat.CATALOG_NAME, "segments", "text"]


def _create(path: str, barrier, results) -> None:
    barrier.wait()
    try:
        LocalStore.create(path, CONFIG).close()
        results.put("created")
    except StoreExistsError:
        results.put("exists")
    except Exception as exc:  # anything else is the bug
        results.put(f"{type(exc).__name__}: {exc}")


def test_concurrent_creators_one_wins_and_the_store_is_whole(tmp_path):
    ctx = multiprocessing.get_context("fork")
    for round_no in range(6):
        path = str(tmp_path / f"store{round_no}")
        barrier, results = ctx.Barrier(4), ctx.Queue()
        workers = [ctx.Process(target=_create, args=(path, barrier, results)) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        outcomes = sorted(results.get(timeout=5) for _ in workers)
        assert outcomes == ["created", "exists", "exists", "exists"], outcomes
        with LocalStore.open(path) as store:
            assert store.config["model_id"] == "harden/test" and store.verify().ok


# --- item 4: checks run on one snapshot; a healthy store is never reported damaged -----------

_CHURN = """
import sys, time
import numpy as np
from vrag_compress.store import LocalStore, PageRecord
rng = np.random.default_rng(1)
store = LocalStore.open(sys.argv[1])
end = time.time() + float(sys.argv[2])
i = 0
while time.time() < end:
    v = rng.normal(size=(4, 16)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    store.add([PageRecord(f"w{i}-{j}", "w", j + 1, v, {}) for j in range(3)])
    store.delete(page_ids=[f"w{i}-0", f"w{i}-1"])
    if i % 3 == 0:
        store.compact()
    i += 1
store.close()
print(i)
"""


def test_open_and_verify_during_writes_never_report_damage(store_path):
    seconds = 8.0
    writer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_CHURN), str(store_path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    failures, checks = [], 0
    deadline = time.time() + seconds - 0.5
    while time.time() < deadline:
        try:
            with LocalStore.open(store_path, readonly=True) as store:
                report = store.verify()
                if not report.ok:
                    failures.append(report.problems)
        except Exception as exc:  # was: "points outside the committed rows", FileNotFoundError
            failures.append(f"{type(exc).__name__}: {exc}")
        checks += 1
    out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0 and int(out) > 10
    assert checks > 10 and failures == [], failures[:3]


# --- item 9: a checksummed meta table, segments never reused, crafted catalogs fail clearly ----


@pytest.mark.parametrize(
    "key, old, new",
    [
        ("config", "model_id", "modeL_id"),
        ("config", "sap", "sip"),
        ("next_segment_id", "2", "1"),
        ("schema_version", str(cat.SCHEMA_VERSION), str(cat.SCHEMA_VERSION - 1)),
    ],
)
def test_one_character_meta_edits_are_detected(store_path, key, old, new):
    edit_catalog(
        store_path, "UPDATE meta SET value = replace(value, ?, ?) WHERE key = ?", (old, new, key)
    )
    report = LocalStore.verify_path(store_path)
    assert not report.ok and "meta table" in " ".join(report.problems)
    with pytest.raises(StoreCorruptError, match="fails its checksum"):
        LocalStore.open(store_path, readonly=True)


def test_a_forged_segment_counter_never_deletes_live_vectors(store_path):
    with LocalStore.open(store_path) as store:
        store.delete(page_ids=["p0"])  # something to compact
    edit_catalog(
        store_path, "UPDATE meta SET value = '1' WHERE key = 'next_segment_id'", reseal=True
    )
    report = LocalStore.verify_path(store_path)
    assert not report.ok and "would reuse live segment ids" in report.problems[0]
    with LocalStore.open(store_path, check_on_open=False) as store:
        store.compact()  # was: the new segment took id 1 and the live one was unlinked
        assert store.count() == 5 and len(store.get(store.page_ids())) == 5
        assert store.verify().ok


@pytest.mark.parametrize(
    "sql, match",
    [
        ("UPDATE meta SET value = '\"1\"' WHERE key = 'schema_version'", "not a whole number"),
        ("UPDATE meta SET value = '[1]' WHERE key = 'config'", "'config' is not a dict"),
        ("DELETE FROM meta WHERE key = 'generation'", "'generation' is missing"),
    ],
)
def test_crafted_meta_gives_a_clear_error(store_path, sql, match):
    edit_catalog(store_path, sql, reseal=True)
    with pytest.raises(StoreCorruptError, match=match):
        LocalStore.open(store_path, readonly=True)


def test_crafted_page_metadata_fails_verify_and_reads_clearly(store_path):
    conn = sqlite3.connect(store_path / cat.CATALOG_NAME, isolation_level=None)
    fields = conn.execute(
        "SELECT page_id, doc_id, page_no, metadata, image_ref, text, segment_id, row_offset, "
        "n_vectors, vec_crc FROM pages WHERE page_id = 'p1'"
    ).fetchone()
    forged = (*fields[:3], "{not json", *fields[4:])
    conn.execute(
        "UPDATE pages SET metadata = ?, row_crc = ? WHERE page_id = 'p1'",
        (forged[3], cat.page_row_crc(*forged)),
    )
    conn.close()
    report = LocalStore.verify_path(store_path)
    assert not report.ok and "page 'p1' has unreadable metadata" in " ".join(report.problems)
    with LocalStore.open(store_path, readonly=True, check_on_open=False) as store:
        with pytest.raises(StoreCorruptError, match="unreadable metadata"):
            store.get(["p1"])
        assert len(store.get(["p2"])) == 1


def test_meta_stays_sealed_through_writes(store_path):
    with LocalStore.open(store_path) as store:
        store.add(pages(3, prefix="q"))
        store.update_config(note="x")
        store.delete(page_ids=["q0"])
        store.compact()
    with LocalStore.open(store_path, readonly=True) as store:
        assert store.verify().ok and store.config["note"] == "x"
    conn = sqlite3.connect(store_path / cat.CATALOG_NAME)
    assert json.loads(conn.execute("SELECT value FROM meta WHERE key='meta_crc'").fetchone()[0])
    conn.close()


# --- item 8: readers work on a full disk or a read-only folder ---------------------------------


def test_readers_fall_back_to_immutable_when_sqlite_cannot_make_its_side_files(
    store_path, monkeypatch
):
    real = cat._connect

    def no_side_files(path, mode, immutable=False):
        conn = real(path, mode, immutable)
        if not immutable:  # what a full disk or a read-only folder does to the -shm file
            conn.close()
            raise sqlite3.OperationalError("disk I/O error")
        return conn

    monkeypatch.setattr(cat, "_connect", no_side_files)
    with LocalStore.open(store_path, readonly=True) as store:
        assert store.verify().ok and store.count() == 6
        assert len(store.search(pages(1, seed=5)[0].vectors, 3)) == 3
    with pytest.raises(StoreError, match="disk I/O error"):
        LocalStore.open(store_path)  # a writer is never silently made immutable


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs (needs root and mount rights; skipped elsewhere)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
        ).returncode
    ):
        pytest.skip("cannot mount a small tmpfs here")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_search_and_verify_work_on_a_really_full_disk(tiny_disk):
    path = tiny_disk / "store"
    with LocalStore.create(path, CONFIG) as store:
        store.add(pages(4))
    fd = os.open(tiny_disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:  # fill every last block
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    with LocalStore.open(path, readonly=True) as store:  # was: "disk I/O error"
        assert store.verify().ok
        assert len(store.search(pages(1, seed=5)[0].vectors, 2)) == 2


def test_a_store_folder_with_odd_bytes_in_its_name_opens(tmp_path):
    """The catalog is opened by URI: '?', '#', '%' and non-UTF-8 bytes must not break it."""
    path = tmp_path / os.fsdecode(b"ind\xe9x #1?mode=rw%20")
    with LocalStore.create(path, CONFIG) as store:
        store.add(pages(2))
    with LocalStore.open(path, readonly=True) as store:
        assert store.count() == 2 and store.verify().ok
