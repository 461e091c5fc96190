"""The BM25 engine of text search (tantivy, store/text_engine.py): it agrees with the page text
after every write, deletes and re-indexing, filters, `verify` / `optimize`, readers of an index
that is behind, a kill -9 at any point of a write, and the shared tokenizer's folding."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord, text_engine
from vrag_compress.store import catalog as cat
from vrag_compress.store.lexical import terms

CONFIG = {"dim": 4, "model_id": "test/text-engine"}
WORDS = "flat plate boundary layer heat transfer shock wave nozzle wing".split()


def page(i: int, text: str | None) -> PageRecord:
    v = np.random.default_rng(i).normal(size=(2, 4)).astype(np.float32)
    return PageRecord(f"p{i:03d}", f"d{i % 3}", i + 1, v, {"team": "ab"[i % 2]}, text=text)


def corpus(n: int = 60) -> list[PageRecord]:
    rng = random.Random(0)
    return [page(i, " ".join(rng.choices(WORDS, k=rng.randint(3, 30)))) for i in range(n)]


def ids(store: LocalStore, text: str, k: int = 10, **kw) -> list[str]:
    return [r.page_id for r in store.search(None, k, mode="text", text=text, **kw)]


def engine_hits(store: LocalStore, text: str, k: int = 10) -> np.ndarray | None:
    """The engine's own answer (None: it is behind and FTS5 would answer)."""
    with store._ctx.catalog.read() as conn:
        hits = store._text.search(conn, terms(text), k, None)
    return None if hits is None else hits[0]


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "s.vrag"
    with LocalStore.create(path, CONFIG) as store:
        store.add(corpus())
    return path


def test_text_search_goes_through_the_engine_and_ranks_like_fts5(store_path):
    with LocalStore.open(store_path, readonly=True) as engine:
        assert engine_hits(engine, "shock nozzle") is not None  # up to date: the engine answers
        with LocalStore.open(store_path, readonly=True, text_engine="fts5") as fts5:
            for query in ("shock nozzle", "flat plate heat", "wing", "layer transfer wave"):
                a, b = ids(engine, query, 20), ids(fts5, query, 20)
                assert len(a) == len(b)
                assert len(set(a[:10]) & set(b[:10])) >= 8, query  # BM25 both, other IDF forms


def test_writes_deletes_and_reindexing_keep_the_engine_exact(store_path):
    with LocalStore.open(store_path) as store:
        store.add([page(100, "zeppelin aerodynamics"), page(101, None)])
        assert ids(store, "zeppelin") == ["p100"]
        store.upsert([page(100, "dirigible flight")])  # re-indexed: old words gone
        assert ids(store, "zeppelin") == [] and ids(store, "dirigible") == ["p100"]
        store.delete(page_ids=["p100"])
        store.delete(doc_id="d0")
        assert ids(store, "dirigible") == []
        assert not {i for i in ids(store, "plate wing shock", 100)} & {
            f"p{i:03d}" for i in range(0, 60, 3)
        }
        store.compact()
        assert engine_hits(store, "wing") is not None
        report = store.verify()
        assert report.ok, report.problems


def test_filters_are_exact_even_when_the_filtered_pages_rank_low(tmp_path):
    # 40 pages full of "wing", 3 pages of team b with one "wing" among many other words: the
    # unfiltered top 40 never reaches them, so the over-fetch falls back to a filtered query
    path = tmp_path / "f.vrag"
    with LocalStore.create(path, CONFIG) as store:
        store.add(
            [
                PageRecord(f"a{i}", "da", 1, page(i, None).vectors, {"team": "a"}, text="wing " * 5)
                for i in range(40)
            ]
        )
        store.add(
            [
                PageRecord(
                    f"b{i}",
                    "db",
                    1,
                    page(i, None).vectors,
                    {"team": "b"},
                    text="wing " + "flap " * (10 + i),
                )
                for i in range(3)
            ]
        )
        hits = store.search(None, 2, mode="text", text="wing", filter={"team": "b"})
        assert [h.page_id for h in hits] == ["b0", "b1"]
        assert hits[0].score > hits[1].score > 0
        assert ids(store, "wing", 5, filter={"team": "c"}) == []
    with LocalStore.open(path, readonly=True, text_engine="fts5") as fts5:
        assert ids(fts5, "wing", 2, filter={"team": "b"}) == ["b0", "b1"]


