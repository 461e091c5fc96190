"""Opening a store and its first answer read nothing that grows with the collection: no SQLite
quick_check or per-row checksum pass at open (those are `verify`'s above a small size), no copy
of the token matrix; the rows a search returns are still checked, and damage stays an error."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord
from vrag_compress.store.base import StoreCorruptError
from vrag_compress.store.candidates.token_rows import SegmentTokens
from vrag_compress.store.local import catalog as cat
from vrag_compress.store.local.segments import list_segment_files

DIM = 16
CONFIG = {"dim": DIM, "model_id": "open/test"}
LARGE = {"verify_on_open_max_bytes": 1}  # behave like a store too big for checks at open


def vectors(i: int) -> np.ndarray:
    v = np.random.default_rng(i).normal(size=(5 + i % 4, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def build(path: Path, n: int = 60, optimize: bool = False) -> Path:
    """A store spread over several segments, with a deleted and a replaced page (with
    ``optimize``: then compacted, with a candidate index)."""
    with LocalStore.create(path, CONFIG, segment_max_bytes=2_000) as store:
        for start in range(0, n, 10):
            store.add(
                [PageRecord(f"p{i:03d}", "d", i + 1, vectors(i)) for i in range(start, start + 10)]
            )
        store.delete(page_ids=["p003"])
        store.upsert([PageRecord("p005", "d", 6, vectors(999))])
        assert len(list_segment_files(path)) > 1
        if optimize:
            store.optimize()
    return path


def test_open_and_first_answers_run_no_whole_collection_check(tmp_path, monkeypatch):
    path = build(tmp_path / "s")

    def forbidden(*args, **kwargs):
        raise AssertionError("a check over the whole collection ran at open or search")

    for name in ("integrity_problems", "pages_for_check", "documents_for_check", "live_vectors"):
        monkeypatch.setattr(cat, name, forbidden)
    with LocalStore.open(path, readonly=True, **LARGE) as store:
        assert store.search(vectors(7)[:2], k=3, mode="exact")[0].page_id == "p007"
    with LocalStore.open(path, **LARGE) as store:  # a writer's open too
        assert store.search(vectors(8)[:2], k=3)[0].page_id == "p008"


def test_first_two_stage_answer_copies_no_token_matrix(tmp_path):
    path = build(tmp_path / "s", n=200, optimize=True)
    with LocalStore.open(path, readonly=True, rerank_depth=20) as store:
        assert store.index_info() is not None
        hits = store.search(vectors(42)[:3], k=5, mode="two_stage")
        assert hits[0].page_id == "p042"
        tokens = store._snapshots.current().tokens
        assert isinstance(tokens, SegmentTokens)
        assert 0 < tokens.cached_rows <= 20 * 8 < len(tokens)  # the reranked pages' rows only


@pytest.mark.parametrize("cache", [0, 1 << 30])
def test_exact_search_over_segment_maps_matches_the_stored_vectors(tmp_path, cache):
    """Pages spread over segments (out of order after an upsert) score as their vectors do,
    whether the exact pass reads the maps chunk by chunk or keeps an fp32 copy."""
    path = build(tmp_path / "s")
    with LocalStore.open(path, readonly=True, cache_fp32_max_bytes=cache, chunk_tokens=37) as s:
        ids = s.page_ids()
        stored = s.get(ids)
        q = vectors(11)[:3]
        want = [float((q @ r.vectors.T).max(axis=1).sum()) for r in stored]
        hits = s.search(q, k=len(ids), mode="exact")
        got = {h.page_id: h.score for h in hits}
        assert [got[i] for i in ids] == pytest.approx(want, rel=1e-5, abs=1e-5)
        filtered = s.search(q, k=3, mode="exact", filter={"page_no": {"$gte": 40}})
        assert all(h.page_no >= 40 for h in filtered)
        kept = s._snapshots.current().tokens.cached_rows
        assert kept == (len(s._snapshots.current().tokens) if cache else 0)


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def _location(path: Path, page_id: str) -> tuple[int, int]:
    with sqlite3.connect(path / cat.CATALOG_NAME) as conn:
        row = conn.execute(
            "SELECT segment_id, row_offset FROM pages WHERE page_id = ?", (page_id,)
        ).fetchone()
    return int(row[0]), int(row[1])


def test_damaged_vectors_of_a_hit_fail_the_search_not_the_open(tmp_path):
    path = build(tmp_path / "s")
    sid, offset = _location(path, "p021")
    _flip(path / "segments" / f"seg-{sid:08d}.f16", offset * DIM * 2 + 5)
    with LocalStore.open(path, readonly=True, **LARGE) as store:  # open stays O(1)
        assert store.search(vectors(30)[:2], k=1)[0].page_id == "p030"  # an intact hit
        with pytest.raises(StoreCorruptError, match="p021") as info:
            store.search(vectors(21)[:2], k=3, mode="exact")
        assert f"seg-{sid:08d}" in info.value.file
        assert not store.verify().ok
    with pytest.raises(StoreCorruptError):  # a small store is still checked in full at open
        LocalStore.open(path, readonly=True).close()


def test_damaged_row_of_a_hit_fails_the_search(tmp_path):
    path = build(tmp_path / "s")
    with sqlite3.connect(path / cat.CATALOG_NAME) as conn:
        conn.execute("UPDATE pages SET page_no = 77 WHERE page_id = 'p012'")
    with LocalStore.open(path, readonly=True, **LARGE) as store:
        with pytest.raises(StoreCorruptError, match="p012.*row checksum"):
            store.search(vectors(12)[:2], k=3, mode="exact")
        with pytest.raises(StoreCorruptError, match="row checksum"):
            store.search(vectors(12)[:2], k=3, mode="two_stage")


def test_page_pointing_past_its_segment_is_a_clear_error(tmp_path):
    path = build(tmp_path / "s")
    with sqlite3.connect(path / cat.CATALOG_NAME) as conn:
        conn.execute("UPDATE pages SET row_offset = 1000000 WHERE page_id = 'p040'")
    with LocalStore.open(path, readonly=True, **LARGE) as store:
        with pytest.raises(StoreCorruptError, match="outside the committed rows"):
            store.search(vectors(1)[:2], k=3)


def _rss_anon_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    pytest.skip("no /proc/self/status here")


def test_a_warming_cache_takes_memory_only_for_the_rows_written():
    """Scattered reranked rows must not make the whole fp32 cache resident (huge pages would:
    one written row, 2 MB resident)."""
    rows, dim = 1 << 20, 128  # a 512 MB cache
    tokens = SegmentTokens(
        {1: np.zeros((rows, dim), dtype=np.float16)},
        np.ones(1, dtype=np.int64),
        np.zeros(1, dtype=np.int64),
        np.array([0, rows], dtype=np.int64),
        dim,
        cache_bytes=1 << 30,
    )
    before = _rss_anon_mb()
    picked = np.arange(0, rows, rows // 200)  # 200 rows spread over the whole matrix
    assert tokens[picked].shape == (len(picked), dim) and tokens.cached_rows == len(picked)
    assert _rss_anon_mb() - before < 64


def test_a_codes_only_store_counts_its_codes_toward_the_open_check_limit(tmp_path, monkeypatch):
    """A codes-only store keeps its vectors in the candidate index, not in segments: counting
    only the catalog and segments ran every row check at open up to 64 MB of catalog (100,000
    pages: a second at each open)."""
    config = {**CONFIG, "codes": "2bit", "fp16": False}
    path = tmp_path / "codes"
    with LocalStore.create(path, config, codes_min_tokens=100) as store:
        store.add([PageRecord(f"p{i:03d}", "d", i + 1, vectors(i)) for i in range(200)])
        store.optimize()
    index_bytes = sum(f.stat().st_size for f in (path / "centroids").iterdir() if f.is_file())
    catalog_bytes = (path / cat.CATALOG_NAME).stat().st_size
    checked: list[bool] = []
    real = cat.pages_for_check

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        checked.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(cat, "pages_for_check", spy)
    limit = catalog_bytes + index_bytes // 2  # the catalog fits, the catalog and codes do not
    with LocalStore.open(path, readonly=True, verify_on_open_max_bytes=limit) as store:
        assert store.search(vectors(7)[:2], k=3)[0].page_id == "p007"
    assert checked == []
    with LocalStore.open(path, readonly=True, verify_on_open_max_bytes=10**9) as store:
        pass  # a small store is still checked in full
    assert checked
