"""SPEC §10 variants: sink-aware SAP and SAP-guided / anchor-initialised UOT."""

from __future__ import annotations

import numpy as np
import pytest

from vrag_compress.compress import get_compressor, list_compressors
from vrag_compress.compress.base import CompressionError
from vrag_compress.compress.variants import robust_z, sink_aware_top_k
from vrag_compress.encoders.base import PageEncoding


def _page(seed: int = 0, n: int = 30, d: int = 8, layers: int = 4) -> PageEncoding:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cent = rng.random((layers, n)).astype(np.float32)
    return PageEncoding(x, centrality=cent, eos_attention=cent[::-1].copy())


def test_variants_are_registered() -> None:
    assert {"sap-sink", "uot-anchor", "uot-sap"} <= set(list_compressors())
    c = get_compressor("sap-sink", ratio=0.2, layers=[1, 2], dedup=0.8)
    assert get_compressor(c.name, **c.params) == c


def test_without_guards_sap_sink_is_plain_sap() -> None:
    page = _page()
    plain = get_compressor("sap", ratio=0.2, layers=[1, 2]).compress(page)
    off = get_compressor("sap-sink", ratio=0.2, layers=[1, 2], dedup=None, sink_z=None)
    np.testing.assert_array_equal(off.compress(page).kept, plain.kept)


def test_duplicates_are_deferred_and_the_budget_is_met() -> None:
    x = np.eye(4, dtype=np.float32)[[0, 0, 0, 1, 2, 3]]  # three copies of e0 first
    scores = np.array([9.0, 8.0, 7.0, 3.0, 2.0, 1.0])
    assert sink_aware_top_k(x, scores, 3, dedup=0.9).tolist() == [0, 3, 4]
    assert sink_aware_top_k(x, scores, 5, dedup=0.9).tolist() == [0, 1, 3, 4, 5]
    assert sink_aware_top_k(x, scores, 6, dedup=0.9).tolist() == list(range(6))


def test_sinks_are_demoted() -> None:
    x = np.eye(6, dtype=np.float32)
    scores = np.array([1.0, 1.1, 50.0, 0.9, 1.2, 1.05])  # token 2 soaks up everything
    assert robust_z(scores).argmax() == 2
    assert sink_aware_top_k(x, scores, 2, dedup=None, sink_z=5.0).tolist() == [1, 4]
    assert sink_aware_top_k(x, scores, 2, dedup=None, sink_z=None).tolist() == [2, 4]
    assert robust_z(np.ones(5)).tolist() == [0.0] * 5


@pytest.mark.parametrize("name", ["uot-anchor", "uot-sap"])
def test_guided_uot_outputs(name: str) -> None:
    pages = [_page(s, n=n) for s, n in [(0, 30), (1, 17), (2, 3)]]
    c = get_compressor(name, ratio=0.25, layers=[2, 3])
    out = c.compress_many(pages)
    for page, comp in zip(pages, out, strict=True):
        k = c.n_keep(page.n_tokens)
        assert comp.vectors.shape == (k, 8)
        np.testing.assert_allclose(np.linalg.norm(comp.vectors, axis=1), 1.0, atol=1e-5)
        assert comp.assignment.shape == (page.n_tokens,)
        assert comp.assignment.max() < k
    single = c.compress(pages[1])
    np.testing.assert_allclose(single.vectors, out[1].vectors, atol=1e-5)


def test_anchor_init_starts_from_sap_tokens() -> None:
    page = _page(3)
    one_step = get_compressor("uot-anchor", ratio=0.2, layers=[1], iters=1, epsilon=10.0)
    sap = get_compressor("sap", ratio=0.2, layers=[1]).compress(page)
    # huge epsilon: one EM step spreads mass almost uniformly, yet the assignment argmax
    # still follows the anchors' nearest tokens; each anchor is its own nearest token
    out = one_step.compress(page)
    assert set(out.assignment[sap.kept].tolist()) == set(range(len(sap.kept)))


def test_guided_uot_rejects_bad_options() -> None:
    with pytest.raises(CompressionError, match="init"):
        get_compressor("uot-anchor", ratio=0.1, init="random")
    with pytest.raises(CompressionError, match="mass"):
        get_compressor("uot-sap", ratio=0.1, mass="eos")
    with pytest.raises(CompressionError, match="dedup"):
        get_compressor("sap-sink", ratio=0.1, dedup=2.0)


def test_sap_auto_covers_every_direction_of_the_page_before_repeating_one() -> None:
    from vrag_compress.compress.variants import coverage_top_k

    x = np.eye(4, dtype=np.float32)[[0, 0, 0, 0, 1, 1, 2, 3]]  # e0 four times, e1 twice
    assert coverage_top_k(x, np.ones(8), 1).tolist() == [0]  # the most-covered direction first
    assert sorted({int(np.argmax(x[i])) for i in coverage_top_k(x, np.ones(8), 4)}) == [0, 1, 2, 3]
    weights = np.array([0, 0, 0, 0, 0, 0, 5.0, 1.0])  # weight moves the first pick to e2
    assert coverage_top_k(x, weights, 1).tolist() == [6]
    assert coverage_top_k(x, np.ones(8), 8).tolist() == list(range(8))


def test_sap_auto_weights_cap_sinks_and_alpha_zero_is_uniform() -> None:
    from vrag_compress.compress.variants import capped_weights

    scores = np.array([1.0, 1.1, 50.0, 0.9, 1.2, 1.05])
    assert capped_weights(scores, 0.0).tolist() == [1.0] * 6
    w = capped_weights(scores, 1.0)
    assert w[2] == pytest.approx(w.max()) and w[2] < 10 * w[1]  # the sink is capped
    assert w.argmin() == 3


def test_sap_auto_is_registered_meets_the_budget_and_round_trips() -> None:
    assert "sap-auto" in list_compressors()
    c = get_compressor("sap-auto", ratio=0.2, layers=[1, 2], alpha=0.5)
    assert get_compressor(c.name, **c.params) == c
    page = _page(n=40)
    out = c.compress(page)
    assert len(out.kept) == c.n_keep(40) and np.all(np.diff(out.kept) > 0)
    np.testing.assert_array_equal(out.vectors, page.vectors[out.kept])  # original vectors
    adaptive = get_compressor("sap-auto", ratio=0.2, layers=[1, 2], budget="adaptive")
    pages = [_page(seed, n=40) for seed in range(6)]
    kept = sum(len(p.kept) for p in adaptive.compress_many(pages))
    assert kept == pytest.approx(0.2 * 240, rel=0.05)
    with pytest.raises(CompressionError, match="alpha must be"):
        get_compressor("sap-auto", ratio=0.1, alpha=-1)
