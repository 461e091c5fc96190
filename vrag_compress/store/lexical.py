"""The lexical side of search: BM25 over the stored page text with SQLite FTS5.

The text index lives in the catalog (catalog.py keeps it exact with triggers). User text never
reaches FTS5 as syntax: its words are quoted and OR-ed, as a keyword engine treats a question, so
quotes, ``NEAR``, ``*``, ``-`` or unbalanced parentheses are just characters. Raw FTS5 syntax
(phrases, ``NEAR``, prefixes, boolean operators) is available on request, and a malformed raw
query is a clear `StoreInputError`, never an SQLite error.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import unicodedata
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vrag_compress.store import catalog as cat
from vrag_compress.store.context import StoreContext
from vrag_compress.store.validate import StoreInputError

if TYPE_CHECKING:
    from vrag_compress.store.text_engine import TextEngine

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


def query_terms(text: str) -> list[str]:
    """The distinct folded terms a plain query searches for (as `terms` folds page text)."""
    return list(dict.fromkeys(fold(w) for w in query_words(text)))


def query_words(text: str) -> list[str]:
    """The distinct words a plain query searches for, as typed (the first spelling of each
    folded word), without stop words unless it has nothing else."""
    words: dict[str, str] = {}
    for word in _WORD.findall(cat.nfkc(text) or ""):
        words.setdefault(fold(word), word)
    content = [w for key, w in words.items() if key not in STOPWORDS]
    return content or list(words.values())


def match_expression(text: str, *, fts_syntax: bool = False) -> str | None:
    """The FTS5 expression for a user query: its words, each quoted, OR-ed (None when it has
    no words); with ``fts_syntax`` the text itself."""
    match_text(text)
    if fts_syntax:  # folded as the indexed text is ("ﬁnancial" -> "financial")
        return cat.nfkc(text) if text.strip() else None
    return " OR ".join(f'"{w}"' for w in query_words(text)) or None


class LexicalIndex:
    """BM25 top-k over a store's page text: plain queries through the BM25 engine
    (text_engine.py) while it is up to date, else (and for raw FTS5 syntax) through the
    catalog's FTS5 index (or, for a reader of a catalog made before text indexes, a private
    temporary one (SQLite temp schema) rebuilt when the store changes)."""

    def __init__(self, ctx: StoreContext, engine: TextEngine):
        self.ctx = ctx
        self.engine = engine
        self._temp_generation: int | None = None

    def search(
        self,
        text: str,
        k: int,
        where: tuple[str, Sequence[Any]] | None,
        *,
        fts_syntax: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(pids, bm25 scores)`` of the best ``k`` pages whose text matches, best first."""
        match = match_expression(text, fts_syntax=fts_syntax)
        if match is None:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        with self.ctx.catalog.mutex:
            conn = self.ctx.catalog.connection()
            if not fts_syntax:
                with cat.translate_errors(self.ctx.catalog.path):
                    hits = self._engine_search(conn, text, k, where)
                if hits is not None:
                    return hits
            with cat.translate_errors(self.ctx.catalog.path):
                self._ensure_index(conn)
            try:
                rows = cat.text_matches(conn, match, where, k)
            except sqlite3.OperationalError as exc:
                if not fts_syntax or cat.is_corruption(exc):
                    with cat.translate_errors(self.ctx.catalog.path):
                        raise
                raise StoreInputError(
                    f"the text query {text[:80]!r} is not valid FTS5 syntax ({exc}); search "
                    "without raw FTS syntax to match its words as typed"
                ) from None
        pids = np.array([r[0] for r in rows], dtype=np.int64)
        return pids, np.array([r[1] for r in rows], dtype=np.float64)

    def _engine_search(
        self,
        conn: sqlite3.Connection,
        text: str,
        k: int,
        where: tuple[str, Sequence[Any]] | None,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The engine's hits; None when it is off or behind (the FTS5 index answers)."""
        if not self.engine.enabled(conn):
            return None
        allowed = None
        if where is not None:
            allowed = np.array(sorted(cat.filtered_pids(conn, *where)), dtype=np.int64)
        return self.engine.search(conn, query_terms(text), k, allowed)

    def _ensure_index(self, conn: sqlite3.Connection) -> None:
        """Use the catalog's text index; a catalog without one, or whose index holds unfolded
        text (made before schema 3, open read-only here), gets a private one here."""
        if cat.has_text_index(conn) and cat.text_index_folds(conn):
            if self._temp_generation is not None:
                cat.drop_temp_text_index(conn)
                self._temp_generation = None
            return
        gen = cat.generation(conn)
        if gen != self._temp_generation:
            cat.build_temp_text_index(conn)
            self._temp_generation = gen


# ----------------------------------------------------------------------------- sparse BM25 terms

BM25_K1 = 1.2
BM25_B = 0.75
SPARSE_AVG_WORDS = 256.0  # the typical page length the length normalisation assumes


def terms(text: str | None) -> list[str]:
    """The words of ``text`` as the local text indexes see them: NFKC-normalised as the indexed
    text is ("ﬁ" -> "fi", soft hyphens and zero-width spaces removed), then each folded as the
    FTS5 tokenizer folds ("Café" -> "cafe"). The one tokenizer of the BM25 engine, the Qdrant
    sparse terms and the queries of both."""
    normal = cat.nfkc(text) or ""
    if normal.isascii():  # nothing to strip: lower case is the whole fold
        return _WORD.findall(normal.lower())
    return [fold(w) for w in _WORD.findall(normal)]


@functools.lru_cache(maxsize=1 << 16)
def fold(word: str) -> str:
    """Lower case without diacritics, as the unicode61 tokenizer folds ("Ünï" -> "uni"); the
    compatibility forms are folded before (`catalog.nfkc`), unicode61 does not fold them."""
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
