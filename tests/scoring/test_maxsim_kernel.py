"""One packed MaxSim kernel (`store.maxsim.maxsim_scores`) serves the store, the estimate, the
benchmarks and calibration: the same inputs give the same scores whichever caller asks."""

from __future__ import annotations

import numpy as np
import pytest

from vrag_compress.calibrate import _pair_curve
from vrag_compress.compress.base import budget
from vrag_compress.compress.common import top_k_positions
from vrag_compress.encoders.base import PageEncoding
from vrag_compress.estimate import maxsim_matrix
from vrag_compress.scoring import maxsim
from vrag_compress.scoring.packed import maxsim_scores, pack_pages, query_blocks
from vrag_compress_bench.eval.runner import score_all

DIM = 16


@pytest.fixture(scope="module")
def data() -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(7)
    pages = [rng.normal(size=(int(n), DIM)).astype(np.float32) for n in rng.integers(3, 40, 25)]
    queries = [rng.normal(size=(int(n), DIM)).astype(np.float32) for n in rng.integers(2, 9, 11)]
    return pages, queries


def test_every_caller_gets_the_same_scores(data):
    pages, queries = data
    tokens, bounds = pack_pages(pages)
    kernel = maxsim_scores(queries, tokens, bounds, sum_dtype=np.float64)
    assert kernel.dtype == np.float64 and kernel.shape == (len(queries), len(pages))
    np.testing.assert_array_equal(maxsim_matrix(queries, pages), kernel)  # the estimate
    np.testing.assert_array_equal(score_all(queries, pages), kernel)  # the benchmarks
    store = maxsim_scores(queries, tokens, bounds, chunk_tokens=50, threads=2)  # the store
    assert store.dtype == np.float32
    np.testing.assert_allclose(store, kernel, rtol=1e-6, atol=1e-5)
    reference = [[maxsim(q, p) for p in pages] for q in queries]
    np.testing.assert_allclose(kernel, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 7, 20, 10**6])
def test_query_blocks_and_page_chunks_change_nothing_but_rounding(data, rows):
    pages, queries = data
    tokens, bounds = pack_pages(pages)
    whole = maxsim_scores(queries, tokens, bounds, sum_dtype=np.float64)
    blocked = maxsim_scores(queries, tokens.astype(np.float16), bounds, query_rows=rows)
    fp16_whole = maxsim_scores(queries, tokens.astype(np.float16), bounds)
    np.testing.assert_allclose(blocked, fp16_whole, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(fp16_whole, whole, rtol=1e-2, atol=1e-2)  # fp16 storage
    np.testing.assert_allclose(score_all(queries, pages, max_rows=rows), whole, rtol=1e-6)


def test_query_blocks_hold_whole_queries_within_the_row_budget():
    assert query_blocks([3, 3, 3, 9, 1], 6) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert query_blocks([], 6) == []


def test_no_queries_or_no_pages_give_empty_scores(data):
    pages, queries = data
    assert maxsim_scores([], *pack_pages(pages)).shape == (0, len(pages))
    assert maxsim_scores(queries, *pack_pages([])).shape == (len(queries), 0)
    with pytest.raises(ValueError, match="document 1 has no vectors"):
        score_all(queries, [pages[0], pages[0][:0]])


def test_calibration_curve_is_maxsim_of_the_kept_tokens(data):
    pages, queries = data
    rng = np.random.default_rng(3)
    for page_vectors, query in zip(pages[:6], queries[:6], strict=True):
        page = PageEncoding(vectors=page_vectors, centrality=rng.random((4, len(page_vectors))))
        kept = top_k_positions(page.centrality.astype(np.float64), budget(len(page_vectors), 0.3))
        full = maxsim(query, page_vectors)
        expected = [maxsim(query, page_vectors[layer]) / full for layer in kept]
        np.testing.assert_allclose(_pair_curve(page, query, 0.3), expected, rtol=1e-5)
