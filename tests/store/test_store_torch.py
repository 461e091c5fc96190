"""The torch scoring path (what runs on a GPU) computes what the numpy path computes: run here on
torch's CPU device and compared with numpy, on the kernel, the centroid scores and whole
searches (base parts, tail parts, deletes, filters, stores without fp16 vectors)."""

from __future__ import annotations

import numpy as np
import pytest

from vrag_compress.scoring.packed import maxsim_scores
from vrag_compress.scoring.torch_scorer import TorchScorer, choose_device
from vrag_compress.store import LocalStore, PageRecord, StoreInputError
from vrag_compress_bench.synthetic import clustered_pages, queries_for

DIM = 16
OPTIONS = {"centroid_min_tokens": -1, "exact_max_tokens": 0, "rerank_depth": 25}


def test_kernel_matches_numpy_on_fp16_chunks():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, size=50)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    tokens = rng.normal(size=(int(bounds[-1]), DIM)).astype(np.float16)
    queries = [rng.normal(size=(n, DIM)).astype(np.float32) for n in (1, 3, 7)]
    expected = maxsim_scores(queries, tokens, bounds, chunk_tokens=40)
    got = TorchScorer("cpu").maxsim(queries, tokens, bounds, chunk_tokens=40)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def pages(n: int, seed: int, prefix: str) -> list[PageRecord]:
    arr = clustered_pages(n, 10, DIM, n_topics=12, seed=seed)
    return [
        PageRecord(f"{prefix}{i:04d}", f"d{i % 5}", 1, arr[i], {"kind": f"k{i % 3}"})
        for i in range(n)
    ]


@pytest.mark.parametrize("config", [{}, {"codes": "4bit", "fp16": False}])
def test_searches_match_numpy(tmp_path, config):
    path = tmp_path / "s"
    base = pages(300, 1, "a")
    with LocalStore.create(path, {"dim": DIM, "model_id": "t", **config}, **OPTIONS) as store:
        store.add(base)
        store.optimize()
        store.add(pages(40, 2, "b"))  # a tail part, scored from its codes
        store.delete(page_ids=["a0003", "a0100"])
    qs = queries_for(np.stack([p.vectors for p in base[:6]]), 6, tokens=5, seed=3)
    results = {}
    for device in ("numpy", "cpu"):
        with LocalStore.open(path, readonly=True, device=device, **OPTIONS) as store:
            index = store._centroids.current()
            results[device] = [
                store.search_many(qs, 10, mode="two_stage"),
                store.search_many(qs, 10, mode="exact"),
                store.search_many(qs, 10, mode="two_stage", filter={"kind": "k1"}),
            ]
            if device == "cpu":
                assert index.tail.pids.size and store._ctx.scorer is not None
                for q in qs:
                    np.testing.assert_allclose(
                        store._ctx.scorer.page_scores(index, q, 4),
                        index.scores(q, 4),
                        rtol=1e-5,
                        atol=1e-4,
                    )
    for numpy_runs, torch_runs in zip(results["numpy"], results["cpu"], strict=True):
        for a, b in zip(numpy_runs, torch_runs, strict=True):
            assert [h.page_id for h in a] == [h.page_id for h in b]
            np.testing.assert_allclose([h.score for h in a], [h.score for h in b], rtol=1e-5)


def test_device_choice(tmp_path):
    assert choose_device("numpy") is None and choose_device("cpu") == "cpu"
    with LocalStore.create(tmp_path / "s", {"dim": DIM, "model_id": "t"}) as store:
        assert store._ctx.scorer is None or store._ctx.scorer.device.type == "cuda"
    with pytest.raises(StoreInputError, match="device='gpu0'"):
        LocalStore.open(tmp_path / "s", device="gpu0")
