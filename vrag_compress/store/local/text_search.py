"""The embedded store's text search: BM25 top-k over the stored page text, through the BM25
engine (text_engine.py) while it is up to date, else through the catalog's SQLite FTS5 index.
A malformed raw FTS5 query is a clear `StoreInputError`, never an SQLite error.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np

from vrag_compress.store.lexical import match_expression, query_terms
from vrag_compress.store.local import catalog as cat
from vrag_compress.store.local import text_sql
from vrag_compress.store.local.context import StoreContext
from vrag_compress.store.local.text_engine import TextEngine
from vrag_compress.store.validate import StoreInputError


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
                rows = text_sql.text_matches(conn, match, where, k)
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
        if cat.has_text_index(conn) and text_sql.text_index_folds(conn):
            if self._temp_generation is not None:
                text_sql.drop_temp_text_index(conn)
                self._temp_generation = None
            return
        gen = cat.generation(conn)
        if gen != self._temp_generation:
            text_sql.build_temp_text_index(conn)
            self._temp_generation = gen
