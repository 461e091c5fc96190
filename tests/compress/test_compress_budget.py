"""Adaptive budgets: the fixed budget's total, sum(ceil(ratio * N)), spread by page content."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vrag_compress.compress import CompressionError, compressor_for, get_compressor
from vrag_compress.compress.allocation import (
    BudgetRule,
    allocate,
    coverage_curve,
    fixed_count,
    fixed_total,
)
from vrag_compress.encoders.base import PageEncoding

METHODS = ["sap", "uot", "random", "eos", "cluster", "sap-sink", "uot-sap"]
WINDOW = {"layers": [1, 2]}


def page(rng: np.random.Generator, n: int, distinct: int, d: int = 16) -> PageEncoding:
    """A page of ``n`` tokens drawn around ``distinct`` directions (few: repetitive page)."""
    centres = rng.standard_normal((distinct, d))
    x = centres[rng.integers(0, distinct, n)] + 0.05 * rng.standard_normal((n, d))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    return PageEncoding(
        x,
        centrality=rng.random((4, n)).astype(np.float32),
        eos_attention=rng.dirichlet(np.ones(n), 4).astype(np.float32),
    )


def corpus(seed: int, n_pages: int) -> list[PageEncoding]:
    rng = np.random.default_rng(seed)
    return [
        page(rng, int(rng.integers(20, 120)), int(rng.choice([2, 5, 40]))) for _ in range(n_pages)
    ]


def adaptive(name: str, ratio: float, **extra):
    params = WINDOW if name in ("sap", "sap-sink", "uot-sap") else {}
    return get_compressor(name, ratio=ratio, budget="adaptive", **params, **extra)


def realised(pages: list[PageEncoding], compressed) -> float:
    return sum(c.vectors.shape[0] for c in compressed) / sum(p.n_tokens for p in pages)


def fixed_realised(pages: list[PageEncoding], ratio: float) -> float:
    """What the fixed budget keeps of these pages: the adaptive budget's target."""
    return fixed_total(ratio, [p.n_tokens for p in pages]) / sum(p.n_tokens for p in pages)


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("ratio", [0.25, 0.1, 0.05])
def test_adaptive_spends_what_the_fixed_budget_spends_never_more(name, ratio):
    pages = corpus(0, 24)
    out = adaptive(name, ratio).compress_many(pages)
    target = fixed_realised(pages, ratio)
    assert realised(pages, out) == pytest.approx(target, rel=0.05)
    assert realised(pages, out) <= target + 1e-12


@pytest.mark.parametrize("signal", ["coverage", "error"])
def test_diverse_pages_keep_more_than_repetitive_pages_of_the_same_length(signal):
    rng = np.random.default_rng(1)
    pages = [page(rng, 80, 2), page(rng, 80, 60), page(rng, 80, 3), page(rng, 80, 50)]
    counts = adaptive("random", 0.1, budget_signal=signal).keep_counts(pages)
    assert counts[1] > counts[0] and counts[3] > counts[2]
    assert sum(counts) == pytest.approx(0.1 * 320, abs=1)


def test_floor_and_cap_bound_every_page():
    rule = BudgetRule(0.1, floor=0.5, cap=2.0)
    rng = np.random.default_rng(2)
    pages = [page(rng, 100, 1).vectors] * 3 + [page(rng, 100, 90).vectors]
    counts = allocate(rule, pages)
    assert all(rule.bounds(100)[0] <= k <= rule.bounds(100)[1] for k in counts)
    assert counts[3] == 20 and sum(counts) == 40  # the diverse page hits the cap


def test_coverage_curve_falls_to_zero_once_every_direction_is_picked():
    rng = np.random.default_rng(3)
    x = page(rng, 50, 3).vectors
    curve = coverage_curve(x, 10)
    assert np.all(np.diff(curve) <= 1e-6) and curve[0] > 0.1 and curve[4] < 0.02


@pytest.mark.parametrize("name", ["sap", "uot"])
def test_streaming_batches_and_later_adds_keep_the_average(name):
    """As an index commits them: batches of 4 pages over two `add` calls."""
    pages = corpus(4, 40)
    compressor = adaptive(name, 0.1)
    out = []
    for start in range(0, len(pages), 4):
        out += compressor.compress_many(pages[start : start + 4])
    assert realised(pages, out) == pytest.approx(fixed_realised(pages, 0.1), rel=0.05)
    assert realised(pages, out) <= fixed_realised(pages, 0.1) + 1e-12


def similar_pages(seed: int, n_pages: int) -> list[PageEncoding]:
    rng = np.random.default_rng(seed)
    return [page(rng, int(rng.integers(20, 120)), int(rng.integers(2, 41))) for _ in range(n_pages)]


