"""The BM25 engine of text search (tantivy, local/text_engine.py): it agrees with the page text
after every write, deletes and re-indexing, filters, `verify` / `optimize`, readers of an index
that is behind, a kill -9 at any point of a write, and the shared tokenizer's folding."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord
from vrag_compress.store.lexical import terms
from vrag_compress.store.local import catalog as cat
from vrag_compress.store.local import text_engine
from vrag_compress.store.local.text_files import TextIndexError

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
    from vrag_compress.store.local import text_engine as te

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


@pytest.mark.crash
@pytest.mark.parametrize(
    "point", ["after_catalog_commit", "inside_engine_write", "after_engine_commit"]
)
def test_a_kill_at_each_step_of_a_write_leaves_text_and_pages_agreeing(
    store_path, point, crash_child
):
    run = crash_child(KILL_AT, store_path, point)
    assert run.wait(timeout=120) == -9, run.stderr
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


@pytest.mark.crash
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


# --- damaged engine files (issue 49.3) -------------------------------------------------------

QUERIES = ("shock nozzle", "flat plate heat", "wing", "layer transfer wave", "boundary")


@pytest.fixture
def segmented_path(tmp_path: Path) -> Path:
    """A store whose engine index has three segments, two with deletes files."""
    path = tmp_path / "seg.vrag"
    with LocalStore.create(path, CONFIG) as store:
        store.add(corpus()[:30])
        store.add(corpus()[30:])
        store.delete(page_ids=["p003"])
    return path


def engine_answers(path: Path) -> list[tuple[list[int], list[float]]]:
    """Tantivy's own answer (pids, BM25 scores) straight from the files, no store checks."""
    import tantivy

    index = tantivy.Index(text_engine._schema(), path=str(path / text_engine.ENGINE_DIR))
    searcher = index.searcher()
    out = []
    for text in QUERIES:
        should = [
            (tantivy.Occur.Should, tantivy.Query.term_query(text_engine._schema(), "text", w))
            for w in terms(text)
        ]
        pids, scores = text_engine._top(searcher, tantivy.Query.boolean_query(should), 100)
        out.append((pids.tolist(), np.round(scores, 5).tolist()))
    return out


