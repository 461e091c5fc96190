"""The catalog's text SQL: the FTS5 index of the page text (built, rebuilt, checked, queried)
and the change log of page text that the BM25 engine (text_engine.py) follows. The statements that
create both belong to the catalog's schema (catalog.py); this module runs everything after that.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from vrag_compress.store.local.catalog import (
    FTS_STATEMENTS,
    FTS_TABLE,
    FTS_TOKENIZER,
    NFKC_SQL,
    TEXT_LOG_STATEMENTS,
    count_pages,
    has_text_index,
    pages_by_pid,
    write_meta,
)


def text_index_folds(conn: sqlite3.Connection) -> bool:
    """Whether the catalog's text index holds NFKC text (schema 3; before it, the raw text)."""
    row = conn.execute(
        "SELECT sql FROM main.sqlite_master WHERE type = 'trigger' AND name = 'pages_fts_insert'"
    ).fetchone()
    return row is not None and NFKC_SQL in row[0]


def create_text_index(conn: sqlite3.Connection) -> int:
    """Add the text index and its triggers to a catalog made before them (or replace one that
    holds unfolded text) and index every page (inside the caller's write transaction); returns
    the pages indexed."""
    for trigger in ("pages_fts_insert", "pages_fts_delete", "pages_fts_update"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute(f"DROP TABLE IF EXISTS main.{FTS_TABLE}")
    for stmt in FTS_STATEMENTS:
        conn.execute(stmt)
    rebuild_text_index(conn)
    return count_pages(conn)


def rebuild_text_index(conn: sqlite3.Connection) -> None:
    """Re-index every page's text from the pages table (inside a write transaction). FTS5's
    own ``rebuild`` would index the raw text, so the folded text is inserted here."""
    conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('delete-all')")
    conn.execute(
        f"INSERT INTO {FTS_TABLE}(rowid, text) SELECT pid, {NFKC_SQL}(text) FROM main.pages"
    )


def build_temp_text_index(conn: sqlite3.Connection) -> None:
    """A private, temporary text index (temp schema) of the committed pages, for a reader of a
    catalog that has none yet (opened read-only, so it cannot gain one). It shadows the name
    ``pages_fts``, so the same queries run on it."""
    drop_temp_text_index(conn)
    conn.execute(
        f"CREATE VIRTUAL TABLE temp.{FTS_TABLE} USING fts5(text, tokenize='{FTS_TOKENIZER}')"
    )
    conn.execute(
        f"INSERT INTO temp.{FTS_TABLE}(rowid, text) SELECT pid, {NFKC_SQL}(text) FROM main.pages "
        "WHERE text IS NOT NULL"
    )


def drop_temp_text_index(conn: sqlite3.Connection) -> None:
    conn.execute(f"DROP TABLE IF EXISTS temp.{FTS_TABLE}")


def text_matches(
    conn: sqlite3.Connection, match: str, where: tuple[str, Sequence[Any]] | None, limit: int
) -> list[tuple[int, float]]:
    """``(pid, bm25)`` of the best ``limit`` pages matching an FTS5 expression (and the compiled
    filter), best first. The score is SQLite's BM25 negated: higher is better. The text index is
    read alone (no join with `pages`: that doubles the cost); a filter selects pids beside it."""
    sql, params = "", []
    if where is not None:
        sql, params = f" AND rowid IN (SELECT pid FROM pages WHERE {where[0]})", list(where[1])
    return conn.execute(
        f"SELECT rowid, -bm25({FTS_TABLE}) AS score FROM {FTS_TABLE} "
        f"WHERE {FTS_TABLE} MATCH ?{sql} ORDER BY score DESC LIMIT ?",
        [match, *params, limit],
    ).fetchall()


def text_index_problems(conn: sqlite3.Connection) -> list[str]:
    """Where the text index disagrees with the page text (read-only: a private index of the
    pages is built in memory and compared with it term by term, with each term's page and
    occurrence counts, and row by row, with each page's token count)."""
    if not has_text_index(conn):
        return []
    text = f"{NFKC_SQL}(text)" if text_index_folds(conn) else "text"  # schema 2: the raw text
    try:
        conn.execute(
            f"CREATE VIRTUAL TABLE temp.fts_expected USING fts5(text, tokenize='{FTS_TOKENIZER}')"
        )
        conn.execute(
            f"INSERT INTO temp.fts_expected(rowid, text) SELECT pid, {text} FROM main.pages"
        )
        conn.execute(f"CREATE VIRTUAL TABLE temp.fts_have USING fts5vocab(main, {FTS_TABLE}, row)")
        conn.execute("CREATE VIRTUAL TABLE temp.fts_want USING fts5vocab(temp, fts_expected, row)")
        terms = sum(
            conn.execute(
                f"SELECT count(*) FROM (SELECT * FROM temp.{a} EXCEPT SELECT * FROM temp.{b})"
            ).fetchone()[0]
            for a, b in (("fts_have", "fts_want"), ("fts_want", "fts_have"))
        )
        rows = [
            r[0]
            for a, b in (
                ("main.pages_fts", "temp.fts_expected"),
                ("temp.fts_expected", "main.pages_fts"),
            )
            for r in conn.execute(
                f"SELECT id FROM (SELECT id, sz FROM {a}_docsize EXCEPT "
                f"SELECT id, sz FROM {b}_docsize) ORDER BY id"
            )
        ]
    except sqlite3.Error as exc:
        return [f"the text index {FTS_TABLE} is unreadable ({exc})"]
    finally:
        for table in ("fts_have", "fts_want", "fts_expected"):
            conn.execute(f"DROP TABLE IF EXISTS temp.{table}")
    if not terms and not rows:
        return []
    where = f", first at page row {min(rows)}" if rows else ""
    return [
        f"the text index {FTS_TABLE} does not match the page text ({terms} terms with other "
        f"counts, {len(set(rows))} page rows of another length{where}); `optimize` rebuilds it"
    ]


# ----------------------------------------------------------------------------- text change log


def has_text_log(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = 'text_log'"
    ).fetchone()
    return row is not None


def create_text_log(conn: sqlite3.Connection) -> None:
    """Add the change log and its triggers (inside the caller's write transaction)."""
    for stmt in TEXT_LOG_STATEMENTS:
        conn.execute(stmt)


def text_log_head(conn: sqlite3.Connection) -> int:
    """The last seq ever logged (0 before the first page write)."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'text_log'").fetchone()
    return 0 if row is None else int(row[0])


def text_log_floor(conn: sqlite3.Connection) -> int:
    """The seq up to which `optimize` pruned the log: an engine index stamped before it cannot
    catch up and is rebuilt."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'text_log_floor'").fetchone()
    return 0 if row is None else int(json.loads(row[0]))


def logged_pids(conn: sqlite3.Connection, after: int, upto: int) -> list[int]:
    """The pages whose text changed (added, replaced or deleted) in ``after < seq <= upto``."""
    rows = conn.execute(
        "SELECT DISTINCT pid FROM text_log WHERE seq > ? AND seq <= ? ORDER BY pid", (after, upto)
    )
    return [r[0] for r in rows]


def prune_text_log(conn: sqlite3.Connection, upto: int) -> None:
    """Drop the log entries up to ``upto`` (inside a write transaction; see `text_log_floor`)."""
    conn.execute("DELETE FROM text_log WHERE seq <= ?", (upto,))
    write_meta(conn, "text_log_floor", upto)


def page_texts(conn: sqlite3.Connection, pids: Sequence[int] | None = None) -> list[tuple]:
    """``(pid, text)`` of the given pages (absent ones skipped), or of every page."""
    if pids is None:
        return conn.execute("SELECT pid, text FROM pages ORDER BY pid").fetchall()
    return pages_by_pid(conn, pids, "pid, text")
