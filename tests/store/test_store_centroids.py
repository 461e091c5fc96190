"""Centroid-code candidate index: parameter rules, scoring, residual codes, persisted files."""

from __future__ import annotations

import numpy as np
import pytest

from vrag_compress.scoring.packed import maxsim_scores
from vrag_compress.store.base import StoreCorruptError
from vrag_compress.store.candidates import cells as cz
from vrag_compress.store.candidates import files as cand
from vrag_compress.store.candidates.codec import ResidualCodec, code_roundtrip

DIM = 32


def clustered(n_pages: int, seed: int = 0, dim: int = DIM) -> tuple[np.ndarray, np.ndarray]:
    """Pages of unit tokens around a few of 64 topic centres; returns (tokens, bounds)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(64, dim)).astype(np.float32)
    lengths = rng.integers(5, 30, n_pages)
    bounds = np.zeros(n_pages + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    topics = rng.integers(0, 64, (n_pages, 3))
    page_of = np.repeat(np.arange(n_pages), lengths)
    tok_topic = topics[page_of, rng.integers(0, 3, len(page_of))]
    tokens = centres[tok_topic] + 0.6 * rng.normal(size=(len(page_of), dim)).astype(np.float32)
    return tokens / np.linalg.norm(tokens, axis=1, keepdims=True), bounds


def queries_from(tokens: np.ndarray, bounds: np.ndarray, n: int, seed: int = 1) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for p in rng.integers(0, len(bounds) - 1, n):
        rows = rng.integers(bounds[p], bounds[p + 1], 8)
        q = tokens[rows] + 0.1 * rng.normal(size=(8, tokens.shape[1]))
        out.append((q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32))
    return out


def test_k_rule_follows_square_root_and_clamps():
    assert cz.choose_k(10_300_000) == 16384  # 100k pages of 103 tokens
    assert cz.choose_k(103_000_000) == 32768  # 1M pages
    assert cz.choose_k(1_000_000) == 4096
    assert cz.choose_k(65_536) == 1024
    assert cz.choose_k(10**12) == 65536
    assert cz.choose_k(4_000) == 64  # tiny: at most T/32, a power of two
    assert cz.choose_k(10) == 1
    assert not cz.needs_retrain(1_000_000, 3_000_000)
    assert cz.needs_retrain(10_300_000, 41_200_000)
    assert cz.needs_retrain(1_000_000, 200_000)
    p = cz.search_params(100_000, 4096)
    assert (p.nprobe, p.rerank) == (16, 317)
    assert cz.search_params(10, 16).rerank == 10


def test_list_scores_equal_code_scores_and_impute_the_next_cell():
    tokens, bounds = clustered(300)
    k = 64
    centroids = cz.train_centroids(tokens, k, gpu=False)
    codes = cz.assign(tokens, centroids)
    assert codes.dtype == np.uint16 and codes.max() < k
    indptr, pages = cz.build_lists(codes, bounds, k)
    for q in queries_from(tokens, bounds, 5):
        cells, cell_scores, floor = cz.probe(q, centroids, 8)
        sims = q @ centroids.T
        assert np.allclose(cell_scores[:, 0], sims.max(axis=1), atol=1e-5)
        assert np.allclose(floor, np.sort(sims, axis=1)[:, -9], atol=1e-5)
        a = cz.list_scores(cells, cell_scores, floor, indptr, pages, 300)
        b = cz.code_scores(cells, cell_scores, floor, codes, bounds, k)
        assert np.allclose(a, b, atol=1e-4)
        # by hand for one page: per query token the best probed cell it holds, else the floor
        p = 7
        held = set(codes[bounds[p] : bounds[p + 1]].tolist())
        want = sum(
            max(
                [s for c, s in zip(cells[i], cell_scores[i], strict=True) if c in held],
                default=floor[i],
            )
            for i in range(len(q))
        )
        assert a[p] == pytest.approx(want, abs=1e-4)


def test_candidates_then_exact_rerank_find_the_exact_top10():
    tokens, bounds = clustered(600)
    k = cz.choose_k(int(bounds[-1]))
    centroids = cz.train_centroids(tokens, k, gpu=False)
    codes = cz.assign(tokens, centroids)
    indptr, pages = cz.build_lists(codes, bounds, k)
    qs = queries_from(tokens, bounds, 20)
    exact = maxsim_scores(qs, tokens, bounds)
    hits = 0
    for q, row in zip(qs, exact, strict=True):
        cells, cs, fl = cz.probe(q, centroids, 16)
        top = cz.top_pages(cz.list_scores(cells, cs, fl, indptr, pages, 600), None, 120)
        got = top[np.argsort(-row[top])[:10]]
        hits += len(set(got) & set(np.argsort(-row)[:10]))
    assert hits / 200 >= 0.95


def test_top_pages_masks_dead_pages():
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0], dtype=np.float32)
    live = np.array([False, True, True, False, True])
    assert sorted(cz.top_pages(scores, live, 2).tolist()) == [1, 2]
    assert sorted(cz.top_pages(scores, live, 10).tolist()) == [1, 2, 4]
    assert len(cz.top_pages(scores, np.zeros(5, bool), 3)) == 0


@pytest.mark.parametrize("nbits,max_err", [(4, 0.03), (2, 0.12)])
def test_residual_codes_round_trip(nbits, max_err):
    tokens, bounds = clustered(200)
    centroids = cz.train_centroids(tokens, 32, gpu=False)
    codes = cz.assign(tokens, centroids)
    codec = ResidualCodec.fit(tokens - centroids[codes], nbits)
    packed = codec.encode(tokens, codes, centroids)
    assert packed.shape == (len(tokens), DIM * nbits // 8) and packed.dtype == np.uint8
    decoded = codec.decode(packed, codes, centroids)
    assert np.abs(decoded - tokens).mean() < max_err
    assert np.abs(decoded - tokens).mean() < np.abs(centroids[codes] - tokens).mean()
    with pytest.raises(ValueError, match="multiple of"):
        ResidualCodec.fit(np.zeros((4, 30), np.float32), 2)


@pytest.mark.parametrize("codes", ["none", "2bit"])
def test_persisted_index_append_merge_and_verify(tmp_path, codes):
    tokens, bounds = clustered(400)
    pids = np.arange(1, 401, dtype=np.int64) * 3
    manifest = cand.train(
        tmp_path, pids[:300], bounds[:301], tokens[: bounds[300]], codes=codes, gpu=False
    )
    index = cand.CandidateIndex.open(tmp_path, manifest)
    assert index.n_slots == 300 and cand.verify_files(tmp_path, manifest) == []

    rows = slice(bounds[300], bounds[400])
    manifest2 = index.append(pids[300:], bounds[300:] - bounds[300], tokens[rows])
    index2 = cand.CandidateIndex.open(tmp_path, manifest2)
    assert index2.n_slots == 400 and index2.n_tokens == bounds[-1]
    q = queries_from(tokens, bounds, 1)[0]
    s_tail = index2.scores(q, 8)
    assert cand.remove_orphans(tmp_path, manifest2) == 0  # the old base is still referenced

    live = pids[pids % 2 == 0]
    merged = cand.CandidateIndex.open(tmp_path, index2.merge(live))
    assert set(merged.slot_pids.tolist()) == set(live.tolist())
    # merging changes where a page's score comes from (lists vs codes), not its value
    keep = np.isin(index2.slot_pids, live)
    assert np.allclose(merged.scores(q, 8), s_tail[keep], atol=1e-4)
    assert cand.remove_orphans(tmp_path, merged.manifest) > 0
    assert cand.verify_files(tmp_path, merged.manifest) == []
    if codes != "none":
        slots = np.array([0, len(live) - 1])
        approx, new_bounds = merged.decode(slots)
        first = np.flatnonzero(pids == live[0])[0]
        exact = tokens[bounds[first] : bounds[first + 1]]
        assert np.abs(approx[: new_bounds[1]] - exact).mean() < 0.12


def test_damaged_index_files_are_reported(tmp_path):
    tokens, bounds = clustered(100)
    manifest = cand.train(tmp_path, np.arange(100), bounds, tokens, gpu=False)
    lists = tmp_path / cand.INDEX_DIR / manifest["base"]["files"]["codes"]
    data = bytearray(lists.read_bytes())
    data[-1] ^= 0xFF
    lists.write_bytes(bytes(data))
    problems = cand.verify_files(tmp_path, manifest)
    assert any("codes.npy" in p and "checksum" in p for p in problems)
    (tmp_path / cand.INDEX_DIR / manifest["centroids"]).unlink()
    assert any("missing" in p for p in cand.verify_files(tmp_path, manifest))
    with pytest.raises(FileNotFoundError):
        cand.CandidateIndex.open(tmp_path, manifest)
    (tmp_path / cand.INDEX_DIR / manifest["base"]["files"]["bounds"]).write_bytes(b"junk")
    with pytest.raises((StoreCorruptError, FileNotFoundError)):
        cand.CandidateIndex.open(tmp_path, manifest)


@pytest.mark.parametrize("codes,bytes_max", [("fp16", 64), ("4bit", 21), ("2bit", 13)])
def test_code_roundtrip_keeps_scores_close(codes, bytes_max):
    tokens, bounds = clustered(400)
    decoded, per_token = code_roundtrip(tokens, codes)
    assert decoded.shape == tokens.shape and per_token <= bytes_max
    qs = queries_from(tokens, bounds, 10)
    exact = maxsim_scores(qs, tokens, bounds)
    approx = maxsim_scores(qs, decoded, bounds)
    assert np.mean(np.argmax(exact, axis=1) == np.argmax(approx, axis=1)) >= 0.9
    with pytest.raises(ValueError, match="codes must be"):
        code_roundtrip(tokens, "3bit")


def test_assignment_through_the_centroid_graph_matches_the_exact_nearest():
    rng = np.random.default_rng(3)
    tokens, _ = clustered(300)
    centroids = tokens[rng.choice(len(tokens), 2048, replace=False)]  # data-like, as k-means
    codes = cz.assign(tokens, centroids)  # K > 1,024: the HNSW path
    exact = np.argmax(tokens @ centroids.T, axis=1)
    assert np.mean(codes == exact) >= 0.97
    assert cz.assign_agreement(tokens, centroids) >= 0.97
    assert np.array_equal(cz.assign(tokens, centroids), codes)  # the same graph every time


def test_a_flat_vocabulary_is_assigned_as_well_as_a_clustered_one():
    """Random directions (no cluster of clusters to route through) at K 4,096."""
    rng = np.random.default_rng(4)
    centroids = rng.normal(size=(4096, 32)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    tokens = centroids[rng.integers(0, 4096, 20_000)] + 0.1 * rng.normal(size=(20_000, 32))
    tokens = (tokens / np.linalg.norm(tokens, axis=1, keepdims=True)).astype(np.float32)
    assert cz.assign_agreement(tokens, centroids) >= 0.97
    scores = tokens @ centroids.T
    got = scores[np.arange(len(tokens)), cz.assign(tokens, centroids)]
    assert np.mean(scores.max(axis=1) - got) < 0.01  # a miss lands on a near tie


def test_many_centroids_train_in_two_levels(monkeypatch):
    monkeypatch.setattr(cz, "TWO_LEVEL_MIN_K", 64)
    tokens, _ = clustered(200)
    centroids = cz.train_centroids(tokens[: 64 * 40], 100, seed=0, gpu=False)
    assert centroids.shape == (100, tokens.shape[1])
    assert np.allclose(np.linalg.norm(centroids, axis=1), 1.0, atol=1e-5)
    nearest = np.max(tokens @ centroids.T, axis=1)
    assert np.mean(nearest) > 0.7  # they sit where the tokens are


def test_gpu_copy_is_used_when_faiss_sees_gpus_and_skipped_on_error():
    class FakeFaiss:
        def __init__(self, gpus: int, fail: bool):
            self.gpus, self.fail = gpus, fail

        def get_num_gpus(self) -> int:
            return self.gpus

        def index_cpu_to_all_gpus(self, index):
            if self.fail:
                raise RuntimeError("no GPU support for this index")
            return ("gpu", index)

    assert cz._on_gpu(FakeFaiss(0, False), "cpu") == "cpu"
    assert cz._on_gpu(FakeFaiss(1, False), "cpu") == ("gpu", "cpu")
    assert cz._on_gpu(FakeFaiss(1, True), "cpu") == "cpu"
