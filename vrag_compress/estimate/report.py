"""What a label-free estimate reports: one row per method and keep ratio, the recommendation
drawn from them, and the defaults every part of the estimate shares."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_METHODS = ("sap", "uot", "random")
DEFAULT_RATIOS = (0.25, 0.1, 0.05)
DEFAULT_SAMPLE = 300
DEFAULT_NEIGHBOURS = 5
RELEVANCE = ("own", "away")
DEFAULT_RELEVANCE = "own"
MIN_PAGES_TO_RECOMMEND = 100
"""Below this many sampled pages nothing is recommended. The 90% intervals shrink as 1/sqrt(pages)
(0.05-0.13 wide at 400 Cranfield pages, docs/retention.md), so under 100 pages they are wider than
the gaps between methods that a recommendation chooses by, and an estimate can pass 1 by chance."""
Progress = Callable[[str], None]
RANGE_TERMS = "each end with its 90% interval"
"""How the label-free range's ends are drawn (`row_range`), said wherever the range is."""


class EstimateError(ValueError):
    """The estimate cannot run on these inputs (too few pages, no usable page)."""


@dataclass
class EstimateRow:
    method: str
    ratio: float
    estimated: float
    low: float
    high: float
    sr: float
    rank_agreement: float
    tokens_per_page: float
    keyword: float | None = None
    """With ``queries="both"``: the same estimate with keyword pseudo-queries (name and tag
    lookups), beside ``estimated`` (topical questions); its 90% interval below."""
    keyword_low: float | None = None
    keyword_high: float | None = None
    estimated_sd: float | None = None
    """With ``draws`` > 1: the standard deviation of ``estimated`` over the page samples."""
    draws: list[float] | None = None
    """With ``draws`` > 1: ``estimated`` on each page sample."""


@dataclass
class RetentionEstimate:
    """One row per (method, ratio), plus what the estimate was computed on."""

    rows: list[EstimateRow]
    n_pages: int
    n_queries: int
    query_kind: str
    encoder: str
    tokens_per_page_full: float
    notes: list[str] = field(default_factory=list)
    fallback_queries: int = 0
    relevance: str = DEFAULT_RELEVANCE
    collection_pages: int = 0
    """The collection size the rankings stand for (`collection_ndcg`); ``n_pages`` when the
    sample is the whole collection or scaling was turned off."""
    profile: dict[str, float] = field(default_factory=dict)
    """What the pseudo-queries found uncompressed: ``pseudo_ndcg`` (their mean NDCG@10) and
    ``own_first`` (the share whose own page ranks first); compared by `bias_notes` with the
    collections the estimate was validated on."""
    draws: int = 1
    """Page samples the figures are pooled over (`pooled`): ``n_pages`` is one sample's pages,
    ``n_queries`` and ``fallback_queries`` count all samples' pseudo-queries."""

    def recommend(self, target: float = 0.97, min_pages: int = MIN_PAGES_TO_RECOMMEND) -> str:
        """The smallest ratio (then the best method) whose estimate keeps ``target``; nothing
        on fewer than ``min_pages`` sampled pages, where the intervals cannot tell them apart.
        With lead and keyword figures (`row_range`) a row is recommended only when the whole
        range, each end's 90% interval included, keeps ``target``: how users ask is unknown,
        each end was right for one way of asking, and each is one sample's estimate."""
        if self.n_pages < min_pages:
            return (
                f"keep >= {target:g}: no recommendation from {self.n_pages} sampled pages; "
                f"below {min_pages} the estimates' intervals are too wide to choose a method by "
                "(the table is indicative only: index more pages, or raise --sample)"
            )
        fits = [r for r in self.rows if row_range(r)[0] >= target]
        if not fits:
            return self._unsettled(target)
        pick = min(fits, key=lambda r: (r.tokens_per_page, -row_range(r)[0]))
        low, high = row_range(pick)
        figure = (
            f"between {low:.3f} and {high:.3f} depending on how your users ask, {RANGE_TERMS}"
            if pick.keyword is not None
            else f"estimated {pick.estimated:.3f}"
        )
        return (
            f"keep >= {target:g}: use {pick.method} at {pick.ratio:g} ({figure}, "
            f"{pick.tokens_per_page:.1f} vectors per page)"
        )

    def _unsettled(self, target: float) -> str:
        """What to say when no row keeps ``target`` over its whole range."""
        maybe = [r for r in self.rows if row_range(r)[1] >= target]
        if maybe:
            pick = min(maybe, key=lambda r: (r.tokens_per_page, -row_range(r)[1]))
            low, high = row_range(pick)
            return (
                f"keep >= {target:g}: not settled without your questions: {pick.method} at "
                f"{pick.ratio:g} keeps between {low:.3f} and {high:.3f} depending on how your "
                f"users ask, {RANGE_TERMS} ({pick.estimated:.3f} for topical questions, "
                f"{pick.keyword:.3f} for name or keyword lookups). To settle it, pass "
                "--queries-file with questions your users ask (a log, or a list you care "
                "about), or --judged with a few dozen judged ones"
            )
        best = max(self.rows, key=lambda r: (row_range(r)[1], r.ratio))
        return (
            f"keep >= {target:g}: no method and ratio tried reaches it; the best is "
            f"{best.method} at {best.ratio:g} (estimated {best.estimated:.3f})"
        )

    def recommends(self, target: float = 0.97) -> bool:
        """Whether `recommend` names a method and ratio."""
        return self.n_pages >= MIN_PAGES_TO_RECOMMEND and any(
            row_range(r)[0] >= target for r in self.rows
        )

    def to_dict(self, target: float = 0.97) -> dict[str, Any]:
        out = asdict(self)
        out["recommendation"] = self.recommend(target)
        out["recommends"] = self.recommends(target)
        out["target"] = target
        return out

    def to_json(self, target: float = 0.97) -> str:
        return json.dumps(self.to_dict(target), indent=2)


def row_range(row: EstimateRow) -> tuple[float, float]:
    """(low, high) of a row's label-free range: with lead and keyword estimates, from the lower
    end of the two 90% intervals to the upper end (each end of the range is an estimate from
    one sample of pages and pseudo-queries, and its own interval says how far another sample
    moves it); with one estimate, that estimate at both ends.

    Between the two point estimates alone the range missed the judged figure by more than 0.05
    in 6 of 32 cells on eight judged collections (by up to 0.14 on Semanlink's tags); with each
    end's interval it held it in 31 and missed the 32nd by 0.013, at three times the width
    (mean 0.30 against 0.10; docs/retention.md, "How far the label-free range is from the
    judged figure")."""
    if row.keyword is None:
        return row.estimated, row.estimated
    lows = (_or(row.low, row.estimated), _or(row.keyword_low, row.keyword))
    highs = (_or(row.high, row.estimated), _or(row.keyword_high, row.keyword))
    return min(lows), max(highs)


def _or(value: float | None, fallback: float) -> float:
    """``value`` where it is a number (an interval end), else ``fallback`` (its estimate)."""
    return fallback if value is None or math.isnan(value) else value


def point_range(row: EstimateRow) -> tuple[float, float]:
    """(low, high) of the row's lead and keyword point estimates, without their intervals."""
    if row.keyword is None:
        return row.estimated, row.estimated
    return min(row.estimated, row.keyword), max(row.estimated, row.keyword)