def flip_byte(path: Path, offset: int, mask: int) -> None:
    """XOR one byte in place (same file, same size, as a disk would damage it)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))


def edit_meta(path: Path, edit) -> Path:  # noqa: ANN001
    meta_path = path / text_engine.ENGINE_DIR / "meta.json"
    meta = json.loads(meta_path.read_text())
    edit(meta)
    meta_path.write_text(json.dumps(meta, indent=2))
    return meta_path


def test_verify_finds_every_engine_file_flip_that_changes_search(segmented_path, tmp_path):
    """Seeded single-byte flips in every engine file: each one that changes which pages a text
    search returns or their BM25 scores, or makes tantivy fail or panic, is a `verify` problem
    naming a file of the engine index (before: 13 of 98 such flips passed verify, and a panic
    escaped it as ``pyo3_runtime.PanicException``)."""
    base = engine_answers(segmented_path)
    text_dir = segmented_path / text_engine.ENGINE_DIR
    files = sorted(  # segment names are random: order by kind and size
        (f for f in text_dir.iterdir() if not f.name.startswith(".tantivy")),
        key=lambda f: (f.suffix, f.stat().st_size, f.name),
    )
    rng = random.Random(49)
    effects: dict[str, int] = {}
    for name in [f.name for f in files for _ in range(3)]:
        damaged = tmp_path / "damaged"
        shutil.rmtree(damaged, ignore_errors=True)
        shutil.copytree(segmented_path, damaged)
        target = damaged / text_engine.ENGINE_DIR / name
        flip_byte(target, rng.randrange(target.stat().st_size), rng.randrange(1, 256))
        try:
            effect = "same" if engine_answers(damaged) == base else "changed"
        except BaseException as exc:  # noqa: BLE001 (a Rust panic is a BaseException)
            effect = type(exc).__name__
        effects[effect] = effects.get(effect, 0) + 1
        report = LocalStore.verify_path(damaged)
        if effect != "same":
            assert not report.ok, (name, effect)
            assert str(damaged / text_engine.ENGINE_DIR) in " ".join(report.problems)
    assert effects.get("changed", 0) >= 1 and effects.get("PanicException", 0) >= 1, effects


def segment(meta: dict, deletes: bool) -> dict:
    return next(s for s in meta["segments"] if (s["deletes"] is not None) == deletes)


@pytest.mark.parametrize(
    "edit, changes_scores",
    [
        (lambda m: segment(m, True).update(max_doc=segment(m, True)["max_doc"] + 5), True),
        (lambda m: segment(m, False).update(max_doc=segment(m, False)["max_doc"] + 8), True),
        (lambda m: segment(m, True)["deletes"].update(num_deleted_docs=0), None),
    ],
    ids=["more_documents", "more_documents_no_deletes", "deletes_dropped"],
)
def test_a_damaged_meta_json_is_named_by_verify(segmented_path, edit, changes_scores):
    """``meta.json`` has no checksum of its own: its counts are checked against the segment
    files (before, `verify` passed all three; the grown counts changed the BM25 scores, the
    dropped deletes bring back deleted documents: a stamp, or a deleted page's)."""
    base = engine_answers(segmented_path)
    meta_path = edit_meta(segmented_path, edit)
    if changes_scores is not None:
        assert (engine_answers(segmented_path) != base) == changes_scores
    report = LocalStore.verify_path(segmented_path)
    assert not report.ok and str(meta_path) in report.problems[0], report.problems
    assert "optimize" in report.problems[0]


def test_auto_engine_falls_back_to_fts5_on_damage_and_says_how_to_repair(segmented_path, caplog):
    """A flipped term dictionary: engine mode ``auto`` warns once (the file, `vrag optimize`)
    and answers as FTS5 does; ``tantivy`` raises the store error naming the file; a writer
    rebuilds the index from the page text (before: the damaged index answered)."""
    with LocalStore.open(segmented_path, readonly=True, text_engine="fts5") as fts5:
        truth = {q: ids(fts5, q, 100) for q in QUERIES}
    index_file = next((segmented_path / text_engine.ENGINE_DIR).glob("*.term"))
    flip_byte(index_file, 20, 0x5A)
    with LocalStore.open(segmented_path, readonly=True) as reader:  # text_engine="auto"
        assert {q: ids(reader, q, 100) for q in QUERIES} == truth
    warnings = [r.message for r in caplog.records if "answers from FTS5" in r.message]
    assert len(warnings) == 1  # once, not once a query
    assert index_file.name in warnings[0] and "vrag optimize" in warnings[0]
    with LocalStore.open(segmented_path, readonly=True, text_engine="tantivy") as strict:
        with pytest.raises(TextIndexError, match=index_file.name) as caught:
            ids(strict, "wing")
        assert caught.value.file == str(index_file)
    with LocalStore.open(segmented_path) as writer:  # a writer rebuilds it from the pages
        assert engine_hits(writer, "wing") is not None
        report = writer.verify()
        assert report.ok, report.problems
    with LocalStore.open(segmented_path, readonly=True, text_engine="tantivy") as reader:
        assert all(sorted(ids(reader, q, 100)) == sorted(truth[q]) for q in QUERIES)


def tantivy_panic(tmp_path: Path) -> BaseException:
    """A real ``pyo3_runtime.PanicException`` from tantivy (its class cannot be imported): a
    segment whose ``meta.json`` claims more documents than its fast fields hold."""
    import tantivy

    path = tmp_path / "panic"
    path.mkdir()
    writer = tantivy.Index(text_engine._schema(), path=str(path)).writer(15_000_000, 1)
    for i in range(1, 40):
        doc = tantivy.Document()
        doc.add_unsigned("pid", i * 7919 % 1009)  # not a line: the column is bit-packed
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()
    meta = json.loads((path / "meta.json").read_text())
    meta["segments"][0]["max_doc"] = 100
    (path / "meta.json").write_text(json.dumps(meta))
    try:
        searcher = tantivy.Index(text_engine._schema(), path=str(path)).searcher()
        hits = searcher.search(tantivy.Query.all_query(), 200).hits
        searcher.fast_field_values("pid", [a for _, a in hits])
    except BaseException as exc:  # noqa: BLE001
        assert type(exc).__name__ == "PanicException" and not isinstance(exc, Exception)
        return exc
    raise AssertionError("tantivy did not panic")


def test_a_panic_during_a_search_becomes_a_store_error_naming_the_file(
    segmented_path, tmp_path, monkeypatch, caplog
):
    """Tantivy panics on many damaged files (a Rust panic: a `BaseException`). A real panic,
    raised where tantivy scores the query, becomes a `TextIndexError` naming the index folder
    while no file fails its check, and naming the damaged file once one does (postings
    inverted under open readers, whose cached checks miss it); ``auto`` warns and answers from
    FTS5 (before: the panic passed every ``except Exception``)."""
    panic = tantivy_panic(tmp_path)
    query = "plate wing shock boundary"
    with LocalStore.open(segmented_path, readonly=True, text_engine="fts5") as fts5:
        expected = ids(fts5, query, 100)
    postings = sorted((segmented_path / text_engine.ENGINE_DIR).glob("*.idx"))[0]
    with LocalStore.open(segmented_path, readonly=True, text_engine="tantivy") as strict:
        with LocalStore.open(segmented_path, readonly=True) as auto:
            assert engine_hits(auto, "wing") is not None  # both checked the files, opened them
            assert ids(strict, "wing") != []

            def panicking(*args: object) -> None:
                raise panic

            monkeypatch.setattr(text_engine, "_top", panicking)
            with pytest.raises(TextIndexError, match="tantivy panicked") as caught:
                ids(strict, query, 100)
            assert caught.value.file == str(segmented_path / text_engine.ENGINE_DIR)
            for offset in range(postings.stat().st_size - 100):  # the footer stays whole
                flip_byte(postings, offset, 0xFF)
            with pytest.raises(TextIndexError) as caught:
                ids(strict, query, 100)
            assert caught.value.file == str(postings), caught.value
            assert ids(auto, query, 100) == expected
    assert postings.name in caplog.text and "answers from FTS5" in caplog.text
