"""Store integrity under an outside attack (issue 32, items 2, 5, 6, 7, 8): damaged codes are
never re-sealed, verify during writes reports no false damage, the meta checksum cannot be
removed, crafted schema objects and missing document rows are found, and damaged centroid files
give store errors (never tracebacks)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord, StoreCorruptError, StoreError
from vrag_compress.store.candidates.files import INDEX_DIR
from vrag_compress.store.local import catalog as cat

DIM = 16
CONFIG = {"dim": DIM, "model_id": "attack/integrity", "compressor": "sap"}
CODES_ONLY = {**CONFIG, "fp16": False, "codes": "4bit"}
OPTIONS = {"centroid_min_tokens": -1, "codes_min_tokens": 0}


def vectors(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    v = rng.normal(size=(10, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def pages(ids, doc: str = "d") -> list[PageRecord]:
    return [PageRecord(f"p{i:04d}", f"{doc}{i % 4}", i + 1, vectors(i)) for i in ids]


def flip(path: Path, start: int, count: int) -> None:
    data = bytearray(path.read_bytes())
    for i in range(start, min(start + count, len(data))):
        data[i] ^= 0xA5
    path.write_bytes(bytes(data))


def index_file(root: Path, kind: str) -> Path:
    return sorted((root / INDEX_DIR).glob(f"*-{kind}.npy"))[0]


def make_store(path: Path, config: dict, n: int = 120) -> Path:
    with LocalStore.create(path, config, **OPTIONS) as store:
        store.add(pages(range(n)))
        store.optimize()
        assert store.index_info() is not None and store.verify().ok
    return path


# --- 32.2: optimize never re-seals damaged codes --------------------------------------------------


def test_optimize_refuses_to_reseal_damaged_codes(tmp_path):
    root = make_store(tmp_path / "s", CODES_ONLY)
    with LocalStore.open(root, readonly=True) as store:
        before = {r.page_id: r.vectors for r in store.get(store.page_ids())}
    resid = index_file(root, "resid")
    flip(resid, 200, 200)  # past the .npy header: the codes themselves
    assert not LocalStore.verify_path(root).ok
    with LocalStore.open(root, **OPTIONS) as store:
        for rewrite in (store.optimize, store.compact, lambda: store.optimize(retrain=True)):
            with pytest.raises(StoreCorruptError, match="keeps no fp16 vectors") as caught:
                rewrite()
            assert caught.value.file == str(resid) and "backup" in str(caught.value)
        with pytest.raises(StoreCorruptError, match=resid.name):
            store.add(pages(range(500, 560)))  # 4x growth: the assignment would merge
    report = LocalStore.verify_path(root)
    assert not report.ok and resid.name in " ".join(report.problems)  # still reported
    with LocalStore.open(root, readonly=True, check_on_open=False) as store:
        after = {r.page_id: r.vectors for r in store.get(store.page_ids())}
    assert sorted(after) == sorted(before)  # nothing lost


def test_an_fp16_store_drops_a_damaged_index_and_optimize_rebuilds_it(tmp_path):
    root = make_store(tmp_path / "s", {**CONFIG, "codes": "4bit"})
    flip(index_file(root, "resid"), 200, 200)
    assert not LocalStore.verify_path(root).ok
    with LocalStore.open(root, **OPTIONS) as store:
        store.optimize()  # the vectors are in the segments: a fresh index from them
        report = store.verify()
        assert report.ok, report.problems
        assert store.search(vectors(7)[:4], k=1, mode="two_stage")[0].page_id == "p0007"


def test_a_damaged_index_names_its_file_and_auto_falls_back_to_exact(tmp_path, caplog):
    """Out-of-range page list entries: two-stage raises a store error naming the file; auto
    searches exactly and its warning gives advice that works for a store without fp16."""
    root = make_store(tmp_path / "s", CODES_ONLY)
    with LocalStore.open(root, readonly=True) as store:
        expected = store.search(vectors(3)[:4], k=3, mode="exact")
    lists = index_file(root, "lists")
    flip(lists, 130, 64)
    with LocalStore.open(root, readonly=True, check_on_open=False, exact_max_tokens=0) as store:
        with pytest.raises(StoreCorruptError, match=lists.name):
            store.search(vectors(3)[:4], k=3, mode="two_stage")
        assert store.search(vectors(3)[:4], k=3, mode="auto") == expected
    assert "searched exactly" in caplog.text and "keeps no fp16 vectors" in caplog.text
    assert "backup" in caplog.text and "then `optimize`" not in caplog.text


def test_a_deleted_index_file_is_named_not_retried(tmp_path):
    root = make_store(tmp_path / "s", {**CONFIG, "codes": "4bit"})
    victim = index_file(root, "lists")
    victim.unlink()
    with LocalStore.open(root, readonly=True, check_on_open=False, exact_max_tokens=0) as store:
        with pytest.raises(StoreCorruptError, match=f"{victim.name}.*missing"):
            store.search(vectors(3)[:4], k=3, mode="two_stage")
        assert store.search(vectors(3)[:4], k=1, mode="auto")[0].page_id == "p0003"


# --- 32.5: verify while a writer rewrites the index never reports false damage -------------------

_CHURN = """
import sys, time
import numpy as np
from vrag_compress.store import LocalStore, PageRecord
rng = np.random.default_rng(1)
store = LocalStore.open(sys.argv[1], centroid_min_tokens=-1)
end = time.time() + float(sys.argv[2])
i = 0
while time.time() < end:
    v = rng.normal(size=(4, 16)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    store.add([PageRecord(f"w{i}-{j}", "w", j + 1, v, {}) for j in range(3)])  # a new tail
    store.delete(page_ids=[f"w{i}-0", f"w{i}-1"])
    if i % 2 == 0:
        store.compact()  # a new base; the old files are unlinked
    i += 1
store.close()
print(i)
"""


@pytest.mark.parametrize("config", [{**CONFIG, "codes": "4bit"}, CODES_ONLY], ids=["fp16", "codes"])
def test_verify_during_index_rewrites_never_reports_damage(tmp_path, config):
    root = make_store(tmp_path / "s", config, n=60)
    seconds = 6.0
    writer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_CHURN), str(root), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    failures, checks = [], 0
    deadline = time.time() + seconds - 0.5
    with LocalStore.open(root, readonly=True) as store:
        while time.time() < deadline:
            try:
                report = store.verify()
                if not report.ok:
                    failures.append(report.problems)
            except Exception as exc:  # was: FileNotFoundError from a replaced index file
                failures.append(f"{type(exc).__name__}: {exc}")
            checks += 1
    out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0 and int(out) > 5
    assert checks > 5 and failures == [], failures[:3]


# --- 32.6: the meta checksum cannot be removed -------------------------------------------------


def edit_catalog(root: Path, *statements: str) -> None:
    conn = sqlite3.connect(root / cat.CATALOG_NAME, isolation_level=None)
    try:
        for sql in statements:
            conn.execute(sql)
    finally:
        conn.close()


@pytest.fixture
def small_store(tmp_path) -> Path:
    root = tmp_path / "small"
    with LocalStore.create(root, CONFIG) as store:
        store.add(pages(range(8)))
    return root


NO_CRC = "DELETE FROM meta WHERE key = 'meta_crc'"


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE meta SET value = replace(value, 'attack/integrity', 'other/model') "
        "WHERE key = 'config'",
        "UPDATE meta SET value = replace(value, '\"sap\"', '\"uot\"') WHERE key = 'config'",
        "UPDATE meta SET value = '2' WHERE key = 'schema_version'",
        "UPDATE meta SET value = '1' WHERE key = 'schema_version'",  # and a text index exists
    ],
    ids=["model_id", "compressor", "schema_2", "schema_1"],
)
def test_a_removed_meta_checksum_is_detected_and_never_resealed(small_store, edit):
    edit_catalog(small_store, NO_CRC, edit)
    report = LocalStore.verify_path(small_store)
    assert not report.ok and "lacks its checksum" in " ".join(report.problems)
    for readonly in (True, False):
        with pytest.raises(StoreCorruptError, match="lacks its checksum"):
            LocalStore.open(small_store, readonly=readonly, check_on_open=False)
    assert not LocalStore.verify_path(small_store).ok  # no write re-sealed it


def test_a_store_that_predates_the_checksum_still_opens(small_store):
    edit_catalog(
        small_store,
        *(
            f"DROP TRIGGER {t}"
            for t in (
                "pages_fts_insert",
                "pages_fts_delete",
                "pages_fts_update",
                "pages_log_insert",
                "pages_log_delete",
                "pages_log_update",
            )
        ),
        "DROP TABLE pages_fts",
        "DROP TABLE text_log",
        NO_CRC,
        "UPDATE meta SET value = '1' WHERE key = 'schema_version'",
    )
    with LocalStore.open(small_store, readonly=True) as store:  # schema 1, before the checksum
        assert store.verify().ok and store.count() == 8
    with LocalStore.open(small_store) as store:  # a writer upgrades and seals it
        assert store.search_many(None, k=1, mode="text", texts=["nothing"]) == [[]]
    report = LocalStore.verify_path(small_store)
    assert report.ok, report.problems


# --- 32.7: crafted schema objects and lost document rows ------------------------------------------


def test_a_crafted_trigger_is_found_before_it_can_fire(small_store):
    edit_catalog(
        small_store,
        "CREATE TRIGGER wipe AFTER DELETE ON pages BEGIN DELETE FROM documents; END",
    )
    report = LocalStore.verify_path(small_store)
    assert not report.ok and "unexpected trigger 'wipe'" in " ".join(report.problems)
    with pytest.raises(StoreCorruptError, match="unexpected trigger 'wipe'"):
        LocalStore.open(small_store)  # a writer never runs with it
    with LocalStore.open(small_store, check_on_open=False) as store:
        store.delete(page_ids=["p0001"])  # the trigger fires: every document row is gone
    problems = " ".join(LocalStore.verify_path(small_store).problems)
    assert "without a document row" in problems and "unexpected trigger" in problems


@pytest.mark.parametrize(
    "sql, found",
    [
        ("DELETE FROM documents WHERE doc_id = 'd1'", "pages belong to documents without"),
        ("CREATE VIEW v AS SELECT * FROM pages", "unexpected view 'v'"),
        ("DROP INDEX pages_doc", "index 'pages_doc' is missing"),
        ("CREATE INDEX extra ON documents(source)", "unexpected index 'extra'"),
        (
            "CREATE TEMP TRIGGER t AFTER INSERT ON pages BEGIN SELECT 1; END",  # temp: harmless
            None,
        ),
    ],
)
def test_schema_objects_and_document_rows_are_checked(small_store, sql, found):
    edit_catalog(small_store, sql)
    report = LocalStore.verify_path(small_store)
    if found is None:
        assert report.ok, report.problems
    else:
        assert not report.ok and found in " ".join(report.problems), report.problems


def test_a_replaced_text_index_trigger_is_found(small_store):
    edit_catalog(
        small_store,
        "DROP TRIGGER pages_fts_delete",
        "CREATE TRIGGER pages_fts_delete AFTER DELETE ON pages BEGIN DELETE FROM documents; END",
    )
    report = LocalStore.verify_path(small_store)
    assert not report.ok and "trigger 'pages_fts_delete' differs" in " ".join(report.problems)


# --- 32.8: damaged centroid files give store errors, never tracebacks ---------------------------


def damage(path: Path, rng: np.random.Generator) -> str:
    """One random damage to ``path``: flipped bytes (header or data), a truncation, garbage
    over the data, or deletion; returns what was done."""
    data = bytearray(path.read_bytes())
    kind = ["flip", "flip_data", "truncate", "garbage", "delete"][int(rng.integers(5))]
    if kind == "delete":
        path.unlink()
        return kind
    if kind == "truncate":
        path.write_bytes(bytes(data[: int(rng.integers(0, len(data)))]))
        return kind
    start = 0 if kind == "flip" else min(128, len(data) - 1)
    at = rng.integers(start, len(data), size=int(rng.integers(1, 12)))
    for i in at:
        data[int(i)] = int(rng.integers(256)) if kind == "garbage" else data[int(i)] ^ 0xFF
    path.write_bytes(bytes(data))
    return kind


def fuzz_reads(root: Path, query: np.ndarray) -> tuple[bool, list[str] | None]:
    """Verify, two-stage, auto and exact search and `get` on a fresh read-only open: whether
    verify passed, and the two-stage result when it ran."""
    with LocalStore.open(root, readonly=True, check_on_open=False, exact_max_tokens=0) as store:
        ok = store.verify().ok
        two = None
        for mode in ("two_stage", "auto", "exact"):
            try:
                hits = [h.page_id for h in store.search(query, k=5, mode=mode)]
                two = hits if mode == "two_stage" else two
            except StoreError:
                pass
        try:
            store.get(store.page_ids()[:5])
        except StoreError:
            pass
    return ok, two


@pytest.mark.parametrize("config", [{**CONFIG, "codes": "4bit"}, CODES_ONLY], ids=["fp16", "codes"])
def test_centroid_file_damage_fuzz_raises_only_store_errors(tmp_path, config):
    root = make_store(tmp_path / "s", config, n=40)
    with LocalStore.open(root, readonly=True) as store:  # a tail part too
        pass
    with LocalStore.open(root, **OPTIONS) as store:
        store.add(pages(range(40, 46)))
    query = vectors(5)[:4]
    _, baseline = fuzz_reads(root, query)
    files = sorted((root / INDEX_DIR).iterdir())
    rng = np.random.default_rng(32)
    for trial in range(50):
        victim = files[int(rng.integers(len(files)))]
        original = victim.read_bytes()
        kind = damage(victim, rng)
        try:
            ok, two = fuzz_reads(root, query)
        except Exception as exc:
            pytest.fail(f"trial {trial}: {kind} of {victim.name}: {type(exc).__name__}: {exc}")
        finally:
            victim.write_bytes(original)
        if ok:  # only a header change that leaves the arrays as they were passes verify
            assert kind == "flip" and two == baseline, (trial, kind, victim.name)


@pytest.mark.parametrize("config", [{**CONFIG, "codes": "4bit"}, CODES_ONLY], ids=["fp16", "codes"])
def test_writes_on_a_damaged_index_raise_store_errors_and_never_reseal(tmp_path, config):
    """An add (a new tail) and a compaction (a new base) on a randomly damaged index: with fp16
    vectors the index is dropped and the store stays whole; without, a store error, and the
    damage is still reported afterwards."""
    built = make_store(tmp_path / "built", config, n=40)
    rng = np.random.default_rng(8)
    files = sorted(p.name for p in (built / INDEX_DIR).iterdir())
    for trial in range(20):
        root = tmp_path / f"t{trial}"
        shutil.copytree(built, root)
        victim = root / INDEX_DIR / files[int(rng.integers(len(files)))]
        kind = damage(victim, rng)
        damaged = not LocalStore.verify_path(root).ok
        try:
            with LocalStore.open(root, check_on_open=False, **OPTIONS) as store:
                store.add(pages(range(100, 104)))
                store.compact()
        except StoreError:
            assert damaged and not config.get("fp16", True), (trial, kind, victim.name)
        except Exception as exc:
            pytest.fail(f"trial {trial}: {kind} of {victim.name}: {type(exc).__name__}: {exc}")
        report = LocalStore.verify_path(root)
        if config.get("fp16", True):
            assert report.ok, (trial, kind, victim.name, report.problems)
        else:
            assert report.ok == (not damaged), (trial, kind, victim.name, report.problems)


def test_cli_search_and_verify_name_a_damaged_index_file(shared_data, tmp_path):
    from typer.testing import CliRunner

    from vrag_compress import VisualIndex
    from vrag_compress.cli import app

    path = tmp_path / "tiny.vrag"
    images = sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())[:4]
    with VisualIndex.create(path, model="tiny-colqwen2", compressor="uot", ratio=0.25) as index:
        index.add(images, progress=False, ocr="never")
    runner = CliRunner()
    assert runner.invoke(app, ["optimize", str(path)]).exit_code == 0
    victim = index_file(path, "lists")
    victim.unlink()
    for args in (["search", str(path), "a chart", "--mode", "two_stage"], ["verify", str(path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        assert victim.name in result.output.replace("\n", "")
