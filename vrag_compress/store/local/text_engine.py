"""The BM25 engine of text search: a tantivy index (block-max WAND: top-k without scoring every
matching page) derived from the page text in the catalog.

SQLite stays the source of truth. Every page write appends the page's pid to the catalog's
``text_log`` in the same transaction as the row (catalog.py), and this index is stamped with the
last log ``seq`` it reflects, committed atomically with its documents (a stamp document, pid 0).
A writer catches up after each write and on open: it re-reads the text of the logged pages and
replaces their documents, so a kill -9 between the catalog commit and the engine commit only
leaves the index behind, never wrong. A stale index is not searched: a reader that finds it
behind falls back to the exact FTS5 index in the catalog until the writer caught up.

Damaged files (text_files.py: tantivy's own checksums and a check of ``meta.json``) are found
by `verify`, by a search (files read once, until a commit or merge adds new ones) and by the
writer's catch-up, which rebuilds the index from the page text. A search in the default
``auto`` engine mode then warns and answers from FTS5; ``text_engine="tantivy"`` raises the
`TextIndexError` naming the file. Tantivy's failures on damage, panics included, become that
error too.

Documents hold the page's terms as the shared tokenizer makes them (`lexical.terms`: NFKC,
invisible characters removed, case and diacritics folded), joined by spaces and split again by
tantivy's whitespace tokenizer, so the engine, FTS5 queries and Qdrant's sparse terms agree.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.store.base import StoreError
from vrag_compress.store.lexical import terms
from vrag_compress.store.local import text_sql
from vrag_compress.store.local.context import StoreContext
from vrag_compress.store.local.text_files import (
    TextFiles,
    TextIndexError,
    _schema,
    _tantivy,
    is_panic,
)
from vrag_compress.store.validate import StoreInputError

log = logging.getLogger(__name__)
ENGINE_DIR = "text"
STAMP_PID = 0  # page pids start at 1 (AUTOINCREMENT)
MAX_TERM_BYTES = 255  # longer "words" (a pasted hash, a run of digits) are not indexed
OVER_FETCH = 4  # a filtered search first takes this many times k unfiltered hits
WRITER_HEAP = 50_000_000

# "auto": tantivy, FTS5 when its index is damaged (with a warning); "tantivy": a damaged index
# raises `TextIndexError`; "fts5": SQLite FTS5 only
ENGINES = ("auto", "tantivy", "fts5")


def check_text_engine(engine: Any) -> str:
    """The ``text_engine`` option, checked."""
    if engine not in ENGINES:
        raise StoreInputError(f"text_engine must be one of {ENGINES}, got {engine!r}")
    return str(engine)


def available() -> bool:
    """Whether the tantivy package imports."""
    try:
        _tantivy()
    except StoreError:
        return False
    return True


def page_terms(text: str | None) -> str:
    """A page's indexed terms, space-joined (what its document's ``text`` field holds)."""
    return " ".join(t for t in terms(text) if len(t) * 4 <= MAX_TERM_BYTES or _fits(t))


def _fits(term: str) -> bool:
    return len(term.encode("utf-8")) <= MAX_TERM_BYTES


def terms_crc(joined: str) -> int:
    """The checksum of a page's indexed terms that `problems` compares."""
    return zlib.crc32(joined.encode("utf-8"))


