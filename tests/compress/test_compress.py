"""Compression methods: registry, validation, SAP against SPEC §4, baselines against the
libraries they stand for, and property tests over every method."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vrag_compress.calibrate import score_retention
from vrag_compress.compress import (
    CompressionError,
    budget,
    calibrate_kappa,
    get_compressor,
    list_compressors,
)
from vrag_compress.compress.baselines import eos_zscores
from vrag_compress.encoders.base import PageEncoding

ALL_METHODS = ["identity", "sap", "uot", "random", "eos", "adaptive-eos", "cluster", "pool"]


def make_page(rng, n=64, d=16, n_layers=6, dupes=False, integer_stats=False) -> PageEncoding:
    x = rng.standard_normal((n, d)).astype(np.float32)
    if dupes and n > 2:
        x[n // 2 :] = x[: n - n // 2]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    if integer_stats:
        centrality = rng.integers(0, 4, (n_layers, n)).astype(np.float32)
    else:
        centrality = rng.random((n_layers, n)).astype(np.float32)
    eos = rng.dirichlet(np.ones(n), n_layers).astype(np.float32)
    return PageEncoding(x, centrality=centrality, eos_attention=eos)


def build(name: str, ratio: float = 0.1, **extra):
    params = {"identity": {}, "sap": {"layers": [1, 2]}, "adaptive-eos": {"kappa": 1.0}}
    kwargs = dict(params.get(name, {}))
    if name != "identity":
        kwargs["ratio"] = ratio
    kwargs.update(extra)
    return get_compressor(name, **kwargs)


# ---- registry and params -------------------------------------------------------------------


def test_list_compressors_names_every_method():
    assert set(ALL_METHODS) <= set(list_compressors())  # other modules may register more


def test_register_compressor_adds_a_name_once():
    from dataclasses import dataclass
    from typing import ClassVar

    from vrag_compress.compress import IdentityCompressor, register_compressor
    from vrag_compress.compress.registry import COMPRESSORS

    @dataclass(frozen=True)
    class Everything(IdentityCompressor):
        name: ClassVar[str] = "test-everything"

    try:
        assert register_compressor(Everything) is Everything
        assert isinstance(get_compressor("test-everything"), Everything)
        assert "test-everything" in list_compressors()
        with pytest.raises(CompressionError, match="already registered"):
            register_compressor(type("Other", (Everything,), {}))
    finally:
        COMPRESSORS.pop("test-everything", None)
    with pytest.raises(CompressionError, match="not a compressor class"):
        register_compressor(dict)


@pytest.mark.parametrize("name", ALL_METHODS)
def test_params_rebuild_an_equal_compressor_and_are_json(name):
    compressor = build(name, ratio=0.25)
    assert compressor.name == name
    params = json.loads(json.dumps(compressor.params))
    assert get_compressor(name, **params) == compressor


def test_requires_stats_flags():
    expected = {
        "identity": False,
        "sap": True,
        "uot": True,
        "random": False,
        "eos": True,
        "adaptive-eos": True,
        "cluster": False,
        "pool": False,
    }
    assert {name: build(name).requires_stats for name in ALL_METHODS} == expected
    assert not get_compressor("uot", marginal="uniform").requires_stats


def test_unknown_name_and_bad_parameters_are_clear():
    with pytest.raises(CompressionError, match="unknown compressor 'nope'"):
        get_compressor("nope")
    with pytest.raises(CompressionError, match="unknown parameter colour; random takes"):
        get_compressor("random", colour="red")


@pytest.mark.parametrize("ratio", [0, -0.1, 1.5, float("nan"), "x"])
@pytest.mark.parametrize("name", ["sap", "uot", "random", "eos", "cluster", "pool"])
def test_ratio_outside_unit_interval_is_rejected(name, ratio):
    with pytest.raises(CompressionError, match="ratio"):
        build(name, ratio=ratio)


def test_merge_factor_is_the_inverse_ratio():
    assert get_compressor("random", merge_factor=4) == get_compressor("random", ratio=0.25)
    with pytest.raises(CompressionError, match="merge_factor"):
        get_compressor("random", merge_factor=0.5)
    with pytest.raises(CompressionError, match="not both"):
        get_compressor("random", merge_factor=2, ratio=0.5)


# ---- input validation ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_METHODS)
def test_nan_vectors_are_rejected(name):
    page = make_page(np.random.default_rng(0))
    page.vectors[3, 0] = np.nan
    with pytest.raises(CompressionError, match="NaN"):
        build(name).compress(page)


@pytest.mark.parametrize("name", ALL_METHODS)
def test_empty_and_zero_rows_are_rejected(name):
    empty = PageEncoding(np.zeros((0, 8), np.float32))
    with pytest.raises(CompressionError, match="N >= 1"):
        build(name).compress(empty)
    page = make_page(np.random.default_rng(0))
    page.vectors[5] = 0
    with pytest.raises(CompressionError, match="row 5 is all zeros"):
        build(name).compress_many([page])


@pytest.mark.parametrize("name", ["sap", "eos", "adaptive-eos"])
def test_missing_statistics_are_reported(name):
    page = PageEncoding(make_page(np.random.default_rng(0)).vectors)
    with pytest.raises(CompressionError, match="with_stats=True"):
        build(name).compress(page)


@pytest.mark.parametrize("name", ["sap", "uot"])
def test_nan_statistics_are_rejected(name):
    page = make_page(np.random.default_rng(0))
    page.centrality[2, 7] = np.nan
    with pytest.raises(CompressionError, match="centrality contains NaN"):
        build(name).compress(page)


def test_not_a_page_is_rejected():
    with pytest.raises(CompressionError, match="expected a PageEncoding"):
        build("random").compress(np.ones((4, 4), np.float32))


# ---- SAP ------------------------------------------------------------------------------------


def sap_transcription(centrality: np.ndarray, window: list[int], ratio: float) -> list[int]:
    """SPEC §4 literally: mean over the window, top-k, ties to the lower index, ascending."""
    n = centrality.shape[1]
    k = budget(n, ratio)
    scores = [sum(float(centrality[layer, j]) for layer in window) / len(window) for j in range(n)]
    ranked = sorted(range(n), key=lambda j: (-scores[j], j))
    return sorted(ranked[:k])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 80),
    n_layers=st.integers(1, 8),
    ratio=st.floats(0.01, 1.0),
    ties=st.booleans(),
    data=st.data(),
)
def test_sap_matches_spec_transcription(seed, n, n_layers, ratio, ties, data):
    rng = np.random.default_rng(seed)
    page = make_page(rng, n=n, d=4, n_layers=n_layers, integer_stats=ties)
    window = sorted(data.draw(st.sets(st.integers(0, n_layers - 1), min_size=1)))
    result = get_compressor("sap", ratio=ratio, layers=window).compress(page)
    assert result.kept.tolist() == sap_transcription(page.centrality, window, ratio)
    np.testing.assert_array_equal(result.vectors, page.vectors[result.kept])


def test_sap_batches_pages_of_mixed_shapes_like_single_pages():
    rng = np.random.default_rng(1)
    pages = [make_page(rng, n=n, n_layers=6) for n in (50, 64, 50, 7, 64)]
    sap = get_compressor("sap", ratio=0.2, layers=[2, 3, 4])
    many = sap.compress_many(pages)
    for page, got in zip(pages, many, strict=True):
        np.testing.assert_array_equal(got.kept, sap.compress(page).kept)


def test_sap_profiles_and_windows():
    assert get_compressor("sap", profile="colpali").layers == (11, 12, 13, 14)
    assert get_compressor("sap", profile="vidore/colqwen2-v1.0").layers == tuple(range(18, 24))
    assert get_compressor("sap", profile="jinaai/jina-embeddings-v4").layers == tuple(range(26, 34))
    sap = get_compressor("sap", profile="colpali")
    assert get_compressor(sap.name, **sap.params) == sap
    with pytest.raises(CompressionError, match="no built-in SAP profile"):
        get_compressor("sap", profile="vidore/colqwen2.5-v0.2")
    with pytest.raises(CompressionError, match="disagree"):
        get_compressor("sap", profile="colpali", layers=[1, 2])


def test_sap_profile_from_dict_and_file(tmp_path):
    profile = {"model_id": "m", "n_layers": 6, "window": [3, 4]}
    sap = get_compressor("sap", profile=profile)
    assert (sap.layers, sap.n_layers) == ((3, 4), 6)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    assert get_compressor("sap", profile=str(path)) == sap
    with pytest.raises(CompressionError, match="outside layers"):
        get_compressor("sap", profile={"model_id": "m", "n_layers": 4, "window": [3, 4]})


def test_sap_rejects_window_outside_page_layers_and_wrong_model():
    page = make_page(np.random.default_rng(0), n_layers=6)
    with pytest.raises(CompressionError, match=r"outside the page's decoder layers 0\.\.5"):
        get_compressor("sap", layers=[5, 6]).compress(page)
    with pytest.raises(CompressionError, match="profile is for 18 decoder layers"):
        get_compressor("sap", profile="colpali").compress(page)
    with pytest.raises(CompressionError, match="empty"):
        get_compressor("sap", layers=[])


@pytest.mark.parametrize(
    "n_layers, window",
    [(18, range(12, 16)), (28, range(20, 26)), (36, range(26, 34)), (2, [0]), (1, [0]), (5, [2])],
)
def test_sap_fallback_window_warns_and_follows_spec(n_layers, window):
    page = make_page(np.random.default_rng(0), n_layers=n_layers)
    with pytest.warns(UserWarning, match="uncalibrated fallback"):
        got = get_compressor("sap", ratio=0.25).compress(page)
    assert got.kept.tolist() == sap_transcription(page.centrality, list(window), 0.25)


# ---- baselines ------------------------------------------------------------------------------


def test_random_is_seeded_and_batch_independent():
    rng = np.random.default_rng(2)
    pages = [make_page(rng) for _ in range(3)]
    a = get_compressor("random", ratio=0.2, seed=7)
    kept = [p.kept.tolist() for p in a.compress_many(pages)]
    assert kept == [a.compress(p).kept.tolist() for p in pages]
    assert kept != [
        p.kept.tolist() for p in get_compressor("random", ratio=0.2, seed=8).compress_many(pages)
    ]


def test_eos_keeps_top_attention_at_the_chosen_layer():
    page = make_page(np.random.default_rng(3), n=40, n_layers=4)
    for layer in (-1, 0, 2):
        got = get_compressor("eos", ratio=0.1, layer=layer).compress(page)
        expected = np.sort(np.argsort(-page.eos_attention[layer], kind="stable")[:4])
        assert got.kept.tolist() == expected.tolist()
    with pytest.raises(CompressionError, match="layer 4 is outside"):
        get_compressor("eos", layer=4).compress(page)


def test_adaptive_eos_native_mode_uses_population_zscores():
    eos = np.array([[0.1, 0.2, 0.3, 0.4, 5.0, 0.0]], np.float32)
    page = PageEncoding(
        make_page(np.random.default_rng(0), n=6, n_layers=1).vectors, eos_attention=eos
    )
    row = eos[0].astype(np.float64)
    z = (row - row.mean()) / row.std(ddof=0)
    np.testing.assert_allclose(eos_zscores(page), z)
    got = get_compressor("adaptive-eos", kappa=0.0).compress(page)
    assert got.kept.tolist() == np.flatnonzero(z > 0).tolist()
    only_argmax = get_compressor("adaptive-eos", kappa=100.0).compress(page)
    assert only_argmax.kept.tolist() == [4]


def test_adaptive_eos_without_kappa_explains_both_modes():
    with pytest.raises(CompressionError, match=r"kappa is not set.*\.fit"):
        get_compressor("adaptive-eos").compress(make_page(np.random.default_rng(0)))


@pytest.mark.parametrize("ratio", [0.05, 0.1, 0.25])
def test_adaptive_eos_calibrated_keeps_ratio_on_average(ratio):
    rng = np.random.default_rng(4)
    pages = []
    for _ in range(30):
        page = make_page(rng, n=int(rng.integers(150, 300)), d=4, n_layers=2)
        page.eos_attention[-1] = rng.lognormal(0, rng.uniform(0.5, 1.5), page.n_tokens)
        pages.append(page)
    fitted = get_compressor("adaptive-eos", ratio=ratio).fit(pages)
    assert fitted.kappa == pytest.approx(calibrate_kappa(pages, ratio))
    assert get_compressor(fitted.name, **fitted.params) == fitted
    kept = [len(p.kept) for p in fitted.compress_many(pages)]
    target = ratio * np.mean([p.n_tokens for p in pages])
    assert abs(np.mean(kept) / target - 1) <= 0.05
    assert len(set(kept)) > 1  # the budget adapts per page


def relabel(labels: np.ndarray) -> np.ndarray:
    """Canonical cluster ids: order of first appearance."""
    seen: dict[int, int] = {}
    return np.array([seen.setdefault(int(v), len(seen)) for v in labels])


@pytest.mark.parametrize("n, ratio", [(60, 0.1), (97, 0.25), (40, 0.5)])
def test_cluster_matches_sklearn_and_scipy(n, ratio):
    from scipy.cluster.hierarchy import fcluster, linkage
    from sklearn.cluster import AgglomerativeClustering

    page = make_page(np.random.default_rng(n), n=n, d=8)
    got = get_compressor("cluster", ratio=ratio).compress(page)
    k = budget(n, ratio)
    x = page.vectors.astype(np.float64)
    sk = AgglomerativeClustering(n_clusters=k, metric="cosine", linkage="average").fit_predict(x)
    sp = fcluster(linkage(x, method="average", metric="cosine"), t=k, criterion="maxclust")
    np.testing.assert_array_equal(got.assignment, relabel(sk))
    np.testing.assert_array_equal(got.assignment, relabel(sp))
    for c in range(k):
        mean = x[got.assignment == c].mean(axis=0)
        np.testing.assert_allclose(got.vectors[c], mean / np.linalg.norm(mean), atol=1e-6)


@pytest.mark.parametrize("n, ratio", [(64, 0.1), (101, 0.25), (30, 1 / 3)])
def test_pool_matches_colpali_engine_pooler(n, ratio):
    import torch

    from vrag_compress.compress.baselines import _import_pooler

    page = make_page(np.random.default_rng(n), n=n, d=8)
    got = get_compressor("pool", ratio=ratio).compress(page)
    pooler = _import_pooler()()
    factor = round(1 / ratio)
    expected = pooler.pool_embeddings([torch.from_numpy(page.vectors.copy())], pool_factor=factor)
    np.testing.assert_allclose(got.vectors, expected[0].numpy(), atol=1e-6)
    assert len(got.vectors) == max(n // factor, 1)
    for row in range(len(got.vectors)):
        mean = page.vectors[got.assignment == row].mean(axis=0)
        np.testing.assert_allclose(got.vectors[row], mean / np.linalg.norm(mean), atol=1e-5)


# ---- properties over every method -----------------------------------------------------------


def expected_count(compressor, page: PageEncoding) -> int | None:
    if compressor.name == "identity":
        return page.n_tokens
    if compressor.name == "pool":
        return None  # the library's count, checked separately (<= N // factor, >= 1)
    if compressor.name == "adaptive-eos":
        return None  # adaptive by design
    return budget(page.n_tokens, compressor.ratio)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 48),
    d=st.integers(2, 8),
    ratio=st.floats(0.05, 1.0),
    dupes=st.booleans(),
    name=st.sampled_from(ALL_METHODS),
)
def test_every_method_keeps_budget_unit_vectors_and_provenance(seed, n, d, ratio, dupes, name):
    rng = np.random.default_rng(seed)
    pages = [make_page(rng, n=n, d=d, n_layers=3, dupes=dupes), make_page(rng, n=n + 5, d=d)]
    compressor = build(name, ratio=ratio, **({"layers": [1]} if name == "sap" else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = compressor.compress_many(pages)
    for page, got in zip(pages, results, strict=True):
        k = len(got.vectors)
        count = expected_count(compressor, page)
        if count is not None:
            assert k == count
        elif name == "pool":
            assert 1 <= k <= compressor.n_kept(page.n_tokens)
        assert 1 <= k <= page.n_tokens
        assert got.vectors.dtype == np.float32 and got.vectors.shape[1] == d
        assert np.isfinite(got.vectors).all()
        np.testing.assert_allclose(np.linalg.norm(got.vectors, axis=1), 1.0, atol=1e-5)
        if got.kept is not None:
            assert got.assignment is None
            assert np.all(np.diff(got.kept) > 0) and 0 <= got.kept.min()
            np.testing.assert_array_equal(got.vectors, page.vectors[got.kept])
        else:
            assert got.assignment.shape == (page.n_tokens,)
            assert set(got.assignment.tolist()) <= set(range(k))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 64), m=st.integers(1, 8))
def test_score_retention_of_identity_is_exactly_one(seed, n, m):
    rng = np.random.default_rng(seed)
    page = make_page(rng, n=n, d=8)
    query = rng.standard_normal((m, 8)).astype(np.float32)
    kept = get_compressor("identity").compress(page).vectors
    assert score_retention(query, page.vectors, kept) == 1.0


@pytest.mark.parametrize("name", ALL_METHODS)
def test_every_method_is_deterministic(name):
    rng = np.random.default_rng(9)
    pages = [make_page(rng, n=80) for _ in range(2)]
    first = build(name).compress_many(pages)
    second = build(name).compress_many(pages)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a.vectors, b.vectors)


def test_budget_rule_is_per_page_ceil():
    assert [budget(n, 0.1) for n in (1, 9, 10, 11, 30, 1024)] == [1, 1, 1, 2, 3, 103]
    assert budget(5, 1.0) == 5
    assert math.ceil(0.1 * 1030) == budget(1030, 0.1)