def test_zero_width_space_and_soft_hyphen_do_not_split_words(tmp_path):
    assert terms("hyper\u00adsonic zero\u200bwidth \ufeffword") == [
        "hypersonic",
        "zerowidth",
        "word",
    ]
    with LocalStore.create(tmp_path / "z.vrag", CONFIG) as store:
        store.add([page(0, "hyper\u00adsonic flow"), page(1, "zero\u200bwidth gap")])
        assert ids(store, "hypersonic") == ["p000"] and ids(store, "zerowidth") == ["p001"]
        assert ids(store, "sonic") == [] and ids(store, "width") == []
        assert ids(store, "hypersonic", fts_syntax=True) == ["p000"]  # FTS5 folds them the same
        assert store.verify().ok


def _tamper(path: Path, pid: int) -> None:
    """Drop one page's document from the engine index, keeping its stamp (a damaged index)."""
    import tantivy

    index = tantivy.Index(text_engine._schema(), path=str(path / text_engine.ENGINE_DIR))
    writer = index.writer(15_000_000, 1)
    writer.delete_documents_by_query(tantivy.Query.term_query(text_engine._schema(), "pid", pid))
    writer.commit()


def test_verify_finds_an_engine_index_out_of_step_and_optimize_rebuilds_it(store_path):
    _tamper(store_path, 5)
    report = LocalStore.verify_path(store_path)
    assert not report.ok
    assert "1 pages missing" in " ".join(report.problems), report.problems
    with LocalStore.open(store_path) as store:
        store.optimize()
        assert store.verify().ok


def test_a_damaged_engine_index_is_rebuilt_by_the_writer(store_path):
    for f in (store_path / text_engine.ENGINE_DIR).iterdir():
        f.write_bytes(b"garbage")
    with LocalStore.open(store_path, readonly=True) as reader:  # FTS5 answers meanwhile
        assert len(ids(reader, "nozzle")) == 10
    with LocalStore.open(store_path) as store:
        assert engine_hits(store, "nozzle") is not None and store.verify().ok


def test_a_reader_of_an_index_behind_uses_fts5_and_sees_the_catch_up(store_path):
    with LocalStore.open(store_path, readonly=True) as reader:
        assert ids(reader, "zeppelin") == []
        with LocalStore.open(store_path) as writer:
            writer._text.catch_up = lambda: None  # the engine falls behind
            writer._writer.write_pages([page(100, "zeppelin")], (), replace=False)
            assert engine_hits(reader, "zeppelin") is None  # behind: not used
            assert ids(reader, "zeppelin") == ["p100"]  # FTS5 answers, exact
            assert reader.verify().ok  # pages still to catch up are not a mismatch
            del writer._text.catch_up
            writer.add([page(101, "zeppelin zeppelin")])
        assert list(engine_hits(reader, "zeppelin")) != []  # caught up: the engine again
        assert ids(reader, "zeppelin") == ["p101", "p100"]


