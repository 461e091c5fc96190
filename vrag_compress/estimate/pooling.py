"""Estimates combined: several page samples pooled into one figure with an interval that
includes how another sample moves it, and lead and keyword estimates side by side."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from vrag_compress.estimate.report import RANGE_TERMS, EstimateRow, RetentionEstimate
from vrag_compress.estimate.validation import POOL_ADVICE, bias_notes, fallback_note

BRACKET_NOTE = (
    "keyword column: the same estimate with keyword pseudo-queries (tag and rare-word lookups); "
    "pooled over five page samples it was within ±0.07 of the judged retention on three judged "
    "keyword collections and 0.08-0.14 above it on subject tags, and on topical questions up to "
    "0.23 below it, while the lead figure was within "
    "±0.09 on topical questions and up to 0.24 above on keyword lookups: read the lead figure "
    "for questions, the keyword figure for lookups and the two as the range when users do both"
)
RANGE_ADVICE = (
    "range: how much a method keeps lies between the topical-question (lead) and the lookup "
    f"(keyword) figure depending on how your users ask, {RANGE_TERMS} (one "
    "sample of pages moves each figure); a figure on your users' own questions "
    "settles it: pass --queries-file FILE (one question a line), or --judged QRELS for judged "
    "retention"
)


def pooled(samples: Sequence[RetentionEstimate], level: float = 0.9) -> RetentionEstimate:
    """One estimate from several page samples of the same source: each figure is the mean over
    the samples, and ``low``-``high`` is that mean's t-interval (``level``) over them, or the
    samples' own intervals (averaged) where those are wider: samples of a small source are
    (nearly) the same pages and agree, which says nothing of another draw of their queries. One
    sample's bootstrap interval covers another draw of its queries only; another draw of pages
    also changes the distractors and the neighbours: five samples of 400 pages spread the
    keyword estimate with a standard deviation of up to ``KEYWORD_DRAW_SD`` (docs/retention.md),
    so the spread between samples is what says how far the figure can move. Each sample is one
    query kind: "both" pools lead and keyword apart and brackets them after."""
    if len(samples) == 1:
        return samples[0]
    rows = [_pooled_row(list(at), level) for at in zip(*(s.rows for s in samples), strict=True)]
    first = samples[0]
    fallbacks = sum(s.fallback_queries for s in samples)
    n_queries = sum(s.n_queries for s in samples)
    result = replace(
        first,
        rows=rows,
        n_queries=n_queries,
        fallback_queries=fallbacks,
        tokens_per_page_full=float(np.mean([s.tokens_per_page_full for s in samples])),
        profile={k: float(np.mean([s.profile[k] for s in samples])) for k in first.profile},
        draws=len(samples),
        notes=fallback_note(fallbacks, n_queries),
    )
    result.notes += bias_notes(result)
    result.notes.append(
        f"pooled over {len(samples)} page samples of {first.n_pages} pages: each figure is "
        f"their mean and its interval the {level:.0%} t-interval of that mean over the samples"
    )
    return result


def _pooled_row(rows: list[EstimateRow], level: float) -> EstimateRow:
    values = [r.estimated for r in rows]
    low, high = _wider(mean_interval(values, level), [(r.low, r.high) for r in rows])
    return replace(
        rows[0],
        estimated=float(np.mean(values)),
        low=low,
        high=high,
        estimated_sd=float(np.std(values, ddof=1)),
        draws=[float(v) for v in values],
        sr=float(np.mean([r.sr for r in rows])),
        rank_agreement=float(np.mean([r.rank_agreement for r in rows])),
        tokens_per_page=float(np.mean([r.tokens_per_page for r in rows])),
    )


def _wider(between: tuple[float, float], own: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The interval between samples, widened to the samples' own (averaged) where they reach
    further."""
    lows, highs = zip(*own, strict=True)
    return float(np.fmin(between[0], np.mean(lows))), float(np.fmax(between[1], np.mean(highs)))


def mean_interval(values: Sequence[float], level: float = 0.9) -> tuple[float, float]:
    """The t-interval (``level``) of the mean of ``values``, independent draws of one figure."""
    from scipy.stats import t  # type: ignore[import-untyped]

    mean, n = float(np.mean(values)), len(values)
    half = float(t.ppf(0.5 + level / 2, n - 1) * np.std(values, ddof=1) / math.sqrt(n))
    return mean - half, mean + half


def bracketed(lead: RetentionEstimate, keyword: RetentionEstimate) -> RetentionEstimate:
    """The lead estimate with the keyword estimate of each row beside it (``keyword``)."""
    rows = [
        replace(row, keyword=other.estimated, keyword_low=other.low, keyword_high=other.high)
        for row, other in zip(lead.rows, keyword.rows, strict=True)
    ]
    advice = [POOL_ADVICE] if keyword.draws == 1 else []
    return replace(lead, rows=rows, notes=[*lead.notes, BRACKET_NOTE, RANGE_ADVICE, *advice])
