"""kill -9 while the candidate index trains, assigns new pages, or is rewritten by compaction:
the next writer finds the last committed index, no orphan files, and exact-matching results;
with fp16 vectors and without them (the index's 2-bit codes are then the only copy)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord
from vrag_compress.store.candidates.files import INDEX_DIR, manifest_files

DIM = 16
CONFIG = {"dim": DIM, "model_id": "crash/centroids"}
# rerank depth above the page count: two-stage must then equal exact whatever the index holds
OPTIONS = {"centroid_min_tokens": -1, "exact_max_tokens": 0, "rerank_depth": 1000}

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from vrag_compress.store import LocalStore, PageRecord
    from vrag_compress.store.candidates import files as cand

    path, point = sys.argv[1], sys.argv[2]

    def vectors(i):
        rng = np.random.default_rng(i)
        v = rng.normal(size=(12, 16)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    from vrag_compress.testing import kill_after as die_after, kill_before as die_before

    stage = point.startswith("stage_")  # a store without fp16 turns its staged rows into codes
    store = LocalStore.open(path, centroid_min_tokens=-1, codes_min_tokens=100 if stage else 0)
    if point == "train":
        die_after(cand, "train")
        store.optimize(retrain=True)  # a codes-only store retrains only when asked
    elif point == "assign":
        die_after(cand.CandidateIndex, "append")
        store.add([PageRecord(f"new{i}", "d", 1, vectors(1000 + i)) for i in range(5)])
    elif point == "stage_train":  # codes trained, nothing committed yet
        die_after(cand, "train")
        store.add([PageRecord(f"new{i}", "d", 1, vectors(1000 + i)) for i in range(5)])
    elif point == "stage_commit":  # codes committed, staged segment files not yet unlinked
        from vrag_compress.store.local.candidates import CandidateIndexes
        die_before(CandidateIndexes, "_unlink_segments")
        store.add([PageRecord(f"new{i}", "d", 1, vectors(1000 + i)) for i in range(5)])
    elif point == "merge":
        store.delete(page_ids=["p0001", "p0002"])
        die_after(cand.CandidateIndex, "merge")
        store.compact()
    elif point == "after_commit":
        store.delete(page_ids=["p0001", "p0002"])
        die_after(cand, "remove_orphans")  # the merge committed, old files not yet removed
        store.compact()
    print("survived")
    """
)


def vectors(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    v = rng.normal(size=(12, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture(params=["fp16", "codes"])
def store_path(tmp_path, request) -> Path:
    path = tmp_path / "s.vrag"
    config = CONFIG if request.param == "fp16" else {**CONFIG, "codes": "2bit", "fp16": False}
    with LocalStore.create(path, config, **OPTIONS) as store:
        store.add([PageRecord(f"p{i:04d}", "d", 1, vectors(i)) for i in range(200)])
        store.optimize()
    return path


@pytest.mark.crash
@pytest.mark.parametrize("point", ["train", "assign", "merge", "after_commit"])
def test_kill_during_index_work_leaves_a_consistent_store(store_path, point, crash_child):
    run = crash_child(CHILD, store_path, point)
    assert run.wait(timeout=300) == -9, run.stdout + run.stderr
    with LocalStore.open(store_path, **OPTIONS) as store:  # the writer open cleans up
        report = store.verify()
        assert report.ok, report.problems
        info = store.index_info()
        expected = 200 if point in ("train", "assign") else 198  # the delete committed
        assert store.count() == expected and info["indexed_pages"] >= expected
        manifest = store._centroids.manifest_now()
        on_disk = {p.name for p in (store_path / INDEX_DIR).iterdir()}
        assert on_disk == manifest_files(manifest)  # no orphans, nothing missing
        for i in (0, 50, 199):
            q = vectors(i)[:4]
            hits = store.search(q, k=3, mode="two_stage")
            assert [h.page_id for h in hits] == [
                h.page_id for h in store.search(q, k=3, mode="exact")
            ]
        assert "new0" not in store.page_ids()


@pytest.mark.crash
@pytest.mark.parametrize("point", ["stage_train", "stage_commit"])
def test_kill_while_staged_rows_become_codes(tmp_path, point, crash_child):
    """A store without fp16 vectors keeps fp16 rows until it holds enough vectors, then trains
    its codes and drops the rows in one commit: killed before it, the rows are intact; killed
    after it (before the files are unlinked), the codes serve and the files are orphans."""
    path = tmp_path / "codes.vrag"
    with LocalStore.create(path, {**CONFIG, "codes": "2bit", "fp16": False}, **OPTIONS) as store:
        store.add([PageRecord(f"p{i:04d}", "d", 1, vectors(i)) for i in range(20)])
        assert store.index_info() is None  # 240 vectors: staged as fp16 rows
    run = crash_child(CHILD, path, point)
    assert run.wait(timeout=300) == -9, run.stdout + run.stderr
    committed = point == "stage_commit"
    with LocalStore.open(path, **OPTIONS) as store:  # the writer open removes orphans
        report = store.verify()
        assert report.ok and not report.notes, report.problems + report.notes
        assert store.count() == 25  # the add committed its pages (staged) before training
        assert (store.index_info() is not None) == committed
        assert bool(list((path / "segments").iterdir())) != committed
        manifest = store._centroids.manifest_now()
        on_disk = {p.name for p in (path / INDEX_DIR).iterdir()}
        assert on_disk == (manifest_files(manifest) if committed else set())
        kept = store.get(["p0007"])[0].vectors
        if not committed:  # still the exact fp16 rows
            assert np.array_equal(kept, vectors(7).astype(np.float16).astype(np.float32))
        assert store.search(vectors(7)[:6], k=1)[0].page_id == "p0007"
        store.add([PageRecord("a", "d", 1, vectors(77))])
        assert store.search(vectors(77)[:3], k=1)[0].page_id == "a"
        assert store.verify().ok
