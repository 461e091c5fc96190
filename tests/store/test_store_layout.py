"""The layout a store picks by size (local/layout.py): fp16 rows while small, residual codes once
the candidate index is trained past ``centroid_min_tokens``; the overrides; and the in-place
switch of an existing store to codes only (`optimize(fp16=False)`), which a kill -9 at any point
leaves with the old layout or the new one, never half."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord, StoreCorruptError, StoreError
from vrag_compress.store.candidates.files import INDEX_DIR, manifest_files
from vrag_compress.store.local import segments as seg
from vrag_compress.store.local.layout import AUTO_CODES, choose_layout

DIM = 64
BASE = {"dim": DIM, "model_id": "t/layout"}
AUTO = {**BASE, "codes": "4bit", "layout": "auto"}
CENTRES = np.random.default_rng(0).normal(size=(200, DIM))
THRESHOLD = 2_000  # vectors: 40 pages of 50
OPTIONS = {"centroid_min_tokens": THRESHOLD}


def page(i: int, n: int = 50) -> np.ndarray:
    """Clustered unit vectors, like real token embeddings."""
    rng = np.random.default_rng(i)
    x = CENTRES[rng.integers(0, len(CENTRES), size=n)] + 0.4 * rng.normal(size=(n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def records(start: int, stop: int) -> list[PageRecord]:
    return [
        PageRecord(f"p{i:04d}", "d", i + 1, page(i), {}, text=f"t {i}") for i in range(start, stop)
    ]


def segment_files(path: Path) -> list[Path]:
    return sorted((path / seg.SEGMENT_DIR).glob("*.f16"))


def keeps_rows(store: LocalStore, path: Path) -> bool:
    """fp16 rows on disk, and the config says so: the two agree in a consistent store."""
    on_disk = bool(segment_files(path))
    assert on_disk == (store.config.get("fp16", True) is not False), store.config
    return on_disk


def mean_cosine(store: LocalStore, ids: list[int]) -> float:
    got = store.get([f"p{i:04d}" for i in ids])
    return float(
        np.mean([np.sum(g.vectors * page(i), axis=1).mean() for g, i in zip(got, ids, strict=True)])
    )


def test_the_size_rule_keeps_fp16_while_small_then_codes(tmp_path):
    path = tmp_path / "s"
    with LocalStore.create(path, AUTO, **OPTIONS) as store:
        for i in range(0, 36, 4):  # 1,800 vectors, written 4 pages at a time like `vrag index`
            store.add(records(i, i + 4))
        assert keeps_rows(store, path) and store.index_info() is None
        assert mean_cosine(store, [0, 7]) > 0.9999  # the fp16 rows themselves
        store.optimize()  # below the threshold: an index beside the fp16 rows
        assert keeps_rows(store, path) and store.index_info()["indexed_pages"] == 36
        store.add(records(36, 44))  # 2,200 vectors: past it, the training switches to codes
        assert not keeps_rows(store, path)
        assert store.config["layout"] == "auto" and store.config["codes"] == "4bit"
        info = store.index_info()
        assert info["codes"] == "4bit" and info["indexed_pages"] == 44
        assert store.staged_vectors() == 0
        assert 0.97 < mean_cosine(store, [0, 40]) < 0.9999  # decoded 4-bit codes
        assert store.search(page(5)[:8], k=1)[0].page_id == "p0005"
        assert store.verify().ok
    with LocalStore.open(path, **OPTIONS) as store:  # the layout is kept: adds are codes
        store.add(records(44, 48))
        assert not keeps_rows(store, path) and store.index_info()["indexed_pages"] == 48
        assert store.search(page(46)[:8], k=1)[0].page_id == "p0046"
        assert store.verify().ok


def test_optimize_switches_an_auto_store_past_the_threshold(tmp_path):
    """Automatic training off (as the benchmark runs): `optimize` applies the same rule."""
    path = tmp_path / "s"
    with LocalStore.create(path, AUTO, centroid_min_tokens=-1) as store:
        store.add(records(0, 60))
        assert store.optimize()["codes"] == "4bit" and keeps_rows(store, path)  # 3,000 < 500k
    with LocalStore.open(path, centroid_min_tokens=THRESHOLD) as store:
        store.add(records(60, 61))  # the rule, not the 4x growth: due at once
        assert not keeps_rows(store, path)


def test_overrides_and_their_choice():
    assert choose_layout(None, None) == (AUTO_CODES, True, "auto")
    assert choose_layout("2bit", None) == ("2bit", True, "auto")
    assert choose_layout("none", None) == ("none", True, "fixed")  # nothing to switch to
    assert choose_layout(None, True) == ("none", True, "fixed")
    assert choose_layout("2bit", True) == ("2bit", True, "fixed")
    assert choose_layout(None, False) == (AUTO_CODES, False, "fixed")
    assert choose_layout(None, None, embedded=False) == ("none", True, "fixed")
    for bad in (("none", False, True), (None, False, False)):
        with pytest.raises(ValueError, match="needs codes 4bit, 2bit or 1bit and the embedded"):
            choose_layout(bad[0], bad[1], embedded=bad[2])


def test_a_fixed_fp16_store_never_switches_by_itself(tmp_path):
    path = tmp_path / "s"
    with LocalStore.create(path, {**BASE, "codes": "4bit"}, **OPTIONS) as store:
        store.add(records(0, 48))
        store.wait_for_index()
        assert keeps_rows(store, path) and store.index_info() is not None


def test_pinning_fp16_stops_the_rule(tmp_path):
    path = tmp_path / "s"
    with LocalStore.create(path, AUTO, **OPTIONS) as store:
        store.add(records(0, 10))
        store.optimize(fp16=True)
        assert "layout" not in store.config
        store.add(records(10, 48))
        store.wait_for_index()
        assert keeps_rows(store, path)


def test_in_place_switch_to_codes_and_no_way_back(tmp_path):
    path = tmp_path / "s"
    queries = [page(i)[:8] for i in range(0, 48, 6)]
    with LocalStore.create(path, BASE, centroid_min_tokens=-1) as store:
        store.add(records(0, 48))
        store.optimize()
        before = [[h.page_id for h in hits] for hits in store.search_many(queries, 5)]
        info = store.optimize(codes="2bit", fp16=False)
        assert info["codes"] == "2bit" and not keeps_rows(store, path)
        after = [[h.page_id for h in hits] for hits in store.search_many(queries, 5)]
        assert [b[0] for b in before] == [a[0] for a in after]  # each query's own page
        overlap = np.mean([len(set(b) & set(a)) / 5 for b, a in zip(before, after, strict=True)])
        assert overlap >= 0.8, overlap  # within what 2-bit codes change in the tail
        assert store.verify().ok
        with pytest.raises(StoreError, match="keeps only its 2bit codes.*cannot be rebuilt"):
            store.optimize(fp16=True)
    with LocalStore.open(path, centroid_min_tokens=-1) as store:  # kept in the config
        assert store.config["fp16"] is False and store.config["codes"] == "2bit"
        store.add(records(48, 50))
        assert not keeps_rows(store, path) and store.verify().ok
        with pytest.raises(StoreError, match="4bit, 2bit or 1bit"):
            store.optimize(codes="none", fp16=False)


def test_a_reader_open_before_the_switch_follows_it(tmp_path):
    path = tmp_path / "s"
    with LocalStore.create(path, BASE, centroid_min_tokens=-1) as store:
        store.add(records(0, 30))
    writer = LocalStore.open(path, centroid_min_tokens=-1)
    reader = LocalStore.open(path, readonly=True)
    try:
        assert reader.search(page(3)[:8], k=1)[0].page_id == "p0003"
        writer.optimize(fp16=False)
        assert reader.search(page(3)[:8], k=1)[0].page_id == "p0003"
        assert reader.get(["p0004"])[0].vectors.shape == (50, DIM)
        assert reader.verify().ok
    finally:
        reader.close()
        writer.close()


def test_damaged_fp16_rows_are_not_sealed_into_codes(tmp_path):
    path = tmp_path / "s"
    with LocalStore.create(path, BASE, centroid_min_tokens=-1) as store:
        store.add(records(0, 30))
    victim = segment_files(path)[0]
    data = bytearray(victim.read_bytes())
    data[DIM * 2 * 60 + 7] ^= 0x40  # a value of page p0001
    victim.write_bytes(bytes(data))
    with LocalStore.open(path, centroid_min_tokens=-1, check_on_open=False) as store:
        with pytest.raises(StoreCorruptError, match="p0001.*nothing was converted"):
            store.optimize(fp16=False)
        assert keeps_rows(store, path) and store._centroids.manifest_now() is None
        assert not store.verify().ok  # the damage is still there to be found


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from vrag_compress.store import LocalStore
    from vrag_compress.store.local import integrity
    from vrag_compress.store.candidates import files as cand
    from vrag_compress.store.local.candidates import CandidateIndexes

    path, point = sys.argv[1], sys.argv[2]

    from vrag_compress.testing import kill_after as die_after, kill_before as die_before

    owner, name, when = {
        "compacted": (LocalStore, "compact", die_after),
        "rows_checked": (integrity, "check_fp16_rows", die_after),
        "codes_written": (cand, "train", die_after),
        "committed": (CandidateIndexes, "_unlink_segments", die_before),
        "unlinked": (CandidateIndexes, "_unlink_segments", die_after),
    }[point]
    store = LocalStore.open(path, centroid_min_tokens=-1)
    when(owner, name)
    store.optimize(codes="2bit", fp16=False)
    print("survived")
    """
)