def test_a_schema_3_store_gains_the_change_log_and_the_engine(store_path):
    conn = cat.connect(store_path / cat.CATALOG_NAME, readonly=False)
    for trigger in ("pages_log_insert", "pages_log_delete", "pages_log_update"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE text_log")
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    cat.seal_meta(conn)
    conn.close()
    with LocalStore.open(store_path, readonly=True) as reader:  # no log: FTS5
        assert len(ids(reader, "wing")) == 10 and reader.verify().ok
    with LocalStore.open(store_path) as store:
        store.add([page(100, "zeppelin")])
        assert ids(store, "zeppelin") == ["p100"] and engine_hits(store, "zeppelin") is not None
        assert store.verify().ok


# --- kill -9 at any point of a write --------------------------------------------------------

KILL_AT = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from vrag_compress.store import LocalStore, PageRecord
    from vrag_compress.store import text_engine as te

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    point = sys.argv[2]
    store = LocalStore.open(sys.argv[1])
    store.delete(page_ids=["p001"])
    if point == "after_catalog_commit":
        te.TextEngine.catch_up = lambda self: die()
    elif point == "inside_engine_write":  # documents added, the engine commit not made
        original = te.page_terms
        te.page_terms = lambda text: die() if "zeppelin" in (text or "") else original(text)
    else:  # "after_engine_commit"
        write = te.TextEngine._write
        te.TextEngine._write = lambda self, *a: (write(self, *a), die())
    v = np.ones((2, 4), dtype=np.float32)
    store.add([PageRecord("new", "dn", 1, v, text="zeppelin aerodynamics")])
    """
)


def assert_text_agrees(path: Path) -> None:
    """Every stored page is found by its text exactly as FTS5 (the source of truth) finds it
    (every match: the two rank alike but not identically),
    through a reader and through a writer (which catches the engine up first)."""
    with LocalStore.open(path, readonly=True, text_engine="fts5") as truth:
        want = {q: ids(truth, q, 100_000) for q in ("zeppelin", "plate wing", "nozzle")}
        n = truth.count()
    for readonly in (True, False):
        with LocalStore.open(path, readonly=readonly) as store:
            assert store.count() == n
            for q, expected in want.items():
                got = ids(store, q, 100_000)
                assert sorted(got) == sorted(expected), (readonly, q)
            report = store.verify()
            assert report.ok, report.problems
    with LocalStore.open(path, readonly=True) as reader:  # the writer caught it up
        assert engine_hits(reader, "plate") is not None


@pytest.mark.parametrize(
    "point", ["after_catalog_commit", "inside_engine_write", "after_engine_commit"]
)
def test_a_kill_at_each_step_of_a_write_leaves_text_and_pages_agreeing(store_path, point):
    run = subprocess.run(
        [sys.executable, "-c", KILL_AT, str(store_path), point], capture_output=True, timeout=120
    )
    assert run.returncode == -9, run.stderr.decode()
    assert_text_agrees(store_path)
    with LocalStore.open(store_path) as store:
        assert ids(store, "zeppelin") == ["new"]


WRITE_FOREVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from vrag_compress.store import LocalStore, PageRecord

    store = LocalStore.open(sys.argv[1])
    v = np.ones((2, 4), dtype=np.float32)
    i = 0
    print("ready", flush=True)
    while True:
        store.add([PageRecord(f"w{i}-{j}", "dw", 1, v, text=f"zeppelin nozzle w{i}x{j}")
                   for j in range(20)])
        store.upsert([PageRecord(f"w{i}-0", "dw", 1, v, text="plate wing")])
        store.delete(page_ids=[f"w{i}-1"])
        i += 1
    """
)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_writer_killed_at_a_random_moment_leaves_text_and_pages_agreeing(store_path, seed):
    child = subprocess.Popen(
        [sys.executable, "-c", WRITE_FOREVER, str(store_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        time.sleep(random.Random(seed).uniform(0.3, 2.0))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    assert child.returncode == -9, child.stderr.read().decode() if child.stderr else ""
    assert_text_agrees(store_path)


def test_an_unknown_text_engine_is_refused_by_name(store_path):
    from vrag_compress.store.validate import StoreInputError

    with pytest.raises(StoreInputError, match="text_engine must be one of"):
        LocalStore.open(store_path, readonly=True, text_engine="lucene")


def test_a_failed_engine_write_searches_fts5_and_the_next_write_catches_up(store_path, monkeypatch):
    with LocalStore.open(store_path) as store:
        real = text_engine.page_terms

        def fail_on_second(text: str | None) -> str:
            if text == "blimp two":
                raise OSError("disk full")
            return real(text)

        monkeypatch.setattr(text_engine, "page_terms", fail_on_second)
        store.add([page(100, "blimp one"), page(101, "blimp two")])  # committed; engine failed
        assert sorted(ids(store, "blimp")) == ["p100", "p101"]  # FTS5 answers the writer
        monkeypatch.setattr(text_engine, "page_terms", real)
        store.add([page(102, "airship")])  # catches up both writes
        assert sorted(ids(store, "blimp")) == ["p100", "p101"]
        report = store.verify()
        assert report.ok, report.problems


def test_deletes_by_fresh_writers_hold_while_segments_merge(store_path):
    """Each open is a new engine writer whose first operation is a delete (the catch-up's or
    the user's); across enough one-page commits for tantivy to merge segments, every deleted
    page stays deleted in the engine."""
    for i in range(12):
        with LocalStore.open(store_path) as store:
            store.add([page(200 + i, f"zeppelin round{i}")])
            store.delete(page_ids=[f"p{i:03d}", f"p{200 + i - 1:03d}"])
    with LocalStore.open(store_path) as store:
        assert ids(store, "zeppelin") == ["p211"]
        assert engine_hits(store, "zeppelin") is not None
        report = store.verify()
        assert report.ok, report.problems
    assert_text_agrees(store_path)
