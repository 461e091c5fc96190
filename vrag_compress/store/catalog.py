"""The SQLite catalog: schema, connections, row checksums and error translation.

The catalog is the single source of truth for what is committed: a page exists once its row is
committed, and the row points at fp16 bytes already fsync'ed into a segment file. Each row carries
a CRC over its own fields so that a flipped byte inside a record (which SQLite itself does not
checksum) is caught instead of silently changing ids, metadata or offsets.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vrag_compress.store.base import StoreCorruptError, StoreError

SCHEMA_VERSION = 1
CATALOG_NAME = "catalog.sqlite"

SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents(
    doc_id TEXT PRIMARY KEY, source TEXT, content_hash TEXT, n_pages INTEGER,
    complete INTEGER NOT NULL, metadata TEXT NOT NULL, row_crc INTEGER NOT NULL);
CREATE TABLE segments(segment_id INTEGER PRIMARY KEY, committed_rows INTEGER NOT NULL);
CREATE TABLE pages(
    pid INTEGER PRIMARY KEY AUTOINCREMENT, page_id TEXT NOT NULL UNIQUE, doc_id TEXT NOT NULL,
    page_no INTEGER NOT NULL, metadata TEXT NOT NULL, image_ref TEXT, text TEXT,
    segment_id INTEGER NOT NULL, row_offset INTEGER NOT NULL, n_vectors INTEGER NOT NULL,
    vec_crc INTEGER NOT NULL, row_crc INTEGER NOT NULL);
CREATE INDEX pages_doc ON pages(doc_id, page_no);
CREATE INDEX pages_segment ON pages(segment_id, row_offset);
CREATE TABLE tombstones(
    segment_id INTEGER NOT NULL, row_offset INTEGER NOT NULL, n_vectors INTEGER NOT NULL);
"""

_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB


def connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit) that threads may share."""
    uri = f"file:{path}?mode={'ro' if readonly else 'rw'}"
    with translate_errors(path):
        conn = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        conn.execute("PRAGMA busy_timeout = 30000")
        if not readonly:
            conn.execute("PRAGMA synchronous = FULL")
    return conn


def create_catalog(path: Path, meta: dict[str, Any]) -> None:
    """Write a fresh catalog in WAL mode with the given meta values (JSON-encoded)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(f"BEGIN; {SCHEMA} COMMIT;")
        conn.executemany(
            "INSERT INTO meta(key, value) VALUES (?, ?)",
            [(k, json.dumps(v)) for k, v in meta.items()],
        )
    finally:
        conn.close()


def is_corruption(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc).lower()
    markers = ("malformed", "not a database", "could not decode")
    return code in _CORRUPT_CODES or any(m in text for m in markers)


@contextlib.contextmanager
def translate_errors(path: Path) -> Iterator[None]:
    """Turn sqlite3 errors into `StoreCorruptError` (damaged file) or `StoreError` (naming it)."""
    try:
        yield
    except sqlite3.Error as exc:
        if is_corruption(exc):
            raise StoreCorruptError(str(path), f"SQLite reports: {exc}") from exc
        raise StoreError(f"catalog {path}: {exc}") from exc


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, path: Path, *, write: bool) -> Iterator[None]:
    """BEGIN IMMEDIATE (writes) or a deferred read snapshot; rolls back on any error."""
    with translate_errors(path):
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def read_meta(conn: sqlite3.Connection) -> dict[str, Any]:
    return {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}


def write_meta(conn: sqlite3.Connection, key: str, value: Any) -> None:
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value)))


def _crc(values: list[Any]) -> int:
    return zlib.crc32(json.dumps(values, separators=(",", ":")).encode("utf-8"))


def page_row_crc(
    page_id: str,
    doc_id: str,
    page_no: int,
    metadata: str,
    image_ref: str | None,
    text: str | None,
    segment_id: int,
    row_offset: int,
    n_vectors: int,
    vec_crc: int,
) -> int:
    """CRC over every field of a page row, so a damaged record cannot pass as valid."""
    return _crc(
        [
            page_id,
            doc_id,
            page_no,
            metadata,
            image_ref,
            text,
            segment_id,
            row_offset,
            n_vectors,
            vec_crc,
        ]
    )


def doc_row_crc(
    doc_id: str,
    source: str | None,
    content_hash: str | None,
    n_pages: int | None,
    complete: int,
    metadata: str,
) -> int:
    return _crc([doc_id, source, content_hash, n_pages, complete, metadata])