@pytest.mark.crash
@pytest.mark.parametrize(
    "point", ["compacted", "rows_checked", "codes_written", "committed", "unlinked"]
)
def test_kill_during_the_switch_leaves_one_layout_or_the_other(tmp_path, point, crash_child):
    path = tmp_path / "s"
    with LocalStore.create(path, BASE, centroid_min_tokens=-1) as store:
        store.add(records(0, 30))
        store.delete(page_ids=["p0002"])  # something for the compaction to do
        store.optimize()  # an fp16 index is there too: the switch replaces it
    run = crash_child(CHILD, path, point)
    assert run.wait(timeout=300) == -9, run.stdout + run.stderr
    switched = point in ("committed", "unlinked")
    with LocalStore.open(path, centroid_min_tokens=-1) as store:  # the writer open cleans up
        report = store.verify()
        assert report.ok and not report.notes, report.problems + report.notes
        assert keeps_rows(store, path) != switched
        assert store.config.get("codes", "none") == ("2bit" if switched else "none")
        manifest = store._centroids.manifest_now()
        assert {p.name for p in (path / INDEX_DIR).iterdir()} == manifest_files(manifest)
        assert store.count() == 29
        for i in (0, 17, 29):
            assert store.search(page(i)[:8], k=1)[0].page_id == f"p{i:04d}"
        if not switched:  # the interrupted switch can simply run again
            store.optimize(codes="2bit", fp16=False)
            assert not keeps_rows(store, path) and store.verify().ok


def test_a_migration_of_a_switched_store_keeps_full_vectors(tmp_path):
    from vrag_compress.store.migrate import copy_store, destination_config

    with LocalStore.create(tmp_path / "src", AUTO, **OPTIONS) as src:
        src.add(records(0, 44))
        assert src.config["fp16"] is False
        config = destination_config(src.config)
        assert config["fp16"] is True and "layout" not in config
        with LocalStore.create(tmp_path / "dst", config, **OPTIONS) as dst:
            copy_store(src, dst)
            assert keeps_rows(dst, tmp_path / "dst") and dst.count() == 44
