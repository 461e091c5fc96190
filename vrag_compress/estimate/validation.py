"""How far an estimate can be trusted: the judged collections it was checked on, and the notes
that say when this collection differs from all of them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vrag_compress.estimate.report import DEFAULT_RELEVANCE, RetentionEstimate


@dataclass(frozen=True)
class Validated:
    """A judged collection the estimate was checked on (docs/retention.md): its pages' mean
    token count, the share of pseudo-queries whose own page ranks first uncompressed, the
    largest error of SAP and UOT at γ 0.1 and 0.05 there, the pseudo-query kind checked and the
    collection's size (the estimate sampled ``VALIDATED_SAMPLE`` of its pages)."""

    name: str
    tokens_per_page: float
    own_first: float | None
    max_error: float
    query_kind: str = "lead"
    collection_pages: int = 0


VALIDATED_SAMPLE = 400
VALIDATED: tuple[Validated, ...] = (
    Validated("Cranfield", 195.4, 0.700, 0.035, "lead", 1398),
    Validated("Cranfield titles + 2 sentences", 78.5, 0.632, 0.030, "lead", 1398),
    Validated("Cranfield without titles", 180.1, 0.373, 0.091, "lead", 1398),
    Validated("Semanlink tags", 64.5, 0.028, 0.141, "keyword", 4224),
    Validated("Cranfield keywords", 195.4, 0.043, 0.063, "keyword", 1398),
    Validated("Cranfield keywords, titles + 2 sentences", 78.5, 0.025, 0.026, "keyword", 1398),
    Validated("Cranfield keywords, without titles", 180.1, 0.030, 0.036, "keyword", 1398),
)
"""Where the estimate (5 neighbours, own page gain 2, rankings scaled to the collection) was
compared with judged retention@10, MiniLM, 400 sampled pages (docs/retention.md, "Which
queries"): three topical-question collections with ``lead`` pseudo-queries, and four collections
searched by tags or a few rare words with ``keyword`` pseudo-queries (Semanlink's tags and
Cranfield's questions cut to their three rarest words, on the three page variants). A keyword
collection's error is that of the mean of five page samples of 400 (seeds 0-4): one sample's
keyword figure strays from that mean by ``KEYWORD_DRAW_SD`` or more."""
OTHER_KIND = {
    "lead": "on collections searched by tags or a few rare words lead pseudo-queries ran up to "
    "0.24 high: if your users type names or keywords, rerun with --queries keyword",
    "keyword": "on topical-question collections (Cranfield) keyword pseudo-queries ran "
    "up to 0.23 low: if your users ask questions, rerun with --queries lead",
}
"""What the other kind of pseudo-query did: the kind must match how users ask."""
KEYWORD_SAMPLE_SHIFT = 0.21
"""How far the keyword estimate moved when the same collections were sampled with 1,200-1,398
pages instead of 400 (docs/retention.md): a one-word query finds its own page first in under 1%
of a large sample, and the ratio of two small NDCGs follows which neighbours it happens to find."""
KEYWORD_DRAW_SD = 0.11
"""The largest standard deviation of the keyword estimate (SAP and UOT at γ 0.1 and 0.05) over
five page samples of 400 on the four keyword collections (docs/retention.md): a single sample's
90% interval (±0.10-0.15) does not cover it, so one sample is told to pool more."""
POOL_ADVICE = (
    "one page sample: keyword figures moved between page samples with a standard deviation of "
    f"up to {KEYWORD_DRAW_SD:.2f} where validated, more than their interval shows; pool 3 or "
    "more samples (--draws 3) before choosing by them"
)
PROFILE_SLACK = 0.05
"""How far ``own_first`` may lie outside the validated range before the note says the
collection differs (about the sampling spread of a share over 300-400 pseudo-queries)."""


def bias_notes(result: RetentionEstimate) -> list[str]:
    """How far the figures can be trusted: the error where this kind of pseudo-query was
    validated, what the other kind did, and a bias note when this collection's pseudo-queries
    differ from those of every collection checked (a kind never validated, another relevance,
    pages much shorter or longer, own pages found first more or less often)."""
    if not VALIDATED:
        return []
    same = [v for v in VALIDATED if v.query_kind == result.query_kind]
    checked = same or list(VALIDATED)
    error = max(v.max_error for v in checked)
    names = ", ".join(v.name for v in checked)
    differs = []
    if not same:
        kinds = sorted({v.query_kind for v in VALIDATED})
        differs.append(
            f"pseudo-queries are {result.query_kind!r}, validated with {' and '.join(kinds)}"
        )
    if result.relevance != DEFAULT_RELEVANCE:
        differs.append(f"relevance is {result.relevance!r}, validated with {DEFAULT_RELEVANCE!r}")
    lengths = [v.tokens_per_page for v in checked]
    if not 0.5 * min(lengths) <= result.tokens_per_page_full <= 2.0 * max(lengths):
        differs.append(
            f"{result.tokens_per_page_full:.0f} tokens per page, validated on "
            f"{min(lengths):.0f}-{max(lengths):.0f}"
        )
    scale = result.collection_pages / max(result.n_pages, 1)
    checked_scale = max(v.collection_pages for v in VALIDATED) / VALIDATED_SAMPLE
    if checked_scale and scale > checked_scale:
        differs.append(
            f"the rankings are predicted for a collection {scale:.0f}x the sample, checked up to "
            f"{checked_scale:.0f}x (raise --sample)"
        )
    if result.query_kind == "keyword" and result.n_pages > VALIDATED_SAMPLE:
        differs.append(
            f"{result.n_pages} sampled pages: keyword pseudo-queries were validated on "
            f"{VALIDATED_SAMPLE}, and on 1,200-1,398 they moved by up to {KEYWORD_SAMPLE_SHIFT:.2f}"
        )
    first = [v.own_first for v in checked if v.own_first is not None]
    own = result.profile.get("own_first", math.nan)
    if first and not min(first) - PROFILE_SLACK <= own <= max(first) + PROFILE_SLACK:
        differs.append(
            f"{own:.0%} of pseudo-queries rank their own page first, "
            f"{min(first):.0%}-{max(first):.0%} where validated"
        )
    base = (
        f"validated with {result.query_kind if same else 'lead and keyword'} pseudo-queries on "
        f"{names} with judged queries: SAP and UOT at γ 0.1 and 0.05 within ±{error:.2f}"
    )
    if result.query_kind in OTHER_KIND:
        base += f"; {OTHER_KIND[result.query_kind]}"
    notes = [base]
    if differs:
        notes.append(
            "bias: this collection differs from where the estimate was validated ("
            + "; ".join(differs)
            + f"), so its error may exceed ±{error:.2f}: read each figure with its interval "
            "widened by at least that much"
        )
    if result.query_kind == "keyword" and result.draws == 1:
        notes.append(POOL_ADVICE)
    return notes


def fallback_note(fallbacks: int, n_queries: int) -> list[str]:
    if not fallbacks:
        return []
    return [
        f"{fallbacks} of {n_queries} pseudo-queries are random sentences: "
        "their pages have no lead (title, heading or first sentence of their own)"
    ]
