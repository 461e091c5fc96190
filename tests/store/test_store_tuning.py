"""The candidate index measures itself: probes and rerank depth chosen for a recall target."""

from __future__ import annotations

import numpy as np
import pytest

from vrag_compress.scoring.packed import gather_pages, maxsim_scores, top_k
from vrag_compress.store import LocalStore, PageRecord
from vrag_compress.store.candidates import cells as cz
from vrag_compress.store.candidates import files as cand
from vrag_compress.store.candidates import tuning

from .test_store_centroids import clustered, queries_from

CONFIG = {"dim": 32, "model_id": "tuning/test"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tokens, bounds = clustered(1500, seed=3)
    root = tmp_path_factory.mktemp("tuning")
    manifest = cand.train(root, np.arange(1500), bounds, tokens, gpu=False)
    return cand.CandidateIndex.open(root, manifest), tokens, bounds


@pytest.mark.parametrize("nprobe", [1, 4, 40])
def test_touched_scores_read_only_the_probed_lists(trained, nprobe):
    index, tokens, bounds = trained
    q = queries_from(tokens, bounds, 1)[0]
    cells, cell_scores, floor = cz.probe(q, index.centroids, nprobe)
    touched, scores = cz.touched_scores(cells, cell_scores, floor, index.indptr, index.lists, 1500)
    named = np.unique(
        np.concatenate([index.lists[index.indptr[c] : index.indptr[c + 1]] for c in cells.ravel()])
    )
    assert touched.tolist() == named.tolist()  # each named page once, ascending, no other page
    dense = cz.code_scores(cells, cell_scores, floor, index.base.codes, index.base.bounds, index.k)
    assert np.allclose(scores, dense[touched], atol=1e-4)
    untouched = np.setdiff1d(np.arange(1500), touched)
    assert np.allclose(dense[untouched], floor.sum(), atol=1e-4)


def test_splitting_pages_over_threads_changes_no_score(trained, monkeypatch):
    """Threads own ranges of pages and add each page's gains in the same order, so the
    candidate set a lone query gets on two threads is the one it gets on one thread inside a
    batch (no last-bit differences at the cut), and every list entry is read by one thread."""
    from vrag_compress.store.candidates import kernels

    monkeypatch.setattr(kernels, "MIN_ENTRIES_PER_THREAD", 1)  # split even these small lists
    index, tokens, bounds = trained
    for q in queries_from(tokens, bounds, 5):
        one = index.touched_scores(q, 8, threads=1)
        for threads in (2, 3, 7):
            split = index.touched_scores(q, 8, threads=threads)
            assert np.array_equal(one[0], split[0]) and np.array_equal(one[1], split[1])
            assert one[2] == split[2]


def test_a_higher_target_never_costs_less_depth_and_reaches_what_it_reports(trained):
    index, tokens, bounds = trained
    low = tuning.tune(index, tokens, bounds, target=0.8)
    high = tuning.tune(index, tokens, bounds, target=0.99)
    assert low.reached and high.reached
    assert high.recall >= 0.99 and low.recall >= 0.8
    assert high.cost >= low.cost  # the cheapest pair for 0.99 also reaches 0.8
    # what the tuning reports is what a two-stage search with those parameters achieves
    _, qs = tuning.pseudo_queries(tokens, bounds, 100, seed=7)
    truth = tuning.exact_top(qs, tokens, bounds)
    ranks, _ = tuning.approximate_ranks(index, qs, truth, high.nprobe)
    assert tuning.recall_at(ranks, high.rerank) >= 0.95


def test_the_superset_truth_of_a_large_collection_is_the_exact_truth(trained, monkeypatch):
    index, tokens, bounds = trained
    _, qs = tuning.pseudo_queries(tokens, bounds, 100, seed=11)
    exact = tuning.exact_top(qs, tokens, bounds)
    superset = tuning.superset_top(index, qs, tokens, bounds)
    overlap = [len(set(a) & set(b)) / len(a) for a, b in zip(exact, superset, strict=True)]
    assert np.mean(overlap) >= 0.99
    monkeypatch.setattr(tuning, "SUPERSET_MIN_PAGES", 1000)  # tune() takes this truth from here
    monkeypatch.setattr(tuning, "exact_top", None)  # and never runs the full pass
    chosen = tuning.tune(index, tokens, bounds, target=0.95)
    assert chosen.reached and chosen.recall >= 0.95


class _OrderedReads:
    """Token rows that record every read (a slice each, or a list of rows)."""

    def __init__(self, tokens):
        self.tokens, self.reads = tokens, []

    def __getitem__(self, key):
        self.reads.append(key)
        return self.tokens[key]


def test_the_superset_truth_reads_the_collection_once_in_order(trained, monkeypatch):
    """At 1M pages the superset's pages gathered query by query read 1.4 TB of a 26 GB map
    (random reads); the truth must come from one ordered pass, block by block, and be the
    same as scoring each query's candidates directly."""
    index, tokens, bounds = trained
    _, qs = tuning.pseudo_queries(tokens, bounds, 40, seed=3)
    monkeypatch.setattr(tuning, "SWEEP_ROWS", int(bounds[-1]) // 7)  # several blocks
    reads = _OrderedReads(tokens)
    swept = tuning.superset_top(index, qs, reads, bounds)
    assert len(reads.reads) >= 7 and all(isinstance(k, slice) for k in reads.reads)
    starts = [k.start for k in reads.reads]
    assert starts == sorted(starts)
    assert all(a.stop <= b.start for a, b in zip(reads.reads, reads.reads[1:], strict=False))
    n_pages = len(bounds) - 1
    for q, got in zip(qs, swept, strict=True):
        cands = tuning._superset(index, q, n_pages, None)
        rows, sub = gather_pages(bounds, cands)
        direct = maxsim_scores([q], np.asarray(tokens[rows], np.float32), sub)[0]
        assert set(got) == set(cands[top_k(direct, tuning.TOP)])


def test_depth_for_reads_the_rank_quantile():
    ranks = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 8, 99]], dtype=float)
    assert tuning.depth_for(ranks, 0.9) == 9  # 9 of 10 true pages within 9 places
    assert tuning.depth_for(ranks, 1.0) == 100
    assert tuning.depth_for(np.array([[0.0, np.inf]]), 1.0) == np.inf
    assert tuning.depth_for(np.array([[0.0, 1.0, np.nan]]), 1.0) == 2  # nan: no such page