@pytest.mark.parametrize("seed", [6, 7])
def test_a_calibrated_threshold_keeps_the_average_on_new_pages(seed):
    fitted = adaptive("sap", 0.1).fit(similar_pages(5, 300))
    assert fitted.fitted and fitted.budget_threshold is not None
    later = similar_pages(seed, 300)  # pages the threshold never saw, arriving one by one
    out = [fitted.compress(p) for p in later]
    assert realised(later, out) == pytest.approx(fixed_realised(later, 0.1), rel=0.05)
    batch = fitted.compress_many(later)  # independent of batching once calibrated
    assert [len(c.kept) for c in batch] == [len(c.kept) for c in out]


@pytest.mark.parametrize("name", ["sap", "uot", "random"])
def test_adaptive_budgets_are_reproducible(name):
    pages = corpus(7, 12)
    first = adaptive(name, 0.1).compress_many(pages)
    again = adaptive(name, 0.1).compress_many(pages)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a.vectors, b.vectors)


def test_params_round_trip_and_fixed_params_are_unchanged():
    fitted = adaptive("uot", 0.1).fit(corpus(8, 10))
    params = json.loads(json.dumps(fitted.params))
    assert params["budget"] == "adaptive" and params["budget_threshold"] is not None
    assert get_compressor("uot", **params) == fitted
    assert "budget" not in get_compressor("sap", ratio=0.1, layers=[1]).params


def test_bad_budget_parameters_are_clear():
    with pytest.raises(CompressionError, match="budget must be one of"):
        get_compressor("sap", ratio=0.1, budget="elastic")
    with pytest.raises(CompressionError, match="pool sets its own vector counts"):
        get_compressor("pool", ratio=0.1, budget="adaptive")
    with pytest.raises(CompressionError, match="identity sets its own"):
        get_compressor("identity", budget="adaptive")
    with pytest.raises(CompressionError, match="only apply with budget='adaptive'"):
        get_compressor("sap", ratio=0.1, budget_signal="error")
    with pytest.raises(CompressionError, match="budget_signal must be one of"):
        get_compressor("sap", ratio=0.1, budget="adaptive", budget_signal="entropy")
    with pytest.raises(CompressionError, match="budget_floor"):
        get_compressor("sap", ratio=0.1, budget="adaptive", budget_floor=2.0)


def test_compressor_for_passes_the_budget_and_the_benchmark_spec_parses_it():
    from vrag_compress_bench.eval.runner import MethodSpec

    spec = MethodSpec.parse("uot:budget=adaptive")
    assert spec.params == {"budget": "adaptive"}
    built = compressor_for(spec.name, n_layers=4, ratio=0.05, **spec.params)
    assert built.budget == "adaptive" and built.ratio == 0.05


def test_an_index_with_an_adaptive_budget_keeps_the_average_across_add_calls(tmp_path, shared_data):
    """`vrag index --method random:budget=adaptive` twice: batches of 2 pages, two `add` calls."""
    from typer.testing import CliRunner

    from vrag_compress import VisualIndex
    from vrag_compress.cli import app

    images = sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())
    index = tmp_path / "adaptive.vrag"
    for part in (images[:5], images[5:]):
        args = ["index", *map(str, part), "--index", str(index), "--model", "tiny-colqwen2"]
        args += ["--method", "random:budget=adaptive", "--ratio", "0.25", "--batch-size", "2"]
        result = CliRunner().invoke(app, [*args, "--ocr", "never"])
        assert result.exit_code == 0, result.output
    with VisualIndex.open(index) as opened:
        assert opened.info()["compressor_params"]["budget"] == "adaptive"
        records = opened.store.get(opened.store.page_ids())
    kept = sum(r.vectors.shape[0] for r in records)
    tokens = sum(r.metadata["n_tokens"] for r in records)
    assert len(records) == len(images) and kept / tokens == pytest.approx(0.25, rel=0.05)


def test_a_custom_method_without_a_per_page_count_refuses_an_adaptive_budget():
    from dataclasses import dataclass
    from typing import ClassVar

    from vrag_compress import BaseCompressor, CompressedPage

    @dataclass(frozen=True)
    class FirstTokens(BaseCompressor):  # the documented pattern: a ratio field and _compress
        name: ClassVar[str] = "first-tokens"
        ratio: float = 0.5

        def _compress(self, page):
            kept = np.arange(max(1, int(self.ratio * page.n_tokens)))
            return CompressedPage(vectors=page.vectors[kept], kept=kept)

    @dataclass(frozen=True)
    class FirstK(FirstTokens):
        def _compress_k(self, page, k):
            kept = np.arange(k)
            return CompressedPage(vectors=page.vectors[kept], kept=kept)

    pages = corpus(0, 6)
    assert len(FirstTokens().compress(pages[0]).vectors) == pages[0].n_tokens // 2  # fixed works
    with pytest.raises(CompressionError, match="must implement _compress_k"):
        FirstTokens(budget="adaptive")
    counts = [len(c.vectors) for c in FirstK(budget="adaptive").compress_many(pages)]
    assert counts == FirstK(budget="adaptive").keep_counts(pages)


