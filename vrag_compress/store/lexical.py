"""Text analysis shared by every backend: how page text and queries become terms.

One tokenizer (`terms`: NFKC-normalised, folded as SQLite's unicode61 folds) serves the embedded
store's BM25 engine, its FTS5 queries and the Qdrant sparse vectors, so a query matches the same
words everywhere. User text never reaches FTS5 as syntax: its words are quoted and OR-ed, as a
keyword engine treats a question, so quotes, ``NEAR``, ``*``, ``-`` or unbalanced parentheses are
just characters (`match_expression`). The search itself lives with each backend (the embedded
store's is `vrag_compress.store.local.text_search`).
"""

from __future__ import annotations

import functools
import re
import unicodedata
import zlib
from collections import Counter

from vrag_compress.store.validate import StoreInputError

# Invisible characters that sit inside words (soft hyphen, zero-width space / joiners, word
# joiner, BOM): removed before tokenizing, or "hyphen\u00adation" would be two words.
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff"))
# A run of letters or digits in any script: what the unicode61 tokenizer keeps as a token.
_WORD = re.compile(r"[^\W_]+")
MAX_TEXT_QUERY_CHARS = 100_000

# English function words left out of plain-word queries (the stop set of the standard BM25
# baselines). They occur in nearly every page, so BM25 gives them almost no weight, yet their
# long posting lists are most of a query's cost. Pages keep them (phrases still match them), and
# a query made only of them searches them.
STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)


def nfkc(text: str | None) -> str | None:
    """The compatibility-folded form of ``text`` that the text index holds (and queries use),
    without the invisible characters that would split a word."""
    return None if text is None else unicodedata.normalize("NFKC", text).translate(_INVISIBLE)


def query_terms(text: str) -> list[str]:
    """The distinct folded terms a plain query searches for (as `terms` folds page text)."""
    return list(dict.fromkeys(fold(w) for w in query_words(text)))


def query_words(text: str) -> list[str]:
    """The distinct words a plain query searches for, as typed (the first spelling of each
    folded word), without stop words unless it has nothing else."""
    words: dict[str, str] = {}
    for word in _WORD.findall(nfkc(text) or ""):
        words.setdefault(fold(word), word)
    content = [w for key, w in words.items() if key not in STOPWORDS]
    return content or list(words.values())


def match_expression(text: str, *, fts_syntax: bool = False) -> str | None:
    """The FTS5 expression for a user query: its words, each quoted, OR-ed (None when it has
    no words); with ``fts_syntax`` the text itself."""
    match_text(text)
    if fts_syntax:  # folded as the indexed text is ("ﬁnancial" -> "financial")
        return nfkc(text) if text.strip() else None
    return " OR ".join(f'"{w}"' for w in query_words(text)) or None


# ----------------------------------------------------------------------------- sparse BM25 terms

BM25_K1 = 1.2
BM25_B = 0.75
SPARSE_AVG_WORDS = 256.0  # the typical page length the length normalisation assumes


def terms(text: str | None) -> list[str]:
    """The words of ``text`` as the local text indexes see them: NFKC-normalised as the indexed
    text is ("ﬁ" -> "fi", soft hyphens and zero-width spaces removed), then each folded as the
    FTS5 tokenizer folds ("Café" -> "cafe"). The one tokenizer of the BM25 engine, the Qdrant
    sparse terms and the queries of both."""
    normal = nfkc(text) or ""
    if normal.isascii():  # nothing to strip: lower case is the whole fold
        return _WORD.findall(normal.lower())
    return [fold(w) for w in _WORD.findall(normal)]


@functools.lru_cache(maxsize=1 << 16)
def fold(word: str) -> str:
    """Lower case without diacritics, as the unicode61 tokenizer folds ("Ünï" -> "uni"); the
    compatibility forms are folded before (`nfkc`), unicode61 does not fold them."""
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).lower()


def term_id(term: str) -> int:
    """A stable 32-bit id for a term (the index of its sparse-vector dimension)."""
    return zlib.crc32(term.encode("utf-8"))


def sparse_document(text: str | None) -> tuple[list[int], list[float]]:
    """A page's BM25 term weights (tf saturation and length normalisation), for a backend that
    applies the IDF itself at query time (Qdrant's sparse vectors with the IDF modifier)."""
    words = terms(text)
    norm = BM25_K1 * (1 - BM25_B + BM25_B * len(words) / SPARSE_AVG_WORDS)
    counts = Counter(term_id(w) for w in words)
    ids = sorted(counts)
    return ids, [counts[i] * (BM25_K1 + 1) / (counts[i] + norm) for i in ids]


def sparse_query(text: str) -> tuple[list[int], list[float]]:
    """A query's terms, each weighted 1 (the score then sums IDF x term weight: BM25)."""
    ids = sorted({term_id(fold(w)) for w in query_words(match_text(text))})
    return ids, [1.0] * len(ids)


def match_text(text: str) -> str:
    """``text`` checked as a query text (a str of bounded length)."""
    if not isinstance(text, str):
        raise StoreInputError(f"the text query must be a str, got {type(text).__name__}")
    if len(text) > MAX_TEXT_QUERY_CHARS:
        raise StoreInputError(
            f"the text query has {len(text):,} characters; at most {MAX_TEXT_QUERY_CHARS:,}"
        )
    return text