class TextEngine:
    """One store's BM25 engine index: search, catch-up (writer), rebuild and check."""

    def __init__(self, ctx: StoreContext, *, writable: bool):
        self.ctx = ctx
        self.writable = writable
        self._index: Any = None
        self._writer: Any = None
        self.files = TextFiles(self.path)
        self._warned = ""  # the damage last warned about (once, not once a query)

    @property
    def path(self) -> Path:
        return self.ctx.root / ENGINE_DIR

    def enabled(self, conn: sqlite3.Connection) -> bool:
        """Whether text search goes through the engine (the option, and a catalog with a log)."""
        return self.ctx.options.text_engine != "fts5" and text_sql.has_text_log(conn)

    # ----------------------------------------------------------------- search

    def search(
        self, conn: sqlite3.Connection, words: list[str], k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(pids, bm25 scores)`` of the best ``k`` pages holding any of ``words`` (folded
        terms) among ``allowed`` (sorted pids; None: all), best first; None when the index is
        behind the catalog and this process cannot catch it up, or (engine mode ``auto``)
        damaged: the caller uses FTS5."""
        try:
            with self._damage_named():
                hits = self._search(conn, words, k, allowed)
        except TextIndexError as exc:
            if self.ctx.options.text_engine == "tantivy":
                raise
            if str(exc) != self._warned:
                log.warning("%s; text search answers from FTS5 meanwhile", exc)
                self._warned = str(exc)
            return None
        self._warned = ""  # repaired: damage found again is warned about again
        return hits

    def _search(
        self, conn: sqlite3.Connection, words: list[str], k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        searcher = self._fresh_searcher(conn)
        if searcher is None:
            return None
        tv = _tantivy()
        if not words or (allowed is not None and len(allowed) == 0):
            return _empty()
        schema = _schema()
        query = tv.Query.boolean_query(
            [(tv.Occur.Should, tv.Query.term_query(schema, "text", w)) for w in words]
        )
        if allowed is None:
            return _top(searcher, query, k)
        wanted = k * OVER_FETCH
        pids, scores = _top(searcher, query, wanted)
        keep = np.isin(pids, allowed, assume_unique=True)
        if keep.sum() >= k or len(pids) < wanted:  # enough, or every match was seen
            return pids[keep][:k], scores[keep][:k]
        only = tv.Query.const_score_query(
            tv.Query.term_set_query(schema, "pid", [int(p) for p in allowed]), 0.0
        )
        return _top(
            searcher, tv.Query.boolean_query([(tv.Occur.Must, only), (tv.Occur.Must, query)]), k
        )

    def _fresh_searcher(self, conn: sqlite3.Connection) -> Any:
        """A searcher whose stamp is the catalog's log head, catching up first (writer) or
        reopening the index (reader, after a writer's rebuild); None if it stays behind. A
        reader checks the files first (`TextIndexError`; a writer's catch-up rebuilt them)."""
        head = text_sql.text_log_head(conn)
        if self.writable:
            try:
                self.catch_up()
            except (OSError, ValueError) as exc:  # the pages are committed: FTS5 answers
                log.warning("text index %s did not catch up (%s); searching FTS5", self.path, exc)
                return None
            return self._index.searcher()
        for attempt in range(2):
            index = self._open(reopen=attempt == 1)
            if index is None:
                return None
            self.files.check()
            index.reload()
            searcher = index.searcher()
            if _stamp(searcher) == head:
                return searcher
        return None

    @contextlib.contextmanager
    def _damage_named(self) -> Iterator[None]:
        """Tantivy's failures on a damaged index (OSError, ValueError, or a Rust panic, which
        passes ``except Exception``) as a `TextIndexError` naming the damaged file (the first
        one the full check finds; the folder when none fails it)."""
        try:
            yield
        except TextIndexError:
            raise
        except BaseException as exc:
            if not (isinstance(exc, (OSError, ValueError)) or is_panic(exc)):
                raise
            if "LockBusy" in str(exc):  # another writer holds the index: not damage
                raise
            if not self.writable:
                self._index = None  # reopened by the next search
            found = self.files.damage(cached=False)
            what = "tantivy panicked" if is_panic(exc) else type(exc).__name__
            file, detail = found or (str(self.path), f"{what}: {str(exc)[:200]}")
            raise TextIndexError(file, detail) from None

    # ----------------------------------------------------------------- writer

    def catch_up(self) -> None:
        """Bring the index up to the catalog's log head (writer only): replace the documents of
        the pages logged since the stamp, or rebuild when it cannot (no index, a damaged one,
        a stamp ahead of the catalog or older than the pruned log)."""
        if not self.writable:
            return
        with self.ctx.catalog.snapshot() as conn:
            if not self.enabled(conn):
                return
            head = text_sql.text_log_head(conn)
            index = self._open_for_writing()
            try:
                with self._damage_named():
                    self.files.check()
                    stamp = _stamp(index.searcher())
            except TextIndexError as exc:  # derived from the page text: rebuilt in place
                log.warning("%s; the writer rebuilds it now", exc)
                stamp = None
            if stamp == head:
                return
            if stamp is None or stamp > head or stamp < text_sql.text_log_floor(conn):
                self._write(text_sql.page_texts(conn), None, head)
            else:
                pids = text_sql.logged_pids(conn, stamp, head)
                self._write(text_sql.page_texts(conn, pids), pids, head)

    def rebuild(self) -> None:
        """Re-index every page (writer; `optimize`, or an index `verify` found out of step)."""
        if not self.writable:
            return
        with self.ctx.catalog.snapshot() as conn:
            if self.enabled(conn):
                self._open_for_writing()
                self._write(text_sql.page_texts(conn), None, text_sql.text_log_head(conn))

    def _write(self, rows: list[tuple], replaced: list[int] | None, head: int) -> None:
        """One engine commit: drop the ``replaced`` pages' documents (None: every document),
        add ``rows`` (pid, text) and the stamp ``head``. A failure rolls the writer back, so a
        retry cannot commit the same documents twice."""
        try:
            self._stage(rows, replaced, head)
            self._writer.commit()
        except BaseException:
            try:
                self._writer.rollback()
                _skip_reused_opstamp(self._writer)
            except Exception as exc:  # drop the writer: the next write opens a new one
                log.warning("text index %s: rollback failed (%s)", self.path, exc)
                self._writer = self._index = None
            raise
        self._index.reload()

    def _stage(self, rows: list[tuple], replaced: list[int] | None, head: int) -> None:
        tv = _tantivy()
        writer = self._writer
        if replaced is None:
            writer.delete_all_documents()
        else:  # (a u64 term given to delete_documents_by_term matches nothing)
            writer.delete_documents_by_query(
                tv.Query.term_set_query(_schema(), "pid", [STAMP_PID, *replaced])
            )
        for pid, text in rows:
            if text is None:
                continue
            joined = page_terms(text)
            doc = tv.Document()
            doc.add_text("text", joined)
            doc.add_unsigned("pid", int(pid))
            doc.add_unsigned("crc", terms_crc(joined))
            writer.add_document(doc)
        stamp = tv.Document()
        stamp.add_unsigned("pid", STAMP_PID)
        stamp.add_unsigned("seq", head)
        writer.add_document(stamp)

    def _open_for_writing(self) -> Any:
        """The index with its writer (created, or recreated when unreadable)."""
        if self._writer is not None:
            return self._index
        try:
            with self._damage_named():
                index = self._open(create=True)
                self._writer = _new_writer(index)
        except TextIndexError as exc:  # damaged files: the index is derived, start over
            log.warning("%s; the writer rebuilds it now", exc)
            self._index = None
            shutil.rmtree(self.path, ignore_errors=True)
            index = self._open(create=True)
            self._writer = _new_writer(index)
        return index

    def _open(self, *, create: bool = False, reopen: bool = False) -> Any:
        """The tantivy index (None when there is none and ``create`` is false)."""
        if self._index is not None and not reopen:
            return self._index
        tv = _tantivy()
        if not create and not (self.path / "meta.json").is_file():
            return None
        self.path.mkdir(exist_ok=True)
        self._index = tv.Index(_schema(), path=str(self.path), reuse=True)
        return self._index

    def close(self) -> None:
        """Drop the writer after its background merges finished (a merge left running would
        be abandoned half-way and redone by the next writer)."""
        writer, self._writer, self._index = self._writer, None, None
        if writer is not None:
            try:
                writer.wait_merging_threads()
            except (OSError, ValueError) as exc:
                log.warning("text index %s: a merge did not finish (%s)", self.path, exc)

    # ----------------------------------------------------------------- verify

    def problems(self, conn: sqlite3.Connection) -> list[str]:
        """Where the index is damaged or disagrees with the page text (read-only): its files
        must pass `TextFiles.check` (every byte read), every page with text must have exactly
        one document with its terms' checksum, and no other document may exist; pages logged
        after the stamp are still to catch up and are not compared."""
        if not self.enabled(conn) or not available() or not (self.path / "meta.json").is_file():
            return []  # no index yet: the next writer open builds it
        tv = _tantivy()
        try:
            with self._damage_named():
                self.files.check(cached=False)
                index = tv.Index(_schema(), path=str(self.path), reuse=True)
                searcher = index.searcher()
                stamp = _stamp(searcher)
                hits = searcher.search(
                    tv.Query.all_query(), max(1, searcher.num_docs), count=False
                ).hits
                addresses = [a for _, a in hits]
                have_pids = _values(searcher, "pid", addresses)
                have_crcs = searcher.fast_field_values("crc", addresses)  # None: the stamp
        except TextIndexError as exc:
            return [str(exc)]
        head, floor = text_sql.text_log_head(conn), text_sql.text_log_floor(conn)
        if stamp is None or stamp > head or stamp < floor:
            return [
                f"the text index {self.path} is stamped {stamp} against the catalog's log "
                f"{floor}..{head}; `optimize` rebuilds it"
            ]
        pending = set(text_sql.logged_pids(conn, stamp, head))
        have: dict[int, int] = {}
        duplicates = 0
        for pid, crc in zip(have_pids, have_crcs, strict=True):
            if pid == STAMP_PID or pid in pending:
                continue
            duplicates += pid in have
            have[pid] = crc
        want = {
            pid: terms_crc(page_terms(text))
            for pid, text in text_sql.page_texts(conn)
            if text is not None and pid not in pending
        }
        missing = sorted(set(want) - set(have))
        extra = sorted(set(have) - set(want))
        differ = sorted(p for p in set(want) & set(have) if want[p] != have[p])
        if not (missing or extra or differ or duplicates):
            return []
        first = min([*missing, *extra, *differ], default=None)
        where = "" if first is None else f", first at page row {first}"
        return [
            f"the text index {self.path} does not match the page text ({len(missing)} pages "
            f"missing, {len(extra)} extra, {len(differ)} with other terms, {duplicates} "
            f"duplicated{where}); `optimize` rebuilds it"
        ]


def _new_writer(index: Any) -> Any:
    writer = index.writer(WRITER_HEAP, 1)
    _skip_reused_opstamp(writer)
    return writer


def _skip_reused_opstamp(writer: Any) -> None:
    """Spend the operation stamp a fresh (or rolled-back) tantivy writer hands out first.

    Such a writer starts from the last commit's opstamp, so its first operation carries the
    same stamp as that commit, and a delete with a stamp tantivy may count as already applied
    can be skipped. A random-kill test once found a deleted page's document back after the
    next writer's catch-up (whose first operation is a delete); this was traced to that reuse,
    though no deterministic reproduction is kept. An empty delete takes the reused stamp."""
    writer.delete_documents_by_query(_tantivy().Query.term_set_query(_schema(), "pid", []))


def _stamp(searcher: Any) -> int | None:
    """The log seq the searcher's index reflects (None: never stamped); more than one stamp
    document (a segment's counts damaged, so dropped or absent documents count) raises."""
    query = _tantivy().Query.term_query(_schema(), "pid", STAMP_PID)
    hits = searcher.search(query, 2, count=False).hits
    if not hits:
        return None
    if len(hits) > 1:
        raise ValueError("the index holds more than one stamp document")
    return _values(searcher, "seq", [hits[0][1]])[0]


def _values(searcher: Any, field: str, addresses: list[Any]) -> list[int]:
    """A fast field's values of these documents, each of which has the field (every document
    has a pid, the stamp a seq); one without it (damaged column data) raises ValueError."""
    values = searcher.fast_field_values(field, addresses)
    if any(not isinstance(v, int) for v in values):
        raise ValueError(f"documents without a {field!r} value")
    return [int(v) for v in values]


def _top(searcher: Any, query: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    hits = searcher.search(query, k, count=False).hits  # count=True would score every match
    if not hits:
        return _empty()
    pids = np.array(_values(searcher, "pid", [a for _, a in hits]), dtype=np.int64)
    return pids, np.array([s for s, _ in hits], dtype=np.float64)


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
