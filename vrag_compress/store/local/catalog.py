"""The SQLite catalog: schema, connection handle, row checksums, error translation and every
SQL statement the embedded store runs (kept here, next to the schema they depend on).

The catalog is the single source of truth for what is committed: a page exists once its row is
committed, and the row points at fp16 bytes already fsync'ed into a segment file. Each row carries
a CRC over its own fields so that a flipped byte inside a record (which SQLite itself does not
checksum) is caught instead of silently changing ids, metadata or offsets.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from vrag_compress.store.base import (
    DocumentRecord,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreReadOnlyError,
)
from vrag_compress.store.lexical import nfkc
from vrag_compress.version import __version__

# 2: the FTS5 text index of page text (`pages_fts`), kept in step with `pages` by triggers.
# 3: the text index holds the NFKC form of the page text ("ﬁ" -> "fi", full width -> ASCII).
# 4: `text_log`, the page-text change log the BM25 engine (text_engine.py) catches up from, and
#    invisible characters (soft hyphen, zero-width space) removed from the indexed text.
SCHEMA_VERSION = 4
CATALOG_NAME = "catalog.sqlite"

# Unicode folding, case and diacritics insensitive ("Café" finds "cafe" and "CAFE"). unicode61
# does no compatibility folding, so the indexed text is NFKC-normalised first (`NFKC_SQL`), as
# query text is: "financial" finds "ﬁnancial" and "ABC" finds "ＡＢＣ". The page text itself is
# stored as given.
NFKC_SQL = "vrag_nfkc"
FTS_TOKENIZER = "unicode61 remove_diacritics 2"
FTS_TABLE = "pages_fts"

# The text index reads its text from `pages` (external content, nothing stored twice); the
# triggers update it inside whatever transaction writes the page row, so add, upsert, delete,
# compaction and crash recovery keep it exact without any code of theirs knowing about it.
FTS_STATEMENTS = (
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(text, content='pages', content_rowid='pid', "
    f"tokenize='{FTS_TOKENIZER}')",
    f"CREATE TRIGGER pages_fts_insert AFTER INSERT ON pages BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.pid, {NFKC_SQL}(new.text)); END",
    f"CREATE TRIGGER pages_fts_delete AFTER DELETE ON pages BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) "
    f"VALUES ('delete', old.pid, {NFKC_SQL}(old.text)); END",
    f"CREATE TRIGGER pages_fts_update AFTER UPDATE OF text ON pages BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) "
    f"VALUES ('delete', old.pid, {NFKC_SQL}(old.text)); "
    f"INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.pid, {NFKC_SQL}(new.text)); END",
)

# The change log of page text: every insert, delete or text update of a page row appends its pid,
# in the same transaction as the row (triggers). The BM25 engine (text_engine.py) is a derived
# index stamped with the last `seq` it reflects; it catches up by re-reading the logged pages, so
# a crash between the catalog commit and the engine's commit loses nothing. AUTOINCREMENT keeps
# seq increasing even after `optimize` prunes the applied entries.
TEXT_LOG_STATEMENTS = (
    "CREATE TABLE IF NOT EXISTS text_log(seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "pid INTEGER NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS pages_log_insert AFTER INSERT ON pages BEGIN "
    "INSERT INTO text_log(pid) VALUES (new.pid); END",
    "CREATE TRIGGER IF NOT EXISTS pages_log_delete AFTER DELETE ON pages BEGIN "
    "INSERT INTO text_log(pid) VALUES (old.pid); END",
    "CREATE TRIGGER IF NOT EXISTS pages_log_update AFTER UPDATE OF text ON pages BEGIN "
    "INSERT INTO text_log(pid) VALUES (new.pid); END",
)

BASE_SCHEMA = """
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
SCHEMA = BASE_SCHEMA + "".join(f"{stmt};\n" for stmt in (*FTS_STATEMENTS, *TEXT_LOG_STATEMENTS))
# Schema 2's text index held the raw page text (its triggers did not fold it).
FTS_STATEMENTS_V2 = tuple(
    re.sub(rf"{NFKC_SQL}\(((?:new|old)\.text)\)", r"\1", s) for s in FTS_STATEMENTS
)
# The schema version from which every catalog carries the meta checksum (it came with schema 1,
# so a schema 1 store may predate it; a later one never lacks it).
META_CRC_SINCE = 2
# The schema version from which the page-text change log exists.
TEXT_LOG_SINCE = 4

