"""The adaptive budget's check keeps the signal only for a gain larger than the span
pseudo-queries' own bias towards it (`budget_check.MARGIN`)."""

from __future__ import annotations

import numpy as np

from vrag_compress.compress.allocation import BudgetRule, allocate, fixed_count
from vrag_compress.compress.budget_check import MARGIN, BudgetCheck


def test_a_gain_within_the_span_bias_falls_back():
    assert not BudgetCheck(0.52, 0.50, 200).signal_helps  # +0.02: Cranfield-like, no real gain
    assert not BudgetCheck(0.50 + MARGIN, 0.50, 200).signal_helps
    assert BudgetCheck(0.57, 0.50, 200).signal_helps  # +0.07: Semanlink-like, a real gain
    assert not BudgetCheck(0.40, 0.50, 200).signal_helps


def test_the_coverage_signal_moves_vectors_from_long_pages_to_short_ones():
    """Why the check needs a margin: with tokens of the same spread, a page's coverage gains
    fall with its length, so short pages get more than their fixed share."""
    rng = np.random.default_rng(0)
    pages = []
    for n in [40] * 10 + [400] * 10:
        x = rng.standard_normal((n, 16)).astype(np.float32)
        pages.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    counts = allocate(BudgetRule(0.1), pages)
    share = [k / fixed_count(0.1, len(p)) for k, p in zip(counts, pages, strict=True)]
    assert np.mean(share[:10]) > 1.5 > 0.8 > np.mean(share[10:])
