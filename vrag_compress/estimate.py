"""What compression will cost on your own collection, estimated without labels.

``estimate_retention(INDEX_OR_FOLDER)`` samples pages, builds pseudo-queries from them and
compares, for each method and keep ratio, the ranking that compressed pages give with the one
the uncompressed pages give. Pseudo-queries follow the inverse cloze task: a piece of a page's
text is the query, and the page, encoded without it, is the page it should find, so the query
shares meaning with its page rather than copying it. The piece is the page's lead (``"lead"``,
the default): its title, heading or first sentence, which states the topic in a few words as a
user's question does; running heads repeated on other sampled pages are skipped. Pages without
a lead fall back to one random sentence (``"sentence"``, the first version: a detail of the page,
and details are what compression loses first, so it runs low). Pages without text (scans
without OCR, figures) fall back to a span of the page's own tokens, removed from it.

How users ask matters more than anything else the estimate chooses (docs/retention.md): leads
stand for topical questions ("what similarity laws must be obeyed ..."); on collections searched
by tags or a few rare words they ran high by up to 0.24. ``"keyword"`` stands for those: each
page's rarest word that another sampled page also has, taken out of the page as the lead is (a
tag search finds pages on its topic, often without its word); pooled over five page samples
(``draws``) it was within ±0.07 on three judged keyword collections and 0.08-0.14 high on a
fourth (subject tags), on questions up to 0.23 low. One page sample's keyword figure moves by
more than its interval says, so pool three or more. Choose the kind your users' queries look
like, or ``"both"`` for the range.

Per method and ratio the report gives:
- ``estimated``: the expected retention@10, the NDCG@10 of the compressed ranking over the
  NDCG@10 of the uncompressed ranking, with graded pseudo-relevance: the query's own page
  (gain 2) and the ``neighbours`` pages nearest to it (gain 1, by the cosine of their mean
  uncompressed token vectors), since real queries are judged on topics that several pages cover.
  The rankings stand for the whole collection, not the sample: a collection ten times the sample
  has about ten times the pages that can outrank a relevant one, so each relevant page's rank is
  predicted there (`collection_ndcg`); on the sample alone the estimate ran high by up to 0.1;
- ``low`` / ``high``: its 90% bootstrap interval over the pseudo-queries (how much another
  draw of queries could move it);
- ``sr``: mean Score Retention (compressed / uncompressed MaxSim) of each query and its page;
- ``rank_agreement``: the share of the uncompressed top 10 that the compressed top 10 keeps;
- ``tokens_per_page``: the vectors a page keeps on average.

It needs the pages at full resolution: an index's stored pages are re-encoded from their text or
images (the index holds compressed vectors only); a folder is read with `vrag_compress.ingest`.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.compress import compressor_for, parse_method_spec
from vrag_compress.compress.budget_check import ndcg_at, neighbour_gains, span_queries
from vrag_compress.encoders.base import Encoder, PageEncoding, ReadsPageText
from vrag_compress.store.maxsim import maxsim_scores, pack_pages

log = logging.getLogger(__name__)

DEFAULT_METHODS = ("sap", "uot", "random")
DEFAULT_RATIOS = (0.25, 0.1, 0.05)
DEFAULT_SAMPLE = 300
MIN_SENTENCE_WORDS = 6
LEAD_WORDS = (2, 30)
QUERY_KINDS = ("lead", "sentence", "keyword")
BOTH = "both"
QUERY_CHOICES = (*QUERY_KINDS, BOTH)
"""What ``queries`` takes: one kind, or ``both`` lead and keyword (the range between how
topical questions and name or tag lookups fare)."""
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
    "(keyword) figure depending on how your users ask; a figure on your users' own questions "
    "settles it: pass --queries-file FILE (one question a line), or --judged QRELS for judged "
    "retention"
)
KEYWORDS = 1
KEYWORD_SHARE = 0.005
"""A keyword must be on at least this share of the sampled pages (and on 2): 2 of the 400 pages
where the keyword pseudo-query was validated. A fixed count of 2 picks rarer words the larger the
sample; the share keeps a word's rarity, though the estimate still moves with the sample's size
(``KEYWORD_SAMPLE_SHIFT``)."""
KEYWORD = re.compile(r"[^\W\d_][\w-]{2,}")
"""A keyword: a word of at least 3 characters that starts with a letter."""
DEFAULT_QUERY_KIND = "lead"
SPAN_TOKENS = 12
TOP = 10
DEFAULT_NEIGHBOURS = 5
RELEVANCE = ("own", "away")
DEFAULT_RELEVANCE = "own"
BOOTSTRAP = 1000
MIN_PAGES_TO_RECOMMEND = 100
"""Below this many sampled pages nothing is recommended. The 90% intervals shrink as 1/sqrt(pages)
(0.05-0.13 wide at 400 Cranfield pages, docs/retention.md), so under 100 pages they are wider than
the gaps between methods that a recommendation chooses by, and an estimate can pass 1 by chance."""

Progress = Callable[[str], None]


class EstimateError(ValueError):
    """The estimate cannot run on these inputs (too few pages, no usable page)."""


@dataclass
class PseudoQueries:
    """The sampled pages as the pseudo-queries see them, and each query's own page."""

    pages: list[PageEncoding]
    queries: list[np.ndarray]
    sources: list[int]
    kind: str  # "lead" / "sentence" / "keyword" (from the page text) or "tokens" (page spans)
    fallbacks: int = 0  # "lead" queries that are random sentences (their page had no lead)


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
        range keeps ``target``: how users ask is unknown, and each end was right for one way
        of asking."""
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
            f"between {low:.3f} and {high:.3f} depending on how your users ask"
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
                f"users ask ({pick.estimated:.3f} for topical questions, {pick.keyword:.3f} for "
                "name or keyword lookups). To settle it, pass --queries-file with questions your "
                "users ask (a log, or a list you care about), or --judged with a few dozen judged "
                "ones"
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
    """(low, high) of a row's label-free figures: its lead and keyword estimates when it has
    both, else its one estimate at both ends."""
    if row.keyword is None:
        return row.estimated, row.estimated
    return min(row.estimated, row.keyword), max(row.estimated, row.keyword)


# --------------------------------------------------------------------------- pseudo-queries
def cloze_split(text: str | None, rng: np.random.Generator) -> tuple[str, str] | None:
    """(one sentence of ``text``, the text without it), or None when the text has fewer than two
    sentences or no sentence of at least 6 words."""
    if not text:
        return None
    sentences = [s.strip() for s in re.split(r"(?<=[.?!])\s+", text) if s.strip()]
    usable = [i for i, s in enumerate(sentences) if len(s.split()) >= MIN_SENTENCE_WORDS]
    if len(sentences) < 2 or not usable:
        return None
    pick = int(rng.choice(usable))
    return sentences[pick], " ".join(sentences[:pick] + sentences[pick + 1 :])


TEXT_UNIT = re.compile(r"(?<=[.?!])\s+|\s*\n\s*")


def lead_splits(texts: Sequence[str | None]) -> list[tuple[str, str] | None]:
    """(each page's lead, the text without it), or None where a page has no lead.

    A page's units are its lines and sentences; a unit that another page in ``texts`` also has
    (a running head, a footer) is shared, the others are the page's own. Its lead is its first
    own unit of at least 2 words with letters (page numbers such as "- 41 -" are no lead), when
    that unit has at most 30 words (longer: the page opens with body text, no heading) and
    another own unit of 2 such words is left to find the page by. Every copy of the lead is
    taken out of the page."""
    low, high = LEAD_WORDS
    per_page = [[u.strip() for u in TEXT_UNIT.split(t or "") if u.strip()] for t in texts]
    seen = Counter(u.casefold() for units in per_page for u in set(units))
    out: list[tuple[str, str] | None] = []
    for units in per_page:
        own = [u for u in units if _lettered(u) >= low and seen[u.casefold()] == 1]
        lead = own[0] if own else None
        rest = [u for u in units if lead is None or u.casefold() != lead.casefold()]
        if lead is None or len(lead.split()) > high or not any(u in own for u in rest):
            out.append(None)
            continue
        out.append((lead, " ".join(rest)))
    return out


def _lettered(unit: str) -> int:
    """The number of words in ``unit`` that contain a letter."""
    return sum(any(c.isalpha() for c in word) for word in unit.split())


def keyword_splits(texts: Sequence[str | None]) -> list[tuple[str, str] | None]:
    """(a keyword search, the page text without its words) per page, or None where a page
    shares no word with enough other pages. The search is the page's ``KEYWORDS`` rarest words
    (fewest sampled pages have them; ties: the earlier in the page) among those on at least
    ``KEYWORD_SHARE`` of the sampled pages: a word no other page has would make the page
    trivially found and test no ranking. Every occurrence of them is taken out of the page, as
    the lead is, inside hyphenated compounds too (the encoder's tokenizer splits "wind-tunnel"
    and would still see "wind"): tag and keyword searches find documents by topic, and about
    half of the documents a tag search should find do not contain its words (48% on Semanlink);
    left in, a rare word that compression drops decides the ranking alone, and the estimate ran
    0.10-0.40 low."""
    words = [list(dict.fromkeys(w.casefold() for w in KEYWORD.findall(t or ""))) for t in texts]
    pages_with = Counter(w for page in words for w in page)
    least = max(2, math.ceil(KEYWORD_SHARE * len(texts)))
    out: list[tuple[str, str] | None] = []
    for text, page in zip(texts, words, strict=True):
        shared = sorted((w for w in page if pages_with[w] >= least), key=lambda w: pages_with[w])
        if not shared:
            out.append(None)
            continue
        search = shared[:KEYWORDS]
        found = re.compile(r"\b(?:" + "|".join(map(re.escape, search)) + r")\b", re.I)
        out.append((" ".join(search), found.sub(" ", text or "").strip()))
    return out


def pseudo_splits(
    texts: Sequence[str | None], kind: str, rng: np.random.Generator
) -> tuple[list[tuple[str, str] | None], set[int]]:
    """(query text, page text without it) per page: its lead (``kind="lead"``; pages without
    one fall back to a random sentence), a random sentence (``kind="sentence"``) or a keyword
    search taken out of the page (``kind="keyword"``, see `keyword_splits`); and the pages that
    fell back."""
    if kind not in QUERY_KINDS:
        raise EstimateError(f"query kind must be one of {', '.join(QUERY_KINDS)}, got {kind!r}")
    if kind == "sentence":
        return [cloze_split(t, rng) for t in texts], set()
    if kind == "keyword":
        return keyword_splits(texts), set()
    leads = lead_splits(texts)
    fell_back = {i for i, lead in enumerate(leads) if lead is None}
    return [lead or cloze_split(t, rng) for lead, t in zip(leads, texts, strict=True)], fell_back


def token_span_queries(
    pages: Sequence[PageEncoding], rng: np.random.Generator, span: int = SPAN_TOKENS
) -> PseudoQueries:
    """Pages without text: a span of each page's own tokens (``span``, at most a third of the
    page) is the query, removed from the page; pages under 3 tokens only join the pool."""
    pool, queries, sources = span_queries(pages, rng, span)
    return PseudoQueries(pool, queries, sources, "tokens")


def encode_texts(encoder: Any, texts: list[str]) -> list[PageEncoding]:
    """Texts as pages with attention statistics: page-text encoders (`vrag index --model
    minilm`) or token encoders (`TextTokenEncoder`)."""
    if isinstance(encoder, ReadsPageText):
        return encoder.encode_page_texts(list(texts), with_stats=True)
    return encoder.encode_documents(list(texts), with_stats=True)


def reads_text(encoder: Any) -> bool:
    return isinstance(encoder, ReadsPageText) or hasattr(encoder, "encode_documents")


def cloze_queries(
    texts: Sequence[str | None], encoder: Any, seed: int = 0, kind: str = DEFAULT_QUERY_KIND
) -> PseudoQueries:
    """Inverse-cloze pseudo-queries for a text encoder: pages whose text splits become
    (lead or sentence -> page without it, see `pseudo_splits`); the others join the pool whole."""
    splits, fell_back = pseudo_splits(texts, kind, np.random.default_rng(seed))
    docs = [s[1] if s else (t or "") for s, t in zip(splits, texts, strict=True)]
    encoded = encode_texts(encoder, docs)
    pool_index = [i for i, e in enumerate(encoded) if e.n_tokens > 0]
    position = {i: p for p, i in enumerate(pool_index)}
    asked = [i for i in pool_index if splits[i] is not None]
    vectors = encoder.encode_queries([splits[i][0] for i in asked]) if asked else []  # type: ignore[index]
    return PseudoQueries(
        [encoded[i] for i in pool_index],
        list(vectors),
        [position[i] for i in asked],
        kind,
        len(fell_back.intersection(asked)),
    )


def image_queries(
    pages: Sequence[PageEncoding],
    texts: Sequence[str | None],
    encoder: Encoder,
    seed: int = 0,
    kind: str = DEFAULT_QUERY_KIND,
) -> PseudoQueries:
    """Page images: the lead or a sentence of the page's text layer as the query (the image
    cannot lose it), else a span of the page's own tokens."""
    rng = np.random.default_rng(seed)
    splits, fell_back = pseudo_splits(texts, kind, rng)
    asked = [i for i, s in enumerate(splits) if s is not None]
    if len(asked) < max(1, len(pages) // 2):
        return token_span_queries(pages, rng)
    vectors = encoder.encode_queries([splits[i][0] for i in asked])  # type: ignore[index]
    fallbacks = len(fell_back.intersection(asked))
    return PseudoQueries(list(pages), list(vectors), asked, kind, fallbacks)


# ------------------------------------------------------------------------------ the estimate
def maxsim_matrix(queries: Sequence[np.ndarray], pages: Sequence[np.ndarray]) -> np.ndarray:
    """Exact MaxSim of every query against every page -> [n_queries, n_pages] (fp64 sums)."""
    return maxsim_scores(queries, *pack_pages(pages), sum_dtype=np.float64)


def pseudo_gains(
    pages: Sequence[PageEncoding], sources: Sequence[int], neighbours: int, relevance: str = "own"
) -> np.ndarray:
    """Graded pseudo-relevance [n_queries, n_pages]: gain 1 for the ``neighbours`` pages
    closest to the query's own page (cosine of the mean of their uncompressed token vectors):
    a topic is rarely covered by one page, and real queries are judged on topics. The own page
    gets gain 2 (``relevance="own"``) or is left out of the query's ranking (``"away"``: NaN,
    see `leave_out`), so that the query must find pages it was not cut from."""
    if relevance not in RELEVANCE:
        raise EstimateError(f"relevance must be one of {', '.join(RELEVANCE)}, got {relevance!r}")
    if relevance == "away" and neighbours < 1:
        raise EstimateError("relevance 'away' needs at least 1 neighbour to find")
    gains = neighbour_gains([p.vectors for p in pages], sources, neighbours)
    if relevance == "away":
        gains[np.arange(len(sources)), list(sources)] = math.nan
    return gains


def leave_out(scores: np.ndarray, gains: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(scores, gains) with the pages whose gain is NaN (a query's own page under
    ``relevance="away"``) ranked last and counted irrelevant."""
    gone = np.isnan(gains)
    if not gone.any():
        return scores, gains
    return np.where(gone, -np.inf, scores), np.where(gone, 0.0, gains)


def collection_ndcg(scores: np.ndarray, gains: np.ndarray, collection_pages: int) -> np.ndarray:
    """Expected NDCG@10 of each ranking in a collection of ``collection_pages`` pages, of which
    the sampled ones (the columns) are a uniform draw: a query's relevant pages are all in the
    sample, and each of the unsampled pages outranks a relevant page as often as the sampled
    distractors do (a relevant page with ``c`` of the ``m`` sampled distractors above it has
    Binomial(unsampled, c / m) more above it in the collection). No parameter: the collection's
    size is known. Plain NDCG@10 when the sample is the whole collection."""
    scores, gains = leave_out(scores, gains)
    unsampled = collection_pages - scores.shape[1]
    if unsampled <= 0:
        return ndcg_at(scores, gains, TOP)
    from scipy.stats import binom  # type: ignore[import-untyped]

    width = max(int((gains > 0).sum(axis=1).max()), 1)
    relevant = np.argsort(-gains, axis=1, kind="stable")[:, :width]
    gain = np.take_along_axis(gains, relevant, axis=1)
    score = np.where(gain > 0, np.take_along_axis(scores, relevant, axis=1), -np.inf)
    by_score = np.argsort(-score, axis=1, kind="stable")
    gain, score = (np.take_along_axis(a, by_score, axis=1) for a in (gain, score))
    distractor = (gains <= 0) & np.isfinite(scores)
    sampled = np.maximum(distractor.sum(axis=1), 1)[:, None]
    above = ((scores[:, None, :] > score[:, :, None]) & distractor[:, None, :]).sum(axis=2)
    rank0 = np.arange(width)[None, :] + above  # 0-based rank in the sample
    more = np.arange(TOP)
    chance = binom.pmf(more, unsampled, (above / sampled)[:, :, None])
    position = rank0[:, :, None] + more
    discount = np.where(position < TOP, 1.0 / np.log2(np.minimum(position, TOP) + 2.0), 0.0)
    dcg = (gain * (chance * discount).sum(axis=2)).sum(axis=1)
    top = min(TOP, scores.shape[1])
    ideal = (-np.sort(-gains, axis=1)[:, :top] / np.log2(np.arange(top) + 2.0)).sum(axis=1)
    return np.asarray(dcg / np.where(ideal > 0, ideal, 1.0))


def retention_interval(
    compressed: np.ndarray, full: np.ndarray, seed: int = 0, level: float = 0.9
) -> tuple[float, float]:
    """Bootstrap interval (``level``) of mean(compressed) / mean(full) over paired per-query
    values: how far another draw of as many queries could move the retention."""
    if len(full) < 2 or not (full > 0).any():
        return math.nan, math.nan  # one query, or nothing relevant found: no interval to give
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(full), (BOOTSTRAP, len(full)))
    means = full[draws].mean(axis=1)
    usable = means > 0  # a resample of only zero-NDCG queries has no ratio
    ratios = compressed[draws[usable]].mean(axis=1) / means[usable]
    tail = (1.0 - level) / 2
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return float(low), float(high)


def _top_overlap(full: np.ndarray, compressed: np.ndarray) -> float:
    k = min(TOP, full.shape[1])
    a = np.argsort(-full, axis=1, kind="stable")[:, :k]
    b = np.argsort(-compressed, axis=1, kind="stable")[:, :k]
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b, strict=True)]))


def estimate_pages(
    pseudo: PseudoQueries,
    methods: Sequence[str] = DEFAULT_METHODS,
    ratios: Sequence[float] = DEFAULT_RATIOS,
    *,
    n_layers: int | None = None,
    model_id: str | None = None,
    window: Sequence[int] | None = None,
    encoder_name: str = "",
    neighbours: int = DEFAULT_NEIGHBOURS,
    relevance: str = DEFAULT_RELEVANCE,
    collection_pages: int | None = None,
    progress: Progress | None = None,
) -> RetentionEstimate:
    """The estimate on already-built pseudo-queries; ``methods`` are names or
    ``name:key=value`` specs (as in the retention benchmark); ``neighbours`` pages nearest to a
    query's own page count as partly relevant (0: only its own page); ``relevance`` says
    whether the own page counts (``"own"``) or is left out (``"away"``, see `pseudo_gains`);
    ``collection_pages`` is the size of the collection the pages were sampled from, which the
    rankings are scaled to (`collection_ndcg`; None: the sample is the collection)."""
    if len(pseudo.pages) < 2 or not pseudo.queries:
        raise EstimateError(
            f"the estimate needs at least 2 pages and 1 pseudo-query, got {len(pseudo.pages)} "
            f"pages and {len(pseudo.queries)} queries"
        )
    full = maxsim_matrix(pseudo.queries, [p.vectors for p in pseudo.pages])
    gains = pseudo_gains(pseudo.pages, pseudo.sources, neighbours, relevance)
    total = max(collection_pages or 0, len(pseudo.pages))
    full_ndcg = collection_ndcg(full, gains, total)
    full_mean = float(full_ndcg.mean())
    own = full[np.arange(len(pseudo.sources)), pseudo.sources]
    profile = {
        "pseudo_ndcg": full_mean,
        "own_first": float(np.mean(np.argmax(full, axis=1) == np.asarray(pseudo.sources))),
    }
    rows = []
    for spec in methods:
        name, params = parse_method_spec(spec)
        for ratio in ratios:
            compressor = compressor_for(
                name, n_layers=n_layers, model_id=model_id, ratio=ratio, window=window, **params
            )
            compressed = compressor.compress_many(pseudo.pages)
            scores = maxsim_matrix(pseudo.queries, [c.vectors for c in compressed])
            kept = scores[np.arange(len(pseudo.sources)), pseudo.sources]
            ndcg = collection_ndcg(scores, gains, total)
            low, high = retention_interval(ndcg, full_ndcg)
            rows.append(
                EstimateRow(
                    method=spec,
                    ratio=float(ratio),
                    estimated=float(ndcg.mean()) / full_mean if full_mean > 0 else math.nan,
                    low=low,
                    high=high,
                    sr=float(np.mean(np.where(own > 0, kept / np.where(own > 0, own, 1), 1.0))),
                    rank_agreement=_top_overlap(full, scores),
                    tokens_per_page=float(np.mean([len(c.vectors) for c in compressed])),
                )
            )
            if progress:
                progress(f"{spec} @ {ratio:g}")
    result = RetentionEstimate(
        rows=rows,
        n_pages=len(pseudo.pages),
        n_queries=len(pseudo.queries),
        query_kind=pseudo.kind,
        encoder=encoder_name,
        tokens_per_page_full=float(np.mean([p.n_tokens for p in pseudo.pages])),
        notes=_fallback_note(pseudo.fallbacks, len(pseudo.queries)),
        fallback_queries=pseudo.fallbacks,
        relevance=relevance,
        collection_pages=total,
        profile=profile,
    )
    result.notes += bias_notes(result)
    return result


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


def _fallback_note(fallbacks: int, n_queries: int) -> list[str]:
    if not fallbacks:
        return []
    return [
        f"{fallbacks} of {n_queries} pseudo-queries are random sentences: "
        "their pages have no lead (title, heading or first sentence of their own)"
    ]


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
        notes=_fallback_note(fallbacks, n_queries),
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
    from scipy.stats import t

    mean, n = float(np.mean(values)), len(values)
    half = float(t.ppf(0.5 + level / 2, n - 1) * np.std(values, ddof=1) / math.sqrt(n))
    return mean - half, mean + half


# ------------------------------------------------------------------------- index or folder
def estimate_retention(
    source: str | Path | Any,
    *,
    methods: Sequence[str] = DEFAULT_METHODS,
    ratios: Sequence[float] = DEFAULT_RATIOS,
    sample: int = DEFAULT_SAMPLE,
    seed: int = 0,
    model: str | None = None,
    encoder: Encoder | None = None,
    device: str = "auto",
    neighbours: int = DEFAULT_NEIGHBOURS,
    queries: str = DEFAULT_QUERY_KIND,
    relevance: str = DEFAULT_RELEVANCE,
    scale_to_collection: bool = True,
    draws: int = 1,
    progress: Progress | None = None,
) -> RetentionEstimate:
    """Estimate each method's retention at each ratio on ``source`` before committing to one.

    source: an index folder or an open `VisualIndex` (its pages are re-encoded with its model),
    or a folder / files of documents (read with `vrag_compress.ingest`, encoded with ``model``,
    default the index default, or ``encoder``). ``sample`` pages are drawn with ``seed``;
    ``queries`` is the pseudo-query kind, "lead", "sentence" or "keyword" (see the module
    docstring: choose the kind your users' queries look like), or "both" lead and keyword (each
    row's ``keyword`` beside its ``estimated``). ``scale_to_collection`` predicts the rankings
    in the whole collection rather than in the sample (`collection_ndcg`; False: the sample's
    own rankings, which run high when the collection is much larger than the sample).
    ``draws`` > 1 repeats the estimate on that many page samples (seeds ``seed``, ``seed`` + 1,
    ...) and pools them (`pooled`): the interval then includes how another page sample moves
    the figure, at ``draws`` times the cost.
    """
    from vrag_compress.index import VisualIndex

    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 2:
        raise EstimateError(f"sample must be at least 2 pages, got {sample!r}")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise EstimateError(f"draws must be at least 1 page sample, got {draws!r}")
    if queries not in QUERY_CHOICES:
        raise EstimateError(f"queries must be one of {', '.join(QUERY_CHOICES)}, got {queries!r}")
    if relevance not in RELEVANCE:
        raise EstimateError(f"relevance must be one of {', '.join(RELEVANCE)}, got {relevance!r}")
    plan = _Plan(
        methods, ratios, seed, neighbours, queries, progress, relevance, scale_to_collection
    )
    seeds = range(seed, seed + draws)
    if isinstance(source, VisualIndex):
        return _estimate_index(source, sample, plan, seeds)
    path = Path(source)
    if not path.exists():
        raise EstimateError(f"{path}: no such index, folder or file")
    if VisualIndex.exists(path):
        # read-only: an estimate must not wait on a writer nor upgrade an old index
        with VisualIndex.open(
            path, model=model, encoder=encoder, device=device, readonly=True
        ) as index:
            return _estimate_index(index, sample, plan, seeds)
    if encoder is None:
        from vrag_compress.defaults import DEFAULT_MODEL
        from vrag_compress.encoders import load_encoder

        encoder = load_encoder(model or DEFAULT_MODEL, device=device)
    samples = ((s, _folder_pages(path, sample, s)) for s in seeds)
    return _estimate_samples(encoder, samples, plan)


def _sized(plan: _Plan, collection_pages: int) -> _Plan:
    """``plan`` with the source's page count, when the estimate is scaled to it."""
    return replace(plan, collection_pages=collection_pages if plan.scale_to_collection else None)


@dataclass(frozen=True)
class _Plan:
    """What to estimate and how, the same for an index and a folder."""

    methods: Sequence[str]
    ratios: Sequence[float]
    seed: int
    neighbours: int
    queries: str
    progress: Progress | None
    relevance: str = DEFAULT_RELEVANCE
    scale_to_collection: bool = True
    collection_pages: int | None = None
    """Pages in the source the sample was drawn from (set once the source is read)."""


def _estimate_index(
    index: Any, sample: int, plan: _Plan, seeds: Sequence[int]
) -> RetentionEstimate:
    ids = sorted(index.store.page_ids())
    too_few(len(ids), index.path)
    samples = ((seed, _index_sample(index, ids, sample, seed)) for seed in seeds)
    return _estimate_samples(index.encoder, samples, plan)


def _index_sample(index: Any, ids: list[str], sample: int, seed: int) -> Sample:
    """``sample`` of the index's pages drawn with ``seed``: their text, and their images when
    the index's encoder reads images."""
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(ids), min(sample, len(ids)), replace=False).tolist())
    records = index.store.get([ids[i] for i in picked], missing="skip")
    images: list[Any] = []
    if not reads_text(index.encoder):
        images = [
            index.assets.load(r.image_ref, r.metadata.get("source"), r.page_no) for r in records
        ]
    return [r.text for r in records], images, len(ids)


def too_few(n_pages: int, source: Any) -> None:
    """A source of fewer than 2 pages cannot be estimated on, however many pages are sampled."""
    if n_pages < 2:
        raise EstimateError(
            f"{source}: {n_pages} page(s); the estimate ranks pages against each other, so it "
            "needs a source of at least 2 pages"
        )


Sample = tuple[list[str | None], list[Any], int]
"""One page sample: the pages' texts, their images (empty for text encoders) and the number of
pages in the source it was drawn from."""


def _folder_pages(path: Path, sample: int, seed: int) -> Sample:
    """``sample`` pages drawn evenly at random from every page under ``path``, and the number of
    pages there: the documents' page counts are read first (opening a PDF reads no page), then
    only the drawn pages are rendered. An unreadable document or page is logged and skipped."""
    from vrag_compress.ingest import find_documents

    counts = _page_counts(find_documents(path)[0])
    total = sum(n for _, n in counts)
    if total == 0:
        raise EstimateError(f"{path}: no readable page (PDFs or images) to estimate on")
    too_few(total, path)
    rng = np.random.default_rng(seed)
    drawn = np.sort(rng.choice(total, min(sample, total), replace=False))
    starts = np.cumsum([0] + [n for _, n in counts])
    kept: list[Any] = []
    for i, (doc, _) in enumerate(counts):
        wanted = drawn[(drawn >= starts[i]) & (drawn < starts[i + 1])] - starts[i] + 1
        if len(wanted):
            kept += render_pages(doc, [int(n) for n in wanted])
    return [p.text for p in kept], [p.image for p in kept], total


def _page_counts(documents: list[Path]) -> list[tuple[Path, int]]:
    from vrag_compress.ingest import IngestError, open_document

    counts = []
    for doc in documents:
        try:
            with open_document(doc) as opened:
                counts.append((doc, opened.n_pages))
        except IngestError as error:
            log.warning("%s", error)
    return counts


def render_pages(path: Path, page_nos: list[int]) -> list[Any]:
    from vrag_compress.ingest import IngestError, open_document

    pages = []
    try:
        with open_document(path) as doc:
            for page_no in page_nos:
                try:
                    pages.append(doc.page(page_no))
                except IngestError as error:  # one refused page; the others go on
                    log.warning("%s", error)
    except IngestError as error:
        log.warning("%s", error)
    return pages


def _estimate_samples(
    encoder: Any, samples: Iterable[tuple[int, Sample]], plan: _Plan
) -> RetentionEstimate:
    """The estimate of ``plan.queries`` on each (seed, sample), pooled over the samples
    (`pooled`); with "both", lead and keyword on the same samples (page images are encoded
    once per sample: they keep their text whatever the query). Samples are read one at a time."""
    kinds = ("lead", "keyword") if plan.queries == BOTH else (plan.queries,)
    per_kind: dict[str, list[RetentionEstimate]] = {kind: [] for kind in kinds}
    for seed, (texts, images, total) in samples:
        pages = None if reads_text(encoder) else encoder.encode_pages(list(images), with_stats=True)
        for kind in kinds:
            drawn = replace(_sized(plan, total), queries=kind, seed=seed)
            per_kind[kind].append(_estimate_kind(encoder, texts, pages, drawn))
    results = [pooled(per_kind[kind]) for kind in kinds]
    return results[0] if len(results) == 1 else bracketed(*results)


def bracketed(lead: RetentionEstimate, keyword: RetentionEstimate) -> RetentionEstimate:
    """The lead estimate with the keyword estimate of each row beside it (``keyword``)."""
    rows = [
        replace(row, keyword=other.estimated, keyword_low=other.low, keyword_high=other.high)
        for row, other in zip(lead.rows, keyword.rows, strict=True)
    ]
    advice = [POOL_ADVICE] if keyword.draws == 1 else []
    return replace(lead, rows=rows, notes=[*lead.notes, BRACKET_NOTE, RANGE_ADVICE, *advice])


def _estimate_kind(
    encoder: Any, texts: list[str | None], pages: list[PageEncoding] | None, plan: _Plan
) -> RetentionEstimate:
    if pages is None:
        pseudo = cloze_queries(texts, encoder, plan.seed, plan.queries)
    else:
        usable = [i for i, p in enumerate(pages) if p.n_tokens > 0]
        pseudo = image_queries(
            [pages[i] for i in usable], [texts[i] for i in usable], encoder, plan.seed, plan.queries
        )
    if plan.progress:
        plan.progress(f"encoded {len(pseudo.pages)} sampled pages ({plan.queries} queries)")
    return estimate_pages(
        pseudo,
        plan.methods,
        plan.ratios,
        n_layers=int(encoder.n_layers),
        model_id=getattr(encoder, "model_id", None),
        encoder_name=str(getattr(encoder, "model_id", "")),
        neighbours=plan.neighbours,
        relevance=plan.relevance,
        collection_pages=plan.collection_pages,
        progress=plan.progress,
    )