def test_scaled_rerank_grows_with_the_square_root_of_pages():
    tuned = {"rerank": 300, "pages": 10_000}
    assert tuning.scaled_rerank(tuned, 40_000) == 600
    assert tuning.scaled_rerank(tuned, 10_000) == 300
    assert tuning.scaled_rerank(tuned, 50) == 50  # never deeper than the collection


def page(i: int, tokens: np.ndarray, bounds: np.ndarray) -> PageRecord:
    return PageRecord(f"p{i:05d}", f"d{i}", 1, tokens[bounds[i] : bounds[i + 1]])


def test_optimize_tunes_the_store_and_info_says_so(tmp_path):
    tokens, bounds = clustered(800, seed=5)
    options = {"centroid_min_tokens": -1, "exact_max_tokens": 0}
    with LocalStore.create(tmp_path / "s.vrag", CONFIG, **options) as store:
        store.add([page(i, tokens, bounds) for i in range(800)])
        store.optimize()
        info = store.index_info(measure_recall=True)
        assert info["params_from"] == "measured" and info["recall_target"] == 0.97
        assert info["tuned"]["recall"] >= 0.97 and info["tuned"]["pages"] == 800
        assert (info["nprobe"], info["rerank"]) == (
            info["tuned"]["nprobe"],
            info["tuned"]["rerank"],
        )
        assert info["recall@10"] >= 0.9  # another sample of pseudo-queries, through search
    # the choice is in the committed manifest: a reader sees it; options still override
    with LocalStore.open(tmp_path / "s.vrag", readonly=True, rerank_depth=17) as reader:
        info = reader.index_info()
        assert info["params_from"] == "options" and info["rerank"] == 17
    # a new target is kept in the config and measured again (an option overrides it)
    with LocalStore.open(tmp_path / "s.vrag", **options) as store:
        store.optimize(recall_target=0.999)
    with LocalStore.open(tmp_path / "s.vrag", readonly=True) as reader:
        assert reader.index_info()["tuned"]["target"] == 0.999
    with LocalStore.open(tmp_path / "s.vrag", recall_target=0, **options) as store:
        store.optimize()
        info = store.index_info()
        assert info["params_from"] == "rule" and info["tuned"] is None


def test_a_codes_only_store_is_tuned_without_retraining(tmp_path):
    tokens, bounds = clustered(600, seed=6)
    config = {**CONFIG, "codes": "2bit", "fp16": False}
    options = {"centroid_min_tokens": -1, "codes_min_tokens": 0, "exact_max_tokens": 0}
    with LocalStore.create(tmp_path / "c.vrag", config, recall_target=0, **options) as store:
        store.add([page(i, tokens, bounds) for i in range(600)])
        store.optimize()
        trained_id = store.index_info()["tuned"]
        assert trained_id is None
    with LocalStore.open(tmp_path / "c.vrag", **options) as store:
        k_before = store.index_info()["k"]
        store.optimize()  # trained codes: only compacts, but measures itself for the target
        info = store.index_info()
        assert info["params_from"] == "measured" and info["k"] == k_before
        assert store.verify().ok


def test_a_store_of_five_pages_is_tuned_on_what_it_has(tmp_path):
    tokens, bounds = clustered(5, seed=8)
    options = {"centroid_min_tokens": -1, "exact_max_tokens": 0}
    with LocalStore.create(tmp_path / "t.vrag", CONFIG, **options) as store:
        store.add([page(i, tokens, bounds) for i in range(5)])
        store.optimize()
        tuned = store.index_info()["tuned"]
        assert tuned["reached"] and tuned["recall"] == 1.0 and tuned["queries"] == 5


def test_a_page_no_slot_holds_is_never_found_by_the_candidates(trained):
    index, tokens, bounds = trained
    slot_pos = np.arange(1500)
    slot_pos[1499] = -1  # its slot is deleted; the page lives on at a position no slot maps to
    q = np.asarray(tokens[bounds[0] : bounds[1]], dtype=np.float32)  # page 0's own vectors
    ranks, _ = tuning.approximate_ranks(index, [q], [np.array([1499, 0])], 4, slot_pos)
    assert ranks[0, 0] == np.inf and np.isfinite(ranks[0, 1]) and np.isnan(ranks[0, 2])