_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_SQL_BATCH = 500  # ids per IN (...) list, well under SQLite's variable limit

# column lists of the pages table that callers unpack positionally
LOCATION = "pid, segment_id, row_offset, n_vectors"
RECORD = (
    "page_id, doc_id, page_no, metadata, image_ref, text, "
    "segment_id, row_offset, n_vectors, vec_crc"
)
HIT = "pid, page_id, doc_id, page_no, metadata, image_ref, text"
_DOCUMENT = "doc_id, source, content_hash, n_pages, complete, metadata"


def connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit) that threads may share.

    A reader of a catalog whose writer closed cleanly must create SQLite's shared-memory file
    beside it; on a read-only folder or a full disk it cannot. Then, as nothing can be writing
    there, the catalog is opened ``immutable`` (no locks, no side files) instead of failing."""
    with translate_errors(path):
        try:
            conn = _connect(path, "ro" if readonly else "rw")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as exc:
            if not readonly or is_corruption(exc) or _has_wal(path):
                raise
            conn = _connect(path, "ro", immutable=True)
        conn.execute("PRAGMA busy_timeout = 30000")
        if not readonly:
            conn.execute("PRAGMA synchronous = FULL")
    return conn


def _connect(path: Path, mode: str, immutable: bool = False) -> sqlite3.Connection:
    uri = Path(path).absolute().as_uri() + f"?mode={mode}" + ("&immutable=1" if immutable else "")
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30)
    return with_functions(conn)


def with_functions(conn: sqlite3.Connection) -> sqlite3.Connection:
    """``conn`` with the SQL functions the text index triggers call."""
    conn.create_function(NFKC_SQL, 1, nfkc, deterministic=True)
    return conn


def _has_wal(path: Path) -> bool:
    """Whether commits may still sit in the write-ahead log (an immutable open would miss them)."""
    wal = path.with_name(path.name + "-wal")
    return wal.exists() and wal.stat().st_size > 0


def create_catalog(path: Path, meta: dict[str, Any]) -> None:
    """Write a fresh catalog in WAL mode with the given meta values (JSON-encoded), checksummed."""
    conn = with_functions(sqlite3.connect(path, isolation_level=None))
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(f"BEGIN; {SCHEMA} COMMIT;")
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO meta(key, value) VALUES (?, ?)",
            [(k, json.dumps(v)) for k, v in meta.items()],
        )
        seal_meta(conn)
        conn.execute("COMMIT")
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


def read_meta(conn: sqlite3.Connection) -> dict[str, Any]:
    return {
        k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta") if k != META_CRC
    }


# The meta row holding a CRC over every other meta row: a hand edit of the config, the schema
# version or the segment counter is caught like a damaged page row.
META_CRC = "meta_crc"


def meta_crc(conn: sqlite3.Connection) -> int:
    rows = conn.execute("SELECT key, value FROM meta WHERE key != ? ORDER BY key", (META_CRC,))
    return _crc([list(r) for r in rows])


def seal_meta(conn: sqlite3.Connection) -> None:
    """Store the meta checksum (inside the caller's write transaction)."""
    conn.execute(
        "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (META_CRC, str(meta_crc(conn)))
    )


def meta_problem(conn: sqlite3.Connection) -> str | None:
    """Why the meta table cannot be trusted, or None. Only a store that predates the checksum
    may lack it: schema 1, which never had a text index (a removed row cannot pass for that)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (META_CRC,)).fetchone()
    if row is None:
        if _schema_version(conn) < META_CRC_SINCE and not has_text_index(conn):
            return None
        return "the meta table (config, schema, counters) lacks its checksum (removed by hand?)"
    if row[0] != str(meta_crc(conn)):
        return "the meta table (config, schema, counters) fails its checksum (edited by hand?)"
    return None


def _schema_version(conn: sqlite3.Connection) -> int:
    """The recorded schema version; anything unreadable counts as the newest (fully checked)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        version = json.loads(row[0]) if row else None
    except ValueError:
        version = None
    return version if type(version) is int else SCHEMA_VERSION


def write_meta(conn: sqlite3.Connection, key: str, value: Any) -> None:
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value)))


