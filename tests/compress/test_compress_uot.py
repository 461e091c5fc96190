"""UOT merging: the Sinkhorn solver against POT, SPEC §7 step by step, the batched fast path
against the literal per-page reference, k-means++ reproducibility."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from vrag_compress.compress import CompressionError, budget, get_compressor, uot_reference
from vrag_compress.compress.common import page_seed
from vrag_compress.compress.uot import (
    kmeanspp_init,
    kmeanspp_uniforms,
    sinkhorn_uot_linear,
    sinkhorn_uot_log,
    source_marginal,
)
from vrag_compress.encoders.base import PageEncoding


def unit(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_page(rng, n=96, d=16, n_layers=4, stats=True) -> PageEncoding:
    x = unit(rng, n, d).astype(np.float32)
    centrality = rng.gamma(1.0, 1.0, (n_layers, n)).astype(np.float32) if stats else None
    return PageEncoding(x, centrality=centrality)


def ot_problem(seed=0, n=40, k=6, d=8):
    rng = np.random.default_rng(seed)
    x, y = unit(rng, n, d), unit(rng, k, d)
    mu = rng.dirichlet(np.ones(n))
    return 1.0 - x @ y.T, mu, np.full(k, 1.0 / k)


def spec_sinkhorn(cost, mu, nu, eps, rho, iters):
    """SPEC §7's log-domain Sinkhorn, transcribed with numpy/scipy."""
    from scipy.special import logsumexp  # here: collecting the module needs no scipy

    phi = rho / (rho + eps)
    log_u, log_v = np.zeros(len(mu)), np.zeros(len(nu))
    for _ in range(iters):
        log_u = phi * (np.log(mu) - logsumexp(-cost / eps + log_v[None, :], axis=1))
        log_v = phi * (np.log(nu) - logsumexp(-cost / eps + log_u[:, None], axis=0))
    return np.exp(log_u[:, None] - cost / eps + log_v[None, :])


def pot_plan(cost, mu, nu, eps, rho, iters):
    import ot

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # POT warns that reg_type="entropy" ignores c
        return ot.unbalanced.sinkhorn_knopp_unbalanced(
            mu, nu, cost, reg=eps, reg_m=rho, reg_type="entropy", numItermax=iters, stopThr=0.0
        )


def linear_plan(cost, mu, nu, eps, rho, iters):
    kernel_t = torch.from_numpy(np.exp(-cost / eps).T.copy())[None]
    u, v = sinkhorn_uot_linear(
        kernel_t, torch.from_numpy(mu)[None], torch.from_numpy(nu)[None], eps, rho, iters
    )
    return (u[0][:, None] * kernel_t[0].T * v[0][None, :]).numpy()


def log_plan(cost, mu, nu, eps, rho, iters):
    args = (torch.from_numpy(cost), torch.from_numpy(mu), torch.from_numpy(nu))
    return sinkhorn_uot_log(*args, eps, rho, iters).numpy()


@pytest.mark.parametrize(
    "solver, eps, rho",
    [
        (log_plan, 0.04, 5.0),
        (log_plan, 0.1, 1.0),
        (log_plan, 0.01, 5.0),
        (linear_plan, 0.04, 5.0),
        (linear_plan, 0.1, 1.0),
    ],  # linear domain only for eps >= 0.025
)
def test_sinkhorn_converges_to_pot_plan(solver, eps, rho):
    cost, mu, nu = ot_problem()
    expected = pot_plan(cost, mu, nu, eps, rho, 3000)
    got = solver(cost, mu, nu, eps, rho, 3000)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-15)
    assert abs(got.sum() - 1.0) < 0.5  # unbalanced: mass is near, not at, 1


@pytest.mark.parametrize("solver", [log_plan, linear_plan])
def test_three_sinkhorn_iterations_follow_the_spec(solver):
    cost, mu, nu = ot_problem(seed=3, n=50, k=7)
    expected = spec_sinkhorn(cost, mu, nu, 0.04, 5.0, 3)
    np.testing.assert_allclose(solver(cost, mu, nu, 0.04, 5.0, 3), expected, rtol=1e-10)
    np.testing.assert_allclose(pot_plan(cost, mu, nu, 0.04, 5.0, 3), expected, rtol=1e-10)


def spec_em(x, mu, init, eps=0.04, rho=5.0, iters=20, sinkhorn_iters=3):
    """SPEC §7's EM loop with numpy (float64)."""
    y = init.copy()
    k = len(y)
    for _ in range(iters):
        plan = spec_sinkhorn(1.0 - x @ y.T, mu, np.full(k, 1.0 / k), eps, rho, sinkhorn_iters)
        raw = plan.T @ x
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        keep_old = (plan.sum(axis=0) == 0)[:, None]
        y_new = np.where(keep_old, y, raw / np.where(norms == 0, 1, norms))
        moved = np.linalg.norm(y_new - y, axis=1).max()
        y = y_new
        if moved <= 1e-4:
            break
    return y


def init_for(page: PageEncoding, k: int, seed: int = 0) -> np.ndarray:
    x = torch.from_numpy(page.vectors)[None]
    mask = torch.ones(1, page.n_tokens, dtype=torch.bool)
    uniforms = torch.as_tensor(kmeanspp_uniforms(page_seed(seed, page), k))[None]
    return kmeanspp_init(x, mask, k, uniforms)[0].numpy()


