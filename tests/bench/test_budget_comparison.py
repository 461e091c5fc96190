"""`vrag bench retention` puts each adaptive-budget row beside its fixed twin, with the noise."""

from __future__ import annotations

import numpy as np

from vrag_compress_bench.eval.runner import (
    MethodSpec,
    compare_budgets,
    fixed_twin,
    paired_difference,
)


def test_the_fixed_twin_drops_only_the_budget_parameters() -> None:
    assert fixed_twin(MethodSpec.parse("uot:budget=adaptive")) == "uot"
    spec = MethodSpec.parse("uot:budget=adaptive:budget_fallback=false:epsilon=0.01")
    assert fixed_twin(spec) == "uot:epsilon=0.01"
    assert fixed_twin(MethodSpec.parse("uot")) is None
    assert fixed_twin(MethodSpec.parse("uot:budget=fixed")) is None


def test_the_paired_interval_tells_noise_from_a_real_loss() -> None:
    rng = np.random.default_rng(0)
    full = rng.uniform(0.3, 1.0, 200)
    same = full * rng.uniform(0.8, 1.0, 200)
    noisy = same + rng.normal(0.0, 0.05, 200)
    difference, low, high = paired_difference(noisy, same, full)
    assert low <= 0.0 <= high and low <= difference <= high
    difference, low, high = paired_difference(same - 0.2, same, full)
    assert high < 0.0 and abs(difference + 0.2 / full.mean()) < 1e-9
    assert paired_difference(same, same, full) == (0.0, 0.0, 0.0)


def test_only_adaptive_rows_with_a_fixed_twin_get_a_comparison() -> None:
    specs = [MethodSpec.parse(m) for m in ("uot", "uot:budget=adaptive", "sap:budget=adaptive")]
    full = np.linspace(0.5, 1.0, 50)
    per_query = {
        ("uot", 0.1): full * 0.9,
        ("uot:budget=adaptive", 0.1): full * 0.5,
        ("sap:budget=adaptive", 0.1): full * 0.8,
    }
    rows = [{"method": label, "ratio": 0.1} for label, _ in per_query]
    compare_budgets(specs, rows, per_query, full, seed=0)
    assert "vs_fixed" not in rows[0] and "vs_fixed" not in rows[2]
    versus = rows[1]["vs_fixed"]
    assert versus["method"] == "uot" and abs(versus["difference"] + 0.4) < 1e-9
    assert versus["high"] < 0 and versus["within_noise_or_better"] is False
