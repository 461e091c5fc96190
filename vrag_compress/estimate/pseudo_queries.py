"""Pseudo-queries: what stands for users' queries when there are none. A piece of a page's text
(its lead, a sentence or a keyword search) is the query and the page without it the page it
should find; pages without text give a span of their own tokens (see `vrag_compress.estimate`)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vrag_compress.compress.budget_check import span_queries
from vrag_compress.encoders.base import Encoder, PageEncoding, ReadsPageText
from vrag_compress.estimate.report import EstimateError

MIN_SENTENCE_WORDS = 6
LEAD_WORDS = (2, 30)
QUERY_KINDS = ("lead", "sentence", "keyword")
BOTH = "both"
QUERY_CHOICES = (*QUERY_KINDS, BOTH)
"""What ``queries`` takes: one kind, or ``both`` lead and keyword (the range between how
topical questions and name or tag lookups fare)."""
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


@dataclass
class PseudoQueries:
    """The sampled pages as the pseudo-queries see them, and each query's own page."""

    pages: list[PageEncoding]
    queries: list[np.ndarray]
    sources: list[int]
    kind: str  # "lead" / "sentence" / "keyword" (from the page text) or "tokens" (page spans)
    fallbacks: int = 0  # "lead" queries that are random sentences (their page had no lead)


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
