"""LocalStore with its centroid-code candidate index: search, changes, reopen, verify."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord
from vrag_compress.store.candidates.files import INDEX_DIR

DIM = 32
CONFIG = {"dim": DIM, "model_id": "centroid/test"}
# a small threshold so that tests train real indexes; rerank depth small enough to matter
OPTIONS = {"centroid_min_tokens": 0, "exact_max_tokens": 0, "rerank_depth": 40}


def page_vectors(i: int, version: int = 0) -> np.ndarray:
    rng = np.random.default_rng(1000 * version + i)
    centres = np.random.default_rng(99).normal(size=(48, DIM))
    topics = rng.integers(0, 48, 3)
    v = centres[topics[rng.integers(0, 3, 20)]] + 0.7 * rng.normal(size=(20, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def records(ids, version: int = 0) -> list[PageRecord]:
    return [PageRecord(f"p{i:04d}", f"d{i // 10}", 1, page_vectors(i, version)) for i in ids]


def query_for(i: int, version: int = 0) -> np.ndarray:
    v = page_vectors(i, version)[:6] + 0.05 * np.random.default_rng(i).normal(size=(6, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def ids_of(hits) -> list[str]:
    return [h.page_id for h in hits]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """300 pages with a trained index, built (and closed) once for the module."""
    path = tmp_path_factory.mktemp("centroid") / "s.vrag"
    with LocalStore.create(path, CONFIG, **OPTIONS) as s:
        s.add(records(range(300)))
        s.optimize()
    return path


@pytest.fixture
def store(built, tmp_path):
    """A copy of `built` for each test to write to (building one took most of a test's CPU)."""
    s = LocalStore.open(shutil.copytree(built, tmp_path / "s.vrag"), **OPTIONS)
    yield s
    s.close()


def test_two_stage_uses_the_index_and_matches_exact(store):
    info = store.index_info()
    assert info["k"] >= 16 and info["indexed_pages"] == 300 and info["rerank"] == 40
    agree = 0
    for i in range(0, 300, 15):
        two = store.search(query_for(i), k=10, mode="two_stage")
        exact = store.search(query_for(i), k=10, mode="exact")
        assert two[0].page_id == f"p{i:04d}"
        agree += len(set(ids_of(two)) & set(ids_of(exact)))
        scores = [h.score for h in two]
        assert scores == sorted(scores, reverse=True)
    assert agree / (20 * 10) >= 0.9


def test_adds_deletes_upserts_and_compaction_are_seen_at_once(store):
    store.add(records(range(300, 340)))  # assigned to the existing centroids
    assert store.index_info()["indexed_pages"] == 340
    assert store.search(query_for(321), k=3, mode="two_stage")[0].page_id == "p0321"

    store.delete(page_ids=["p0321", "p0005"])
    for i in (321, 5):
        assert f"p{i:04d}" not in ids_of(store.search(query_for(i), k=10, mode="two_stage"))

    store.upsert(records([7], version=1))
    assert store.search(query_for(7, 1), k=1, mode="two_stage")[0].page_id == "p0007"
    before = {i: ids_of(store.search(query_for(i), k=5, mode="two_stage")) for i in (1, 50, 330)}

    store.compact()
    info = store.index_info()
    assert info["tail_parts"] == 0 and info["indexed_pages"] == 338
    after = {i: ids_of(store.search(query_for(i), k=5, mode="two_stage")) for i in (1, 50, 330)}
    assert after == before
    assert store.verify().ok
    files = {p.name for p in (store.root / INDEX_DIR).iterdir()}
    assert len(files) == len(set(files)) and not any(f.endswith(".tmp") for f in files)


def test_filters_restrict_index_candidates(store):
    hits = store.search(query_for(42), k=5, mode="two_stage", filter={"doc_id": "d4"})
    assert hits[0].page_id == "p0042" and {h.doc_id for h in hits} == {"d4"}
    store.delete(page_ids=store.page_ids())  # an index over no live page answers nothing
    assert store.search(query_for(42), k=5, mode="two_stage", filter={"doc_id": "d4"}) == []
    assert store.search(query_for(42), k=5, mode="two_stage") == []
    assert store.index_info(measure_recall=True)["indexed_pages"] == 300


def test_reopen_maps_the_index_without_rebuilding(store, tmp_path):
    path = store.root
    store.close()
    with LocalStore.open(path, readonly=True, **OPTIONS) as reader:
        assert reader.index_info()["indexed_pages"] == 300
        assert reader.search(query_for(9), k=1, mode="two_stage")[0].page_id == "p0009"


def test_pages_outside_the_index_are_still_found(tmp_path):
    with LocalStore.create(tmp_path / "s", CONFIG, **{**OPTIONS, "centroid_min_tokens": -1}) as s:
        s.add(records(range(100)))
        assert s.index_info() is None  # automatic training switched off
        s.optimize()
        assert s.index_info()["indexed_pages"] == 100
        s.add(records(range(100, 120)))
        assert s.search(query_for(110), k=1, mode="two_stage")[0].page_id == "p0110"


def test_automatic_training_past_the_threshold_runs_in_the_background(tmp_path):
    opts = {**OPTIONS, "centroid_min_tokens": 2000}
    with LocalStore.create(tmp_path / "s", CONFIG, **opts) as s:
        s.add(records(range(50)))  # 1,000 tokens: below the threshold
        s.wait_for_index()
        assert s.index_info() is None
        s.add(records(range(50, 150)))
        s.wait_for_index()
        info = s.index_info()
        assert info is not None and info["trained_tokens"] >= 2000
        assert s.search(query_for(120), k=1, mode="two_stage")[0].page_id == "p0120"


def test_self_measured_recall_and_codes(tmp_path):
    with LocalStore.create(tmp_path / "s", {**CONFIG, "codes": "4bit"}, **OPTIONS) as s:
        s.add(records(range(200)))
        s.optimize()
        info = s.index_info(measure_recall=True)
        assert info["codes"] == "4bit"
        assert 0.8 <= info["recall@10"] <= 1.0 and info["recall_queries"] >= 100


def test_verify_reports_a_damaged_index_file(store):
    path = store.root
    store.close()
    victim = sorted((path / INDEX_DIR).glob("*-codes.npy"))[0]
    data = bytearray(victim.read_bytes())
    data[-2] ^= 0xFF
    victim.write_bytes(bytes(data))
    report = LocalStore.verify_path(path)
    assert not report.ok and any("checksum" in p and victim.name in p for p in report.problems)


def test_writes_and_compaction_during_a_background_training(tmp_path, monkeypatch):
    """Pages written while the centroids train are assigned to the new ones at its commit; a
    compaction meanwhile must not remove the training's uncommitted files."""
    import threading

    from vrag_compress.store.candidates import files as cand

    trained = threading.Event()
    original = cand.train

    def slow_train(*args, **kwargs):
        manifest = original(*args, **kwargs)
        trained.set()
        time.sleep(1.0)  # files written, manifest not committed yet
        return manifest

    monkeypatch.setattr(cand, "train", slow_train)
    opts = {**OPTIONS, "centroid_min_tokens": 2000}
    with LocalStore.create(tmp_path / "s", CONFIG, **opts) as s:
        s.add(records(range(150)))  # crosses the threshold: training starts in the background
        assert trained.wait(120)
        s.add(records(range(150, 170)))
        s.delete(page_ids=["p0003"])
        s.compact()  # removes orphans while the training's files wait for their commit
        s.wait_for_index()
        assert s.verify().ok, s.verify().problems
        info = s.index_info()
        assert info["indexed_pages"] >= s.count() == 169
        assert s.search(query_for(160), k=1, mode="two_stage")[0].page_id == "p0160"
        assert "p0003" not in ids_of(s.search(query_for(3), k=10, mode="two_stage"))


def test_codes_must_fit_the_vector_width(tmp_path):
    from vrag_compress.store import StoreError

    with LocalStore.create(tmp_path / "s", {"dim": 6, "model_id": "m"}, **OPTIONS) as s:
        s.add([PageRecord("a", "d", 1, np.ones((3, 6), np.float32))])
        with pytest.raises(StoreError, match="divisible by 4"):
            s.optimize(codes="2bit")
        with pytest.raises(StoreError, match="codes must be one of"):
            s.optimize(codes="3bit")
        assert s.optimize(codes="4bit")["codes"] == "4bit"


def test_auto_takes_the_cheaper_path_by_the_cost_model(tmp_path, monkeypatch):
    """Without `exact_max_tokens`, `auto` is exact where it touches fewer vectors than
    two-stage would (small or tightly filtered collections) and two-stage elsewhere."""
    from vrag_compress.store.local.search import Searcher

    taken: list[str] = []
    exact, two = Searcher._exact, Searcher._two_stage
    monkeypatch.setattr(
        Searcher, "_exact", lambda self, *a: taken.append("exact") or exact(self, *a)
    )
    monkeypatch.setattr(
        Searcher, "_two_stage", lambda self, *a: taken.append("two") or two(self, *a)
    )
    options = {**OPTIONS, "exact_max_tokens": None, "rerank_depth": None}
    with LocalStore.create(tmp_path / "s", CONFIG, **options) as s:
        s.add(records(range(2000)))
        s.search(query_for(3), k=5)
        assert taken == ["exact"]  # no candidate index yet: exact up to 1M vectors
        s.optimize()
        n_tokens = 2000 * 20
        cost = s._centroids.two_stage_cost(2000, n_tokens)
        assert cost is not None and cost < n_tokens  # 256 reranked pages of 2,000
        taken.clear()
        assert ids_of(s.search(query_for(3), k=5))[0] == "p0003" and taken[0] == "two"
        taken.clear()
        s.search(query_for(3), k=5, filter={"doc_id": "d0"})  # 10 pages pass: exact is cheaper
        assert taken == ["exact"]
    with LocalStore.open(tmp_path / "s", exact_max_tokens=10**9) as s:  # a set limit wins
        taken.clear()
        s.search(query_for(3), k=5)
        assert taken == ["exact"]
