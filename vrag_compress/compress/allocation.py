"""Adaptive budgets: spread an index-level budget of ``ratio * sum(N)`` vectors across pages.

A fixed budget gives every page ``ceil(ratio * N)`` vectors whatever it holds. The adaptive budget
gives pages whose tokens are diverse more vectors and repetitive or near-blank pages fewer, with a
per-page floor and cap (multiples of ``ratio * N``). The content signal is read from the page's
own token vectors, so it works for every method and every encoder:

- ``coverage`` (default): the page's coverage curve. Tokens are picked greedily farthest-first
  (k-centre); ``err(k)`` is the mean over the page's tokens of ``1 - cos`` to the nearest of the
  first k picks, and ``gain(k) = err(k) - err(k + 1)`` is what one more vector buys. Budgets go
  to the largest gains across pages (water-filling), so a vector is spent where it reduces a
  page's reconstruction error most.
- ``error``: one number per page, the reconstruction error ``N * err(ceil(ratio * N))`` at the
  fixed budget (how much of the page the fixed budget leaves uncovered); budgets are
  proportional to it.

The total is what the fixed budget would spend on the same pages, ``sum(ceil(ratio * N))``
(`fixed_total`): the adaptive budget moves vectors between pages, it never spends more than the
fixed budget nor less, so the two are compared at equal storage.

Streaming. Without a threshold, each call spreads the fixed total of its own pages
(a batch of ``compress_many``, one commit batch of an index): every batch and every later ``add``
spends exactly what the fixed budget would, so the index-level average stays at the fixed
budget's whatever the batching; a page's budget then depends on its batch. ``fit(pages)``
instead calibrates a threshold on sample pages (as ``adaptive-eos`` calibrates kappa): pages
are then budgeted one by one, independently of their batch, and the average is the fixed
budget's on pages like the calibration ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vrag_compress.compress.errors import CompressionError

BUDGETS = ("fixed", "adaptive")
SIGNALS = ("coverage", "error")


@dataclass(frozen=True)
class BudgetRule:
    """How an adaptive budget is set: the signal, the per-page floor and cap as multiples of
    ``ratio * N``, and the calibrated threshold (None: spread each batch's own share)."""

    ratio: float
    signal: str = "coverage"
    floor: float = 0.25
    cap: float = 4.0
    threshold: float | None = None

    def check(self, method: str) -> None:
        if self.signal not in SIGNALS:
            raise CompressionError(
                f"{method}: budget_signal must be one of {SIGNALS}, got {self.signal!r}"
            )
        if not (0.0 < float(self.floor) <= 1.0 <= float(self.cap)) or not math.isfinite(self.cap):
            raise CompressionError(
                f"{method}: need 0 < budget_floor <= 1 <= budget_cap (multiples of ratio * N), "
                f"got floor={self.floor}, cap={self.cap}"
            )
        if self.threshold is not None and not math.isfinite(float(self.threshold)):
            raise CompressionError(f"{method}: budget_threshold must be finite or None")

    def bounds(self, n_tokens: int) -> tuple[int, int]:
        """(floor, cap) vectors for a page of ``n_tokens``: floor >= 1, cap <= N."""
        share = self.ratio * n_tokens
        cap = min(n_tokens, max(1, math.ceil(self.cap * share - 1e-9)))
        return min(cap, max(1, math.ceil(self.floor * share - 1e-9))), cap


def coverage_curve(vectors: np.ndarray, k_max: int) -> np.ndarray:
    """``err(k)`` for k = 1..k_max: mean ``1 - cos`` of the page's tokens to the nearest of the
    first k farthest-first picks (the first pick is the token closest to the page's mean)."""
    x = np.asarray(vectors, dtype=np.float32)
    gram = x @ x.T
    nearest = gram[int(np.argmax(gram.sum(axis=1)))].copy()
    errors = np.empty(k_max)
    for k in range(k_max):
        if k:
            np.maximum(nearest, gram[int(np.argmin(nearest))], out=nearest)
        errors[k] = float(np.mean(1.0 - np.minimum(nearest, 1.0)))
    return errors


def fixed_count(ratio: float, n_tokens: int) -> int:
    """The fixed budget of one page: ``max(1, ceil(ratio * N))``, never more than N."""
    return min(n_tokens, max(1, math.ceil(ratio * n_tokens - 1e-9)))


def fixed_total(ratio: float, lengths: Sequence[int]) -> int:
    """What the fixed budget spends on pages of these lengths: the adaptive budget's total."""
    return sum(fixed_count(ratio, n) for n in lengths)


def _page_signals(rule: BudgetRule, pages: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per page: the gains above its floor (coverage) or a one-element array (error)."""
    out = []
    for x in pages:
        low, high = rule.bounds(len(x))
        if rule.signal == "coverage":
            curve = coverage_curve(x, high)
            out.append(curve[low - 1 : high - 1] - curve[low:high])
        else:
            fixed = fixed_count(rule.ratio, len(x))
            out.append(np.array([len(x) * coverage_curve(x, fixed)[-1]]))
    return out


def _counts(rule: BudgetRule, pages: Sequence[np.ndarray], signals, threshold: float) -> list[int]:
    counts = []
    for x, signal in zip(pages, signals, strict=True):
        low, high = rule.bounds(len(x))
        if rule.signal == "coverage":
            counts.append(low + int(np.count_nonzero(signal >= threshold)))
        else:
            counts.append(int(np.clip(round(threshold * float(signal[0])), low, high)))
    return counts


def _batch_threshold(rule: BudgetRule, pages: Sequence[np.ndarray], signals) -> float:
    """The threshold whose budgets over ``pages`` add up to their `fixed_total`."""
    total = fixed_total(rule.ratio, [len(x) for x in pages])
    if rule.signal == "coverage":
        floors = sum(rule.bounds(len(x))[0] for x in pages)
        gains = np.sort(np.concatenate([*signals, np.empty(0)]))[::-1]
        extra = total - floors
        if extra <= 0 or not gains.size:
            return math.inf
        return float(gains[min(extra, gains.size) - 1])
    low, high = 0.0, 1.0
    while sum(_counts(rule, pages, signals, high)) < total and high < 1e12:
        high *= 2.0
    for _ in range(60):  # the largest threshold whose total does not pass the budget
        mid = 0.5 * (low + high)
        if sum(_counts(rule, pages, signals, mid)) <= total:
            low = mid
        else:
            high = mid
    return low


def allocate(rule: BudgetRule, pages: Sequence[np.ndarray]) -> list[int]:
    """Vectors to keep per page ([N_i, D] unit rows): by the calibrated threshold when the rule
    has one, else spreading these pages' `fixed_total` over them."""
    if not pages:
        return []
    signals = _page_signals(rule, pages)
    threshold = rule.threshold
    if threshold is None:
        threshold = _batch_threshold(rule, pages, signals)
        if rule.signal == "coverage":
            return _exact_counts(rule, pages, signals, threshold)
    return _counts(rule, pages, signals, threshold)


def _exact_counts(rule: BudgetRule, pages: Sequence[np.ndarray], signals, threshold) -> list[int]:
    """Counts at ``threshold`` with ties at it broken by page order, so a batch spends exactly
    its fixed total (floors and caps permitting)."""
    total = fixed_total(rule.ratio, [len(x) for x in pages])
    above = [int(np.count_nonzero(s > threshold)) for s in signals]
    tied = [int(np.count_nonzero(s == threshold)) for s in signals]
    counts = [rule.bounds(len(x))[0] + a for x, a in zip(pages, above, strict=True)]
    room = max(0, total - sum(counts))
    for i, t in enumerate(tied):
        take = min(t, room)
        counts[i] += take
        room -= take
    return counts


def fit_threshold(rule: BudgetRule, pages: Sequence[np.ndarray]) -> float:
    """The threshold that spends the fixed total of ``pages`` (calibration pages)."""
    if not pages:
        raise CompressionError("an adaptive budget is calibrated on at least one page")
    signals = _page_signals(rule, pages)
    threshold = _batch_threshold(rule, pages, signals)
    if not math.isfinite(threshold):  # the floors alone spend the budget
        threshold = float(np.max(np.concatenate([*signals, np.zeros(1)]))) + 1.0
    return threshold