@pytest.mark.parametrize("iters", [1, 5, 20])
def test_reference_follows_spec_em_step_by_step(iters):
    page = make_page(np.random.default_rng(iters), n=80)
    init = init_for(page, 8).astype(np.float64)
    mu = source_marginal(page)
    y, _ = uot_reference(page.vectors.astype(np.float64), mu, init, iters=iters, dtype="float64")
    np.testing.assert_allclose(
        y, spec_em(page.vectors.astype(np.float64), mu, init, iters=iters), atol=1e-5
    )


@pytest.mark.parametrize("epsilon", [0.04, 0.01])
@pytest.mark.parametrize("n", [64, 200])
def test_fast_path_equals_literal_reference(n, epsilon):
    page = make_page(np.random.default_rng(n), n=n, d=32)
    uot = get_compressor("uot", ratio=0.1, epsilon=epsilon)
    got = uot.compress(page)
    k = budget(n, 0.1)
    y, assignment = uot_reference(
        page.vectors, source_marginal(page), init_for(page, k), epsilon=epsilon
    )
    np.testing.assert_allclose(got.vectors, y, atol=1e-4)
    assert (got.assignment == assignment).mean() > 0.99


def test_batched_equals_per_page_with_mixed_lengths():
    rng = np.random.default_rng(5)
    pages = [make_page(rng, n=n) for n in (96, 40, 130, 96, 9, 61)]
    pages.append(make_page(rng, n=50, stats=False))  # uniform marginal
    uot = get_compressor("uot", ratio=0.15, batch_size=3)
    batched = uot.compress_many(pages)
    for page, got in zip(pages, batched, strict=True):
        alone = uot.compress(page)
        np.testing.assert_allclose(got.vectors, alone.vectors, atol=1e-5)
        np.testing.assert_array_equal(got.assignment, alone.assignment)


def test_kmeanspp_is_reproducible_per_seed_and_picks_distinct_rows():
    page = make_page(np.random.default_rng(6), n=120)
    a, b, c = init_for(page, 12, seed=1), init_for(page, 12, seed=1), init_for(page, 12, seed=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    rows = [int(np.argmax(page.vectors @ centre)) for centre in a]
    assert len(set(rows)) == 12  # a chosen point has distance 0 and is never drawn again
    np.testing.assert_allclose(a, page.vectors[rows], atol=1e-6)
    first = get_compressor("uot", seed=1).compress(page).vectors
    np.testing.assert_array_equal(first, get_compressor("uot", seed=1).compress(page).vectors)
    assert not np.array_equal(first, get_compressor("uot", seed=2).compress(page).vectors)


def test_kmeanspp_with_duplicate_points_falls_back_to_uniform():
    x = np.repeat(unit(np.random.default_rng(0), 2, 4), 10, axis=0).astype(np.float32)
    page = PageEncoding(x)
    got = get_compressor("uot", ratio=0.25, marginal="uniform").compress(page)
    assert got.vectors.shape == (5, 4) and np.isfinite(got.vectors).all()


def test_marginal_from_layer_averaged_centrality():
    page = make_page(np.random.default_rng(7), n=30)
    a = page.centrality.astype(np.float64).mean(axis=0) + 1e-9
    np.testing.assert_allclose(source_marginal(page), a / a.sum())
    np.testing.assert_allclose(source_marginal(page, "uniform"), np.full(30, 1 / 30))


def test_small_pages_are_stored_as_is():
    page = make_page(np.random.default_rng(8), n=3)
    got = get_compressor("uot", ratio=0.9).compress(page)
    np.testing.assert_array_equal(got.vectors, page.vectors)
    assert got.assignment.tolist() == [0, 1, 2]


def test_bf16_mode_is_close_to_fp32():
    page = make_page(np.random.default_rng(10), n=200, d=32)
    fp32 = get_compressor("uot").compress(page)
    bf16 = get_compressor("uot", precision="bf16").compress(page)
    assert bf16.vectors.shape == fp32.vectors.shape
    np.testing.assert_allclose(np.linalg.norm(bf16.vectors, axis=1), 1.0, atol=1e-5)
    assert np.median(np.sum(bf16.vectors * fp32.vectors, axis=1)) > 0.95


@pytest.mark.parametrize(
    "params, message",
    [
        ({"epsilon": 0}, "epsilon"),
        ({"rho": float("inf")}, "rho"),
        ({"iters": 0}, "iters"),
        ({"precision": "fp8"}, "precision"),
        ({"marginal": "eos"}, "marginal"),
    ],
)
def test_bad_uot_parameters_are_rejected(params, message):
    with pytest.raises(CompressionError, match=message):
        get_compressor("uot", **params)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    pages = [make_page(np.random.default_rng(11), n=n, d=32) for n in (100, 150)]
    cpu = get_compressor("uot").compress_many(pages)
    gpu = get_compressor("uot", device="cuda").compress_many(pages)
    for a, b in zip(cpu, gpu, strict=True):
        np.testing.assert_allclose(a.vectors, b.vectors, atol=1e-4)
