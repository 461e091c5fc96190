"""Searches on several threads (the store's ``threads`` option) give the same answers as on
one: single queries split their page-list work and rerank, batches run a query per thread."""

from __future__ import annotations

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord

DIM = 24


def vectors(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    centres = np.random.default_rng(7).normal(size=(30, DIM))
    v = centres[rng.integers(0, 30, 12)] + 0.6 * rng.normal(size=(12, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    root = tmp_path_factory.mktemp("threads") / "s"
    with LocalStore.create(root, {"dim": DIM, "model_id": "threads/test"}) as store:
        store.add(
            [PageRecord(f"p{i:03d}", f"d{i // 10}", i % 10 + 1, vectors(i)) for i in range(240)]
        )
        store.optimize()
        store.add([PageRecord(f"t{i:03d}", "tail", 1, vectors(1000 + i)) for i in range(20)])
    return root


def answers(path, threads: int, mode: str, **kwargs) -> list[list[tuple[str, float]]]:
    queries = [vectors(i)[:5] + 0.01 for i in range(0, 240, 9)] + [vectors(1003)[:4]]
    with LocalStore.open(path, readonly=True, threads=threads, rerank_depth=30) as store:
        single = [store.search(q, k=8, mode=mode, **kwargs) for q in queries]
        batch = store.search_many(queries, k=8, mode=mode, **kwargs)
    assert [[h.page_id for h in r] for r in single] == [[h.page_id for h in r] for r in batch]
    return [[(h.page_id, h.score) for h in r] for r in single]


@pytest.mark.parametrize(
    "mode, kwargs",
    [("two_stage", {}), ("exact", {}), ("two_stage", {"filter": {"page_no": {"$lte": 5}}})],
)
def test_two_threads_answer_like_one(path, mode, kwargs):
    one, two = answers(path, 1, mode, **kwargs), answers(path, 2, mode, **kwargs)
    assert [[p for p, _ in r] for r in one] == [[p for p, _ in r] for r in two]
    for a, b in zip(one, two, strict=True):
        assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("n_tokens", [1, 2, 5, 20])
def test_the_probe_split_over_two_threads_selects_what_one_pass_selects(path, n_tokens):
    """`CandidateIndex.probe` selects each half of the query's tokens on its own thread: the
    same cells, scores and floors, bit for bit, as `cells.probe` over the whole query."""
    from vrag_compress.store.candidates import cells as cz

    with LocalStore.open(path, readonly=True) as store:
        index = store._centroids.current()
        query = np.concatenate([vectors(i) for i in range(3)])[:n_tokens] + 0.01
        whole = cz.probe(query, index.centroids, 6)
        for threads in (1, 2):
            split = index.probe(query, 6, threads)
            for got, want in zip(split, whole, strict=True):
                assert got.shape == want.shape
                assert np.array_equal(got, want)