# ------------------------------------------------------------- the check and its fallback
@pytest.mark.parametrize("ratio", [0.25, 0.1, 0.05])
def test_the_fallback_is_the_fixed_budget_page_by_page(ratio):
    from vrag_compress.compress.budget_check import fixed_shares

    lengths = [p.n_tokens for p in corpus(9, 60)] + [1, 3]
    counts = fixed_shares(ratio, lengths)
    assert counts == [get_compressor("random", ratio=ratio).n_keep(n) for n in lengths]
    assert sum(counts) == fixed_total(ratio, lengths)
    assert all(k == fixed_count(ratio, n) >= 1 for k, n in zip(counts, lengths, strict=True))


def test_the_check_keeps_the_signal_only_when_it_ranks_better():
    from vrag_compress.compress.budget_check import check_signal

    pages = corpus(10, 40)

    def compress(batch, adaptive):  # the adaptive side keeps one token per page: worse
        return [p.vectors[:1] if adaptive else p.vectors[: max(1, p.n_tokens // 4)] for p in batch]

    check = check_signal(compress, pages)
    assert check.n_queries == 40 and check.adaptive < check.fixed and not check.signal_helps
    flipped = check_signal(lambda batch, adaptive: compress(batch, not adaptive), pages)
    assert flipped.signal_helps and flipped.adaptive == check.fixed


def test_an_unhelpful_signal_falls_back_to_the_fixed_shares(monkeypatch):
    from vrag_compress.compress import base
    from vrag_compress.compress.budget_check import CHECK_MIN_PAGES, BudgetCheck, fixed_shares

    pages = corpus(11, CHECK_MIN_PAGES)
    lengths = [p.n_tokens for p in pages]
    by_signal = allocate(BudgetRule(0.1), [p.vectors for p in pages])
    assert by_signal != fixed_shares(0.1, lengths)
    for adaptive_ndcg, expected in ((0.4, fixed_shares(0.1, lengths)), (0.6, by_signal)):
        monkeypatch.setattr(
            base.BaseCompressor,
            "check_budget",
            lambda self, pages, a=adaptive_ndcg: BudgetCheck(a, 0.5, len(pages)),
        )
        assert adaptive("random", 0.1).keep_counts(pages) == expected
    # a small batch (an index commit) is not checked: the signal spreads it
    assert adaptive("random", 0.1).keep_counts(pages[:4]) == allocate(
        BudgetRule(0.1), [p.vectors for p in pages[:4]]
    )
    # forced either way, nothing is checked
    assert adaptive("random", 0.1, budget_fallback=True).keep_counts(pages) == fixed_shares(
        0.1, lengths
    )


def test_a_fitted_fallback_is_recorded_and_spends_the_fixed_budget(monkeypatch):
    from vrag_compress.compress import base
    from vrag_compress.compress.budget_check import BudgetCheck

    monkeypatch.setattr(
        base.BaseCompressor, "check_budget", lambda self, pages: BudgetCheck(0.1, 0.2, 9)
    )
    fitted = adaptive("sap", 0.05).fit(similar_pages(13, 100))
    assert fitted.budget_fallback is True
    assert get_compressor("sap", **json.loads(json.dumps(fitted.params))) == fitted
    later = similar_pages(14, 200)
    assert realised(later, fitted.compress_many(later)) == fixed_realised(later, 0.05)
    with pytest.raises(CompressionError, match="budget_fallback must be"):
        get_compressor("sap", ratio=0.1, layers=[1], budget="adaptive", budget_fallback="yes")


def test_the_benchmark_settles_the_check_once_and_reports_it(monkeypatch):
    from vrag_compress.compress import base
    from vrag_compress.compress.budget_check import CHECK_MIN_PAGES, BudgetCheck
    from vrag_compress_bench.eval.runner import settle_budget

    monkeypatch.setattr(
        base.BaseCompressor, "check_budget", lambda self, pages: BudgetCheck(0.3, 0.4, 7)
    )
    pages = corpus(15, CHECK_MIN_PAGES)
    settled, figures = settle_budget(adaptive("random", 0.1), pages)
    assert settled.budget_fallback is True and figures is not None
    assert figures == {
        "pseudo_ndcg_adaptive": 0.3,
        "pseudo_ndcg_fixed": 0.4,
        "n_queries": 7,
        "fallback": True,
    }
    fixed = get_compressor("random", ratio=0.1)
    assert settle_budget(fixed, pages) == (fixed, None)
    forced = adaptive("random", 0.1, budget_fallback=False)
    assert settle_budget(forced, pages) == (forced, None)
    assert settle_budget(adaptive("random", 0.1), pages[:4])[1] is None  # too few to check
