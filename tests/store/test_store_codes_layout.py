"""Stores without fp16 vectors (``fp16: false``): the codes are trained on enough staged fp16
rows, optimize does not re-quantise them, verify reports the bytes kept, and a migration keeps
the decoded vectors in full so the copy answers like the source."""

from __future__ import annotations

import importlib.util
import logging

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord
from vrag_compress.store.local import segments as seg
from vrag_compress.store.migrate import compare_stores, copy_store, destination_config
from vrag_compress.store.open import create_store, open_store

DIM = 64
CODES = {"dim": DIM, "model_id": "t/codes", "codes": "2bit", "fp16": False}
CENTRES = np.random.default_rng(0).normal(size=(200, DIM))


def page(i: int, n: int = 50) -> np.ndarray:
    """Clustered unit vectors, like real token embeddings (codes fit them well)."""
    rng = np.random.default_rng(i)
    x = CENTRES[rng.integers(0, len(CENTRES), size=n)] + 0.4 * rng.normal(size=(n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def records(n: int) -> list[PageRecord]:
    return [PageRecord(f"p{i:04d}", "d", i + 1, page(i), {}, text=f"t {i}") for i in range(n)]


def mean_cosine(store: LocalStore, recs: list[PageRecord]) -> float:
    got = store.get([r.page_id for r in recs])
    pairs = zip(got, recs, strict=True)
    return float(np.mean([np.sum(g.vectors * r.vectors, axis=1).mean() for g, r in pairs]))


def segment_files(path) -> list:
    return sorted((path / seg.SEGMENT_DIR).glob("*.f16"))


def test_codes_are_trained_on_enough_staged_rows_not_the_first_small_write(tmp_path):
    """Written 4 pages at a time (like `vrag index`), the codes wait for codes_min_tokens
    vectors: until then pages are fp16 rows (exact), then all of them become codes trained on
    every staged row, as good as training on the whole collection at once."""
    recs = records(160)  # 8,000 vectors
    path = tmp_path / "s"
    with LocalStore.create(path, CODES, codes_min_tokens=5_000) as store:
        for i in range(0, 96, 4):  # 4,800 vectors: below the minimum
            store.add(recs[i : i + 4])
        assert store.index_info() is None and segment_files(path)
        assert store.staged_vectors() == 96 * 50
        assert mean_cosine(store, recs[:8]) > 0.9999  # staged fp16 rows, not codes
        assert store.search(recs[3].vectors[:8], k=1)[0].page_id == "p0003"
        for i in range(96, 160, 4):
            store.add(recs[i : i + 4])
        info = store.index_info()
        assert info is not None and info["trained_tokens"] >= 5_000
        assert store.staged_vectors() == 0
        assert segment_files(path) == []  # the staged rows were dropped after the commit
        report = store.verify()
        assert report.ok and report.segments == 0, report.problems
        batched = mean_cosine(store, recs[:8])
    with LocalStore.create(tmp_path / "all", CODES) as whole:
        whole.add(recs)
        whole.optimize()  # trained on every page at once
        reference = mean_cosine(whole, recs[:8])
    assert batched > 0.95 and abs(batched - reference) < 0.01
    with LocalStore.open(path) as store:  # reopened: codes only, same answers
        assert store.verify().ok and abs(mean_cosine(store, recs[:8]) - batched) < 1e-6


def test_optimize_of_a_codes_only_store_does_not_requantise(tmp_path, caplog):
    with LocalStore.create(tmp_path / "s", CODES) as store:
        recs = records(60)
        store.add(recs)
        first = store.optimize()  # trains from the staged fp16 rows
        before = [r.vectors for r in store.get([r.page_id for r in recs])]
        for _ in range(3):
            assert store.optimize()["trained_tokens"] == first["trained_tokens"]
        after = [r.vectors for r in store.get([r.page_id for r in recs])]
        assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
        with caplog.at_level(logging.WARNING):
            store.optimize(retrain=True)  # asked for: re-encodes the decoded vectors
        assert "re-encodes" in caplog.text
        assert store.verify().ok


def test_verify_reports_the_bytes_a_codes_only_store_keeps(tmp_path):
    with LocalStore.create(tmp_path / "s", CODES) as store:
        store.add(records(20))  # 1,000 vectors
        staged = store.verify().live_bytes
        store.optimize()
        coded = store.verify().live_bytes
        store.delete(page_ids=["p0000", "p0001"])  # 100 vectors, kept as codes until compact
        dead = store.verify().dead_bytes
    assert staged == 1_000 * DIM * 2  # fp16 rows while staged
    assert coded == 1_000 * (2 + DIM * 2 // 8)  # centroid id + 2-bit residuals
    assert dead == 100 * (2 + DIM * 2 // 8)


HAS_QDRANT = importlib.util.find_spec("qdrant_client") is not None
TARGETS = [
    "embedded",
    pytest.param("qdrant", marks=pytest.mark.skipif(not HAS_QDRANT, reason="no qdrant-client")),
]


@pytest.mark.parametrize("target", TARGETS)
def test_migrating_a_codes_only_store_keeps_its_decoded_vectors(tmp_path, target):
    """The copy keeps the decoded vectors in full (no second quantisation), so every probe
    query ranks alike; the destination records no codes it does not have."""
    src_path = tmp_path / "src"
    with LocalStore.create(src_path, CODES) as src:
        recs = records(120)
        for i in range(0, len(recs), 4):
            src.add(recs[i : i + 4])
        src.optimize()
    dst = tmp_path / "dst" if target == "embedded" else f"qdrant+local://{tmp_path / 'q'}"
    with open_store(str(src_path), readonly=True) as source:
        with create_store(str(dst), destination_config(source.config)) as copy:
            copy_store(source, copy, batch=32)
            check = compare_stores(source, copy, queries=20)
            assert copy.config.get("fp16", True) is True
            assert copy.config.get("codes", "none") == "none"
    assert check.ok, check.rank_mismatches[:2]
    assert check.max_score_diff < 1e-4


@pytest.mark.skipif(not HAS_QDRANT, reason="no qdrant-client")
def test_a_qdrant_collection_records_no_codes_it_does_not_keep(tmp_path):
    from vrag_compress.store.qdrant.store import QdrantStore

    url = f"qdrant+local://{tmp_path / 'q'}?collection=c"
    with QdrantStore.create(url, {"dim": DIM, "model_id": "t", "codes": "4bit"}) as store:
        assert "codes" not in store.config and "fp16" not in store.config
        store.update_config(codes="2bit")
        assert "codes" not in store.config
    with QdrantStore.open(url, readonly=True) as store:
        assert "codes" not in store.config


def test_a_failed_training_of_staged_rows_keeps_them_and_retries(tmp_path, monkeypatch, caplog):
    """The add's pages are committed before the codes train: a training error is logged, the
    pages stay staged (fp16, searchable) and the next write trains again."""
    from vrag_compress.store.candidates import files as cand

    real = cand.train
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError("k-means ran out of memory")
        return real(*args, **kwargs)

    monkeypatch.setattr(cand, "train", flaky)
    recs = records(30)
    with LocalStore.create(tmp_path / "s", CODES, codes_min_tokens=1_000) as store:
        with caplog.at_level(logging.WARNING):
            store.add(recs[:25])  # 1,250 vectors: training due, and it fails
        assert "k-means ran out of memory" in caplog.text
        assert store.count() == 25 and store.index_info() is None and store.verify().ok
        assert store.search(recs[4].vectors[:8], k=1)[0].page_id == "p0004"
        store.add(recs[25:])
        assert store.index_info() is not None and store.verify().ok
        assert store.search(recs[4].vectors[:8], k=1)[0].page_id == "p0004"


def test_growth_retrains_a_codes_only_store_only_for_a_new_k(tmp_path):
    """4× growth would retrain an fp16 store; a codes-only store keeps its codes (a retrain
    re-encodes decoded vectors) until the rule's K moved 4×, and says when that will be."""
    recs = [PageRecord(f"p{i:05d}", "d", 1, page(i), {}) for i in range(3_300)]  # 165,000
    opts = {"codes_min_tokens": 40_000, "centroid_min_tokens": 1}
    with LocalStore.create(tmp_path / "s", CODES, **opts) as store:
        store.add(recs[:800])  # 40,000 vectors: the codes train (K 1,024)
        first = store.index_info()
        before = store.get(["p00003"])[0].vectors
        for i in range(800, len(recs), 500):
            store.add(recs[i : i + 500])
        store.wait_for_index()
        info = store.index_info()
        assert info["trained_tokens"] == first["trained_tokens"] == 40_000
        assert info["k"] == 1024 and info["retrain_at_tokens"] > 500_000
        assert np.array_equal(store.get(["p00003"])[0].vectors, before)
        assert store.optimize()["trained_tokens"] == 40_000  # optimize: the same rule


def test_vrag_migrate_of_a_codes_only_store_passes_its_own_check(tmp_path):
    import json

    from typer.testing import CliRunner

    from vrag_compress.cli import app

    src = tmp_path / "src"
    with LocalStore.create(src, CODES) as store:
        recs = records(80)
        for i in range(0, len(recs), 4):
            store.add(recs[i : i + 4])
        store.optimize()  # codes only from here on
    result = CliRunner().invoke(
        app, ["migrate", str(src), str(tmp_path / "dst"), "--json", str(tmp_path / "r.json")]
    )
    report = json.loads((tmp_path / "r.json").read_text())
    assert result.exit_code == 0 and report["ok"] and report["rank_mismatches"] == []
    with LocalStore.open(tmp_path / "dst", readonly=True) as dst:
        assert dst.config["fp16"] is True and dst.config["codes"] == "none"
    result = CliRunner().invoke(app, ["migrate", str(src), str(tmp_path / "kept"), "--keep-codes"])
    with LocalStore.open(tmp_path / "kept", readonly=True) as kept:
        assert kept.config["fp16"] is False and kept.count() == 80