def delete_meta(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("DELETE FROM meta WHERE key = ?", (key,))


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


# ----------------------------------------------------------------------------- connection handle


class Catalog:
    """The open catalog: one connection shared by threads under a re-entrant mutex."""

    def __init__(self, path: Path, *, readonly: bool):
        self.path = path
        self.readonly = readonly
        self.mutex = threading.RLock()
        self._conn: sqlite3.Connection | None = connect(path, readonly=readonly)

    @property
    def closed(self) -> bool:
        return self._conn is None

    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosedError(f"store {self.path.parent} is closed")
        return self._conn

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection under the mutex, with SQLite errors translated."""
        with self.mutex, translate_errors(self.path):
            yield self.connection()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """`read` inside one read transaction: every SELECT sees the same committed state."""
        with self.read() as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction that bumps the generation on commit and rolls back on error."""
        if self.readonly:
            raise StoreReadOnlyError(f"store {self.path.parent} was opened read-only")
        with self.mutex, translate_errors(self.path):
            conn = self.connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                write_meta(conn, "generation", generation(conn) + 1)
                seal_meta(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Checkpoint the WAL (writers) and close the connection; closing twice is a no-op."""
        with self.mutex:
            if self._conn is None:
                return
            try:
                if not self.readonly:
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass
            self._conn.close()
            self._conn = None


def load_meta(catalog: Catalog) -> dict[str, Any]:
    """The meta table, checked for its checksum, the entries every store needs, their types and
    a schema we can read."""
    with catalog.snapshot() as conn:
        problem = meta_problem(conn)
        try:
            meta = read_meta(conn)
        except (ValueError, TypeError) as exc:
            raise StoreCorruptError(str(catalog.path), f"unreadable meta: {exc}") from exc
    if problem:
        raise StoreCorruptError(str(catalog.path), problem)
    for key in ("schema_version", "config", "generation", "next_segment_id"):
        if key not in meta:
            raise StoreCorruptError(str(catalog.path), f"meta entry {key!r} is missing")
    for key in ("schema_version", "generation", "next_segment_id"):
        if type(meta[key]) is not int or meta[key] < 0:
            raise StoreCorruptError(
                str(catalog.path), f"meta entry {key!r} is {meta[key]!r}, not a whole number"
            )
    if meta["schema_version"] > SCHEMA_VERSION:
        raise StoreError(
            f"store {catalog.path.parent} has schema {meta['schema_version']}, newer than "
            f"this vrag_compress ({__version__}) reads; upgrade vrag_compress"
        )
    if not isinstance(meta["config"], dict):
        raise StoreCorruptError(str(catalog.path), "meta 'config' is not a dict")
    return meta


# ----------------------------------------------------------------------------- meta values


def generation(conn: sqlite3.Connection) -> int:
    """The commit counter: every write transaction bumps it, readers compare it to reload."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    return int(json.loads(row[0]))


def take_segment_id(conn: sqlite3.Connection) -> int:
    """A never-used segment id (the counter moves on inside the caller's write transaction).

    Never one the catalog still references, whatever the counter says: a reused id would make
    the writer clear, and compaction unlink, a live segment."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'next_segment_id'").fetchone()
    seg_id = max(int(json.loads(row[0])), max_segment_id(conn) + 1)
    write_meta(conn, "next_segment_id", seg_id + 1)
    return seg_id


def max_segment_id(conn: sqlite3.Connection) -> int:
    """The largest segment id the catalog references (0 when there is none)."""
    ids = conn.execute(
        "SELECT max(id) FROM (SELECT max(segment_id) AS id FROM segments "
        "UNION ALL SELECT max(segment_id) FROM pages "
        "UNION ALL SELECT max(segment_id) FROM tombstones)"
    ).fetchone()[0]
    return int(ids or 0)


# ----------------------------------------------------------------------------- segments


def segment_rows(conn: sqlite3.Connection) -> dict[int, int]:
    """Committed rows of every segment, by segment id."""
    return dict(conn.execute("SELECT segment_id, committed_rows FROM segments"))


def last_segment(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """``(segment_id, committed_rows)`` of the newest segment, or None before the first write."""
    row = conn.execute(
        "SELECT segment_id, committed_rows FROM segments ORDER BY segment_id DESC LIMIT 1"
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def set_segment_rows(conn: sqlite3.Connection, seg_id: int, rows: int) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO segments(segment_id, committed_rows) VALUES (?, ?)", (seg_id, rows)
    )


def replace_segments(conn: sqlite3.Connection, segments: Sequence[tuple[int, int]]) -> None:
    """After a compaction: the new segments replace all old ones, and no dead space remains."""
    conn.execute("DELETE FROM tombstones")
    conn.execute("DELETE FROM segments")
    conn.executemany("INSERT INTO segments(segment_id, committed_rows) VALUES (?, ?)", segments)


def tombstone_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM tombstones").fetchone()[0])


def dead_vectors(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT coalesce(sum(n_vectors), 0) FROM tombstones").fetchone()[0])


def dead_coded_vectors(conn: sqlite3.Connection) -> int:
    """Deleted vectors that were kept only as codes (no segment rows), awaiting a compact."""
    sql = "SELECT coalesce(sum(n_vectors), 0) FROM tombstones WHERE segment_id = -1"
    return int(conn.execute(sql).fetchone()[0])


# ----------------------------------------------------------------------------- pages


def count_pages(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM pages").fetchone()[0])


def live_vectors(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT coalesce(sum(n_vectors), 0) FROM pages").fetchone()[0])


def pages_by_id(conn: sqlite3.Connection, page_ids: Sequence[str], columns: str) -> list[tuple]:
    """``columns`` (one of the column lists above) of the pages with these ids (absent skipped)."""
    return _in_batches(conn, f"SELECT {columns} FROM pages WHERE page_id IN", page_ids)


def pages_by_pid(conn: sqlite3.Connection, pids: Sequence[int], columns: str) -> list[tuple]:
    return _in_batches(conn, f"SELECT {columns} FROM pages WHERE pid IN", pids)


def _in_batches(conn: sqlite3.Connection, select: str, keys: Sequence[Any]) -> list[tuple]:
    out: list[tuple] = []
    for i in range(0, len(keys), _SQL_BATCH):
        part = list(keys[i : i + _SQL_BATCH])
        out.extend(conn.execute(f"{select} ({','.join('?' * len(part))})", part).fetchall())
    return out


def page_locations_of_document(conn: sqlite3.Connection, doc_id: str) -> list[tuple]:
    return conn.execute(f"SELECT {LOCATION} FROM pages WHERE doc_id = ?", (doc_id,)).fetchall()


def page_ids(conn: sqlite3.Connection, doc_id: str | None = None) -> list[str]:
    """All page ids (sorted), or a document's in page order."""
    if doc_id is None:
        rows = conn.execute("SELECT page_id FROM pages ORDER BY page_id")
    else:
        rows = conn.execute(
            "SELECT page_id FROM pages WHERE doc_id = ? ORDER BY page_no, page_id", (doc_id,)
        )
    return [r[0] for r in rows]


def insert_pages(conn: sqlite3.Connection, rows: Iterable[tuple]) -> None:
    """Rows of ``(page_id, doc_id, page_no, metadata, image_ref, text, segment_id, row_offset,
    n_vectors, vec_crc, row_crc)``."""
    conn.executemany(
        "INSERT INTO pages(page_id, doc_id, page_no, metadata, image_ref, text, segment_id, "
        "row_offset, n_vectors, vec_crc, row_crc) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )


def tombstone(conn: sqlite3.Connection, locations: Sequence[tuple]) -> None:
    """Drop page rows (`LOCATION` tuples) and remember their vector ranges as dead space."""
    if not locations:
        return
    conn.executemany(
        "INSERT INTO tombstones(segment_id, row_offset, n_vectors) VALUES (?,?,?)",
        [(r[1], r[2], r[3]) for r in locations],
    )
    conn.executemany("DELETE FROM pages WHERE pid = ?", [(r[0],) for r in locations])


def pages_to_copy(conn: sqlite3.Connection) -> list[tuple]:
    """Every live page with what its row checksum covers, in page_id order (for `compact`)."""
    return conn.execute(
        "SELECT pid, page_id, doc_id, page_no, metadata, image_ref, text, segment_id, "
        "row_offset, n_vectors, vec_crc FROM pages ORDER BY page_id"
    ).fetchall()


def move_pages(conn: sqlite3.Connection, updates: Iterable[tuple[int, int, int, int]]) -> None:
    """``(segment_id, row_offset, row_crc, pid)``: new vector locations after a compaction."""
    conn.executemany(
        "UPDATE pages SET segment_id = ?, row_offset = ?, row_crc = ? WHERE pid = ?", updates
    )


def snapshot_pages(conn: sqlite3.Connection) -> list[tuple]:
    """``(pid, segment_id, row_offset, n_vectors)`` of every page in page_id order."""
    return conn.execute(f"SELECT {LOCATION} FROM pages ORDER BY page_id").fetchall()


def filtered_pids(conn: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[int]:
    """Pids of the pages a compiled filter (`filters.to_sql`) selects."""
    return [r[0] for r in conn.execute(f"SELECT pid FROM pages WHERE {where}", list(params))]


def pages_for_check(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """Every page row with its checksums, in segment order (for integrity checks)."""
    return conn.execute(
        "SELECT page_id, doc_id, page_no, metadata, image_ref, text, segment_id, row_offset, "
        "n_vectors, vec_crc, row_crc FROM pages ORDER BY segment_id, row_offset"
    )


# ----------------------------------------------------------------------------- documents


def put_documents(conn: sqlite3.Connection, docs: Sequence[tuple[DocumentRecord, str]]) -> None:
    """Insert or replace document rows; each doc comes with its canonical metadata JSON."""
    rows = []
    for d, meta in docs:
        complete = int(d.complete)
        crc = doc_row_crc(d.doc_id, d.source, d.content_hash, d.n_pages, complete, meta)
        rows.append((d.doc_id, d.source, d.content_hash, d.n_pages, complete, meta, crc))
    conn.executemany(
        "INSERT OR REPLACE INTO documents(doc_id, source, content_hash, n_pages, complete, "
        "metadata, row_crc) VALUES (?,?,?,?,?,?,?)",
        rows,
    )


def ensure_documents(conn: sqlite3.Connection, doc_ids: Iterable[str]) -> None:
    """Every listed document gets a row (incomplete, no metadata) unless it has one."""
    rows = [(d, doc_row_crc(d, None, None, None, 0, "{}")) for d in sorted(set(doc_ids))]
    conn.executemany(
        "INSERT OR IGNORE INTO documents(doc_id, complete, metadata, row_crc) "
        "VALUES (?, 0, '{}', ?)",
        rows,
    )


def delete_document(conn: sqlite3.Connection, doc_id: str) -> None:
    conn.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))


def documents(conn: sqlite3.Connection) -> list[DocumentRecord]:
    rows = conn.execute(f"SELECT {_DOCUMENT} FROM documents ORDER BY doc_id").fetchall()
    return [_document(r) for r in rows]


def document(conn: sqlite3.Connection, doc_id: str) -> DocumentRecord | None:
    row = conn.execute(f"SELECT {_DOCUMENT} FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
    return None if row is None else _document(row)


def documents_for_check(conn: sqlite3.Connection) -> sqlite3.Cursor:
    return conn.execute(f"SELECT {_DOCUMENT}, row_crc FROM documents")


def _document(row: tuple) -> DocumentRecord:
    doc_id, source, content_hash, n_pages, complete, meta = row
    metadata = metadata_dict(meta, f"document {doc_id!r}")
    return DocumentRecord(doc_id, source, content_hash, n_pages, bool(complete), metadata)


def metadata_dict(text: str, where: str) -> dict[str, Any]:
    """A stored metadata JSON object; anything else is a damaged catalog, said so clearly."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise StoreCorruptError(CATALOG_NAME, f"{where} has unreadable metadata ({exc})") from exc
    if not isinstance(value, dict):
        raise StoreCorruptError(CATALOG_NAME, f"{where} has metadata that is not a JSON object")
    return value


# ----------------------------------------------------------------------------- SQLite checks


def integrity_problems(conn: sqlite3.Connection, *, quick: bool) -> list[str]:
    """SQLite's own ``quick_check`` or full ``integrity_check``; empty when the file is sound."""
    rows = conn.execute(f"PRAGMA {'quick_check' if quick else 'integrity_check'}").fetchall()
    return [] if rows == [("ok",)] else [r[0] for r in rows]


def schema_problems(conn: sqlite3.Connection) -> list[str]:
    """Schema objects (tables, indexes, triggers, views) that differ from those the catalog's
    schema version defines: a crafted trigger or view could change what writes do or reads see
    while every row still passes its checksum."""
    expected = _expected_schema(min(_schema_version(conn), SCHEMA_VERSION))
    actual = _schema_objects(conn)
    problems = []
    for key in sorted(set(actual) | set(expected)):
        kind, name = key
        if key not in expected:
            problems.append(f"unexpected {kind} {name!r} on {actual[key][0]!r} (crafted?)")
        elif key not in actual:
            problems.append(f"{kind} {name!r} is missing")
        elif actual[key] != expected[key]:
            problems.append(f"{kind} {name!r} differs from its definition (edited?)")
    return problems


@functools.cache
def _expected_schema(version: int) -> dict[tuple[str, str], tuple[str, str]]:
    """``(type, name) -> (table, normalised SQL)`` of a fresh catalog of schema ``version``."""
    fts = {1: (), 2: FTS_STATEMENTS_V2}.get(version, FTS_STATEMENTS)
    log = TEXT_LOG_STATEMENTS if version >= TEXT_LOG_SINCE else ()
    conn = with_functions(sqlite3.connect(":memory:"))
    try:
        conn.executescript(BASE_SCHEMA + "".join(f"{stmt};\n" for stmt in (*fts, *log)))
        return _schema_objects(conn)
    finally:
        conn.close()


def _schema_objects(conn: sqlite3.Connection) -> dict[tuple[str, str], tuple[str, str]]:
    """``(type, name) -> (table, SQL with whitespace collapsed)`` of the main schema. The text
    index's shadow tables are FTS5's own (their SQL varies with the SQLite version): compared by
    name only."""
    out = {}
    for kind, name, table, sql in conn.execute(
        "SELECT type, name, tbl_name, sql FROM main.sqlite_master"
    ):
        shadow = kind == "table" and name.startswith(f"{FTS_TABLE}_")
        out[(kind, name)] = (table, "" if shadow else " ".join((sql or "").split()))
    return out


def orphan_pages(conn: sqlite3.Connection) -> tuple[int, str | None]:
    """Pages whose document has no row (every write gives each page's document one): their
    count and the first such document id."""
    row = conn.execute(
        "SELECT count(*), min(doc_id) FROM pages WHERE doc_id NOT IN (SELECT doc_id FROM documents)"
    ).fetchone()
    return int(row[0]), row[1]


# ----------------------------------------------------------------------------- text index (FTS5)


def has_text_index(conn: sqlite3.Connection, schema: str = "main") -> bool:
    """Whether ``schema`` ("main" or "temp") holds the FTS5 text index."""
    row = conn.execute(
        f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = ?", (FTS_TABLE,)
    ).fetchone()
    return row is not None
