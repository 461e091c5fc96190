"""`LocalStore`: the embedded multi-vector store (SQLite catalog + fp16 segments + FAISS).

Layout of a store directory::

    catalog.sqlite   WAL-mode catalog: meta (schema, config, versions, generation), documents,
                     pages (ids, metadata, vector location + CRCs), segments (committed lengths),
                     tombstones (dead vector ranges awaiting compact)
    segments/        append-only fp16 files seg-NNNNNNNN.f16, memory-mapped for reading
    LOCK             writer lock (flock, holder's pid inside)

Write protocol (crash safety): validate everything, take the catalog write lock, append the fp16
rows to the active segment and fsync, then commit the rows that point at them in one transaction.
A crash before the commit leaves only a torn tail past the committed length, which readers never
read and the next writer truncates. Deletes only touch the catalog (the ranges become tombstones);
`compact` copies live rows into new segments, commits the new locations, then unlinks old files.

Readers take a catalog snapshot (one read transaction) and map segments only up to the committed
lengths, so they never see uncommitted pages. Searches use an in-memory token matrix (fp32 while it
fits ``cache_fp32_max_bytes``, else fp16) rebuilt whenever the catalog generation changes.

Search modes: ``exact`` scores every (filtered) page; ``two_stage`` takes candidate pages from a
FAISS token index and reranks them exactly; ``auto`` is exact while the filtered collection holds
at most ``exact_max_tokens`` vectors (default 1,000,000, about 10,000 pages at 100 vectors each),
where exact search costs one matrix product of a few tens of milliseconds, else two-stage.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.store import catalog as cat
from vrag_compress.store import segments as seg
from vrag_compress.store.ann import TokenIndex
from vrag_compress.store.base import (
    DocumentRecord,
    DuplicatePageError,
    PageNotFoundError,
    PageRecord,
    SearchMode,
    SearchResult,
    StoreClosedError,
    StoreConfigMismatch,
    StoreCorruptError,
    StoreError,
    StoreExistsError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
    VerifyReport,
)
from vrag_compress.store.filters import compile_filter
from vrag_compress.store.maxsim import gather_pages, maxsim_scores, top_k
from vrag_compress.store.validate import (
    StoreInputError,
    check_config,
    check_dim,
    check_document,
    check_id,
    check_k,
    check_page,
    check_query,
    check_unique,
    check_vectors,
    metadata_json,
)
from vrag_compress.version import __version__

LOCK_NAME = "LOCK"
_SQL_BATCH = 500
_MODES = ("auto", "exact", "two_stage")


@dataclass
class StoreOptions:
    """Tuning knobs (not persisted; pass them to `create`/`open`)."""

    exact_max_tokens: int = 1_000_000
    ivf_min_tokens: int = 200_000
    candidates_per_token: int = 64
    nprobe: int = 32
    segment_max_bytes: int = 1 << 30
    cache_fp32_max_bytes: int = 1 << 30
    verify_on_open_max_bytes: int = 256 << 20
    check_on_open: bool = True
    chunk_tokens: int | None = None  # None: as large as a 256 MB score block allows
    threads: int = 1  # extra chunk threads on top of BLAS's own


@dataclass
class _Snapshot:
    """Committed pages at one catalog generation, in page_id order, with their token matrix."""

    generation: int
    pids: np.ndarray
    bounds: np.ndarray
    tokens: np.ndarray
    pid_sorted: np.ndarray
    pos_of_sorted: np.ndarray

    def positions(self, pids: np.ndarray) -> np.ndarray:
        """Snapshot positions (ascending) of the given pids that the snapshot holds."""
        idx = np.searchsorted(self.pid_sorted, pids)
        idx = np.minimum(idx, max(len(self.pid_sorted) - 1, 0))
        ok = (len(self.pid_sorted) > 0) & (self.pid_sorted[idx] == pids)
        return np.sort(self.pos_of_sorted[idx[ok]])


class _WriterLock:
    """An exclusive flock on ``LOCK``; the kernel drops it when the holder dies (no stale locks)."""

    def __init__(self, root: Path):
        self.path = root / LOCK_NAME
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(self.fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StoreLockedError(
                    f"store {root} is open for writing by another handle (pid {holder}); close it "
                    "first or open with readonly=True"
                ) from exc
            raise
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


class LocalStore:
    """Embedded multi-vector store; build with `LocalStore.create` or `LocalStore.open`."""

    def __init__(
        self, root: Path, *, readonly: bool, options: StoreOptions, lock: _WriterLock | None
    ):
        self.root = root
        self.readonly = readonly
        self.options = options
        self._lock = lock
        self._mutex = threading.RLock()
        self._catalog_path = root / cat.CATALOG_NAME
        self._conn: sqlite3.Connection | None = cat.connect(self._catalog_path, readonly=readonly)
        self._maps: dict[int, np.ndarray] = {}
        self._snap: _Snapshot | None = None
        self._ann: TokenIndex | None = None
        try:
            self._meta = self._load_meta()
            self.dim = check_dim(self._meta["config"])
            if not readonly:
                self._recover()
            if options.check_on_open:
                self._check_on_open()
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- lifecycle

    @classmethod
    def create(
        cls, path: str | os.PathLike[str], config: dict[str, Any], **options: Any
    ) -> LocalStore:
        """A new, empty store at ``path`` (a new or empty directory) recording ``config``."""
        config = check_config(config)
        root = Path(path)
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise StoreExistsError(f"{root} already exists and is not an empty directory")
        (root / seg.SEGMENT_DIR).mkdir(parents=True, exist_ok=True)
        tmp = root / (cat.CATALOG_NAME + ".tmp")
        cat.create_catalog(
            tmp,
            {
                "schema_version": cat.SCHEMA_VERSION,
                "config": config,
                "library_version": __version__,
                "created_at": time.time(),
                "generation": 0,
                "next_segment_id": 1,
            },
        )
        os.replace(tmp, root / cat.CATALOG_NAME)
        seg.fsync_dir(root)
        return cls.open(root, **options)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        expect: dict[str, Any] | None = None,
        **options: Any,
    ) -> LocalStore:
        """Open an existing store; ``expect`` lists config values that must match."""
        root = Path(path)
        if not (root / cat.CATALOG_NAME).is_file():
            raise StoreNotFoundError(f"no store at {root} (missing {cat.CATALOG_NAME}); create one")
        lock = None if readonly else _WriterLock(root)
        store = cls(root, readonly=readonly, options=StoreOptions(**options), lock=lock)
        if expect:
            try:
                store._check_expect(expect)
            except BaseException:
                store.close()
                raise
        return store

    @classmethod
    def verify_path(cls, path: str | os.PathLike[str]) -> VerifyReport:
        """Verify a store that may be too damaged to open normally (read-only, no open checks)."""
        try:
            store = cls.open(path, readonly=True, check_on_open=False)
        except StoreCorruptError as exc:
            return VerifyReport(False, [str(exc)], 0)
        with store:
            return store.verify()

    def close(self) -> None:
        """Checkpoint the WAL (writers), close the catalog and release the writer lock."""
        with self._mutex:
            if self._conn is not None:
                try:
                    if not self.readonly:
                        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error:
                    pass
                self._conn.close()
                self._conn = None
            self._maps.clear()
            self._snap = None
            self._ann = None
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def __enter__(self) -> LocalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._conn is None

    # ----------------------------------------------------------------- config

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._meta["config"]))

    @property
    def library_version(self) -> str:
        return str(self._meta.get("library_version", ""))

    def update_config(self, **changes: Any) -> None:
        """Merge ``changes`` into the stored config (``dim`` cannot change once pages exist)."""
        new = {**self._meta["config"], **changes}
        new = check_config(new)
        with self._write() as conn:
            if new["dim"] != self.dim and self._count(conn) > 0:
                raise StoreError(
                    f"cannot change dim of {self.root} from {self.dim}: it holds pages"
                )
            cat.write_meta(conn, "config", new)
        self._meta["config"] = new
        self.dim = new["dim"]

    def _check_expect(self, expect: dict[str, Any]) -> None:
        stored = self._meta["config"]
        missing = object()
        diffs = {k: (stored.get(k), v) for k, v in expect.items() if stored.get(k, missing) != v}
        if diffs:
            raise StoreConfigMismatch(str(self.root), diffs)

    # ----------------------------------------------------------------- writes

    def add(self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord] = ()) -> None:
        """Store new pages (and upsert document rows) atomically; existing page ids are an error."""
        self._write_pages(pages, documents, replace=False)

    def upsert(self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord] = ()) -> None:
        """Like `add`, but pages whose id exists replace the stored ones."""
        self._write_pages(pages, documents, replace=True)

    def put_document(self, doc: DocumentRecord) -> None:
        """Insert or replace one document row."""
        doc = check_document(doc)
        with self._write() as conn:
            self._put_documents(conn, [doc])

    def delete(self, *, doc_id: str | None = None, page_ids: Sequence[str] | None = None) -> int:
        """Delete a document's pages and its row, or the given pages; returns pages removed."""
        if (doc_id is None) == (page_ids is None):
            raise StoreInputError("delete needs exactly one of doc_id= or page_ids=")
        if doc_id is not None:
            check_id(doc_id, "doc_id")
        else:
            page_ids = [
                check_id(p, f"page_ids[{i}]") for i, p in enumerate(_as_list(page_ids, "page_ids"))
            ]
        with self._write() as conn:
            if doc_id is not None:
                rows = conn.execute(
                    "SELECT pid, segment_id, row_offset, n_vectors FROM pages WHERE doc_id = ?",
                    (doc_id,),
                ).fetchall()
                conn.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))
            else:
                rows = self._rows_by_page_id(
                    conn, page_ids, "pid, segment_id, row_offset, n_vectors"
                )
            self._tombstone(conn, rows)
        return len(rows)

    def _write_pages(
        self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord], *, replace: bool
    ) -> None:
        pages = [check_page(p, self.dim, i) for i, p in enumerate(_as_list(pages, "pages"))]
        docs = [check_document(d, i) for i, d in enumerate(_as_list(documents, "documents"))]
        check_unique([p.page_id for p in pages], "pages")
        check_unique([d.doc_id for d in docs], "documents")
        vectors = [
            check_vectors(p.vectors, self.dim, f"pages[{i}] ({p.page_id!r}).vectors")
            for i, p in enumerate(pages)
        ]
        metas = [
            metadata_json(p.metadata, f"pages[{i}] ({p.page_id!r}).metadata")
            for i, p in enumerate(pages)
        ]
        if not pages and not docs:
            return
        with self._write() as conn:
            existing = self._rows_by_page_id(
                conn,
                [p.page_id for p in pages],
                "pid, segment_id, row_offset, n_vectors, page_id",
                missing_ok=True,
            )
            if existing and not replace:
                ids = sorted(r[4] for r in existing)
                raise DuplicatePageError(
                    f"{len(ids)} page ids already exist in {self.root} (e.g. {ids[:5]}); "
                    "use upsert() to replace them"
                )
            self._tombstone(conn, [r[:4] for r in existing])
            if pages:
                self._insert_pages(conn, pages, vectors, metas)
            self._put_documents(conn, docs)
            self._ensure_documents(conn, [p.doc_id for p in pages])

    def _insert_pages(
        self,
        conn: sqlite3.Connection,
        pages: list[PageRecord],
        vectors: list[np.ndarray],
        metas: list[str],
    ) -> None:
        blob = np.concatenate(vectors, axis=0)
        seg_id, start_rows = self._active_segment(conn, blob.nbytes)
        seg.append(seg.segment_path(self.root, seg_id), start_rows * self._row_bytes, blob.data)
        offset = start_rows
        rows = []
        for page, vec, meta in zip(pages, vectors, metas, strict=True):
            vcrc = seg.vectors_crc(vec)
            page_no = int(page.page_no)
            fields = (
                page.page_id,
                page.doc_id,
                page_no,
                meta,
                page.image_ref,
                page.text,
                seg_id,
                offset,
                len(vec),
                vcrc,
            )
            rows.append((*fields, cat.page_row_crc(*fields)))
            offset += len(vec)
        conn.executemany(
            "INSERT INTO pages(page_id, doc_id, page_no, metadata, image_ref, text, segment_id, "
            "row_offset, n_vectors, vec_crc, row_crc) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        conn.execute(
            "INSERT OR REPLACE INTO segments(segment_id, committed_rows) VALUES (?, ?)",
            (seg_id, offset),
        )

    def _active_segment(self, conn: sqlite3.Connection, nbytes: int) -> tuple[int, int]:
        """The segment to append to and its committed rows; starts a new one when full."""
        row = conn.execute(
            "SELECT segment_id, committed_rows FROM segments ORDER BY segment_id DESC LIMIT 1"
        ).fetchone()
        if row is not None and (
            row[1] == 0 or row[1] * self._row_bytes + nbytes <= self.options.segment_max_bytes
        ):
            return int(row[0]), int(row[1])
        return self._new_segment_id(conn), 0

    def _new_segment_id(self, conn: sqlite3.Connection) -> int:
        """A never-used segment id; a stale file of that name (uncommitted) is cleared."""
        seg_id = int(
            json.loads(
                conn.execute("SELECT value FROM meta WHERE key = 'next_segment_id'").fetchone()[0]
            )
        )
        cat.write_meta(conn, "next_segment_id", seg_id + 1)
        path = seg.segment_path(self.root, seg_id)
        if path.exists():
            path.unlink()
        return seg_id

    def _put_documents(self, conn: sqlite3.Connection, docs: list[DocumentRecord]) -> None:
        rows = []
        for i, d in enumerate(docs):
            meta = metadata_json(d.metadata, f"documents[{i}] ({d.doc_id!r}).metadata")
            complete = int(d.complete)
            rows.append(
                (
                    d.doc_id,
                    d.source,
                    d.content_hash,
                    d.n_pages,
                    complete,
                    meta,
                    cat.doc_row_crc(d.doc_id, d.source, d.content_hash, d.n_pages, complete, meta),
                )
            )
        conn.executemany(
            "INSERT OR REPLACE INTO documents(doc_id, source, content_hash, n_pages, complete, "
            "metadata, row_crc) VALUES (?,?,?,?,?,?,?)",
            rows,
        )

    def _ensure_documents(self, conn: sqlite3.Connection, doc_ids: list[str]) -> None:
        """Every page's document gets a row (incomplete, no metadata) unless it has one."""
        rows = [(d, cat.doc_row_crc(d, None, None, None, 0, "{}")) for d in sorted(set(doc_ids))]
        conn.executemany(
            "INSERT OR IGNORE INTO documents(doc_id, complete, metadata, row_crc) "
            "VALUES (?, 0, '{}', ?)",
            rows,
        )

    def _tombstone(self, conn: sqlite3.Connection, rows: list[tuple]) -> None:
        """Drop page rows and remember their vector ranges as dead space for `compact`."""
        if not rows:
            return
        conn.executemany(
            "INSERT INTO tombstones(segment_id, row_offset, n_vectors) VALUES (?,?,?)",
            [(r[1], r[2], r[3]) for r in rows],
        )
        conn.executemany("DELETE FROM pages WHERE pid = ?", [(r[0],) for r in rows])

    def compact(self) -> None:
        """Rewrite live vectors into fresh segments, dropping deleted rows and torn tails."""
        with self._write() as conn:
            dead = conn.execute("SELECT count(*) FROM tombstones").fetchone()[0]
            segs = conn.execute("SELECT segment_id, committed_rows FROM segments").fetchall()
            if dead == 0 and len(segs) <= 1:
                return
            live = conn.execute(
                "SELECT pid, page_id, doc_id, page_no, metadata, image_ref, text, segment_id, "
                "row_offset, n_vectors, vec_crc FROM pages ORDER BY page_id"
            ).fetchall()
            updates, new_segs = self._copy_live(conn, live, dict(segs))
            conn.executemany(
                "UPDATE pages SET segment_id = ?, row_offset = ?, row_crc = ? WHERE pid = ?",
                updates,
            )
            conn.execute("DELETE FROM tombstones")
            conn.execute("DELETE FROM segments")
            conn.executemany(
                "INSERT INTO segments(segment_id, committed_rows) VALUES (?, ?)", new_segs
            )
        for seg_id, _ in segs:
            seg.segment_path(self.root, seg_id).unlink(missing_ok=True)
            self._maps.pop(seg_id, None)
        seg.fsync_dir(self.root / seg.SEGMENT_DIR)

    def _copy_live(
        self, conn: sqlite3.Connection, live: list[tuple], seg_rows: dict[int, int]
    ) -> tuple[list[tuple], list[tuple[int, int]]]:
        """Append live pages to new segments (checking CRCs); new locations and segment rows."""
        updates: list[tuple] = []
        new_segs: list[tuple[int, int]] = []
        writer = _SegmentWriter(self.root, self._row_bytes)
        for pid, page_id, doc_id, page_no, meta, image_ref, text, old_seg, off, n, vcrc in live:
            full = (
                writer.rows > 0
                and (writer.rows + n) * self._row_bytes > self.options.segment_max_bytes
            )
            if writer.seg_id < 0 or full:
                if writer.seg_id >= 0:
                    new_segs.append(writer.finish())
                writer.start(self._new_segment_id(conn))
            vec = self._segment_map(old_seg, seg_rows[old_seg])[off : off + n]
            if seg.vectors_crc(vec) != vcrc:
                raise StoreCorruptError(
                    str(seg.segment_path(self.root, old_seg)),
                    f"checksum mismatch for page {page_id!r}; compact aborted",
                )
            updates.append(
                (
                    writer.seg_id,
                    writer.rows,
                    cat.page_row_crc(
                        page_id,
                        doc_id,
                        page_no,
                        meta,
                        image_ref,
                        text,
                        writer.seg_id,
                        writer.rows,
                        n,
                        vcrc,
                    ),
                    pid,
                )
            )
            writer.write(vec)
        if writer.seg_id >= 0:
            new_segs.append(writer.finish())
        return updates, new_segs

    # ----------------------------------------------------------------- reads

    def count(self) -> int:
        with self._read() as conn:
            return self._count(conn)

    def get(self, page_ids: Sequence[str], *, missing: str = "error") -> list[PageRecord]:
        """Pages in the order asked; unknown ids raise `PageNotFoundError` (or are skipped)."""
        ids = [check_id(p, f"page_ids[{i}]") for i, p in enumerate(_as_list(page_ids, "page_ids"))]
        if missing not in ("error", "skip"):
            raise StoreInputError(f"missing must be 'error' or 'skip', got {missing!r}")
        with self._read() as conn:
            rows = self._rows_by_page_id(
                conn,
                ids,
                "page_id, doc_id, page_no, metadata, image_ref, text, segment_id, "
                "row_offset, n_vectors, vec_crc",
                missing_ok=True,
            )
            seg_rows = dict(conn.execute("SELECT segment_id, committed_rows FROM segments"))
        found = {r[0]: r for r in rows}
        absent = [i for i in ids if i not in found]
        if absent and missing == "error":
            raise PageNotFoundError(f"{len(absent)} page ids not in {self.root}: {absent[:5]}")
        return [self._record(found[i], seg_rows) for i in ids if i in found]

    def _record(self, row: tuple, seg_rows: dict[int, int]) -> PageRecord:
        page_id, doc_id, page_no, meta, image_ref, text, seg_id, off, n, vcrc = row
        vec = self._segment_map(seg_id, seg_rows[seg_id])[off : off + n]
        if seg.vectors_crc(vec) != vcrc:
            raise StoreCorruptError(
                str(seg.segment_path(self.root, seg_id)), f"checksum mismatch for page {page_id!r}"
            )
        return PageRecord(
            page_id,
            doc_id,
            page_no,
            np.asarray(vec, dtype=np.float32),
            json.loads(meta),
            image_ref,
            text,
        )

    def documents(self) -> list[DocumentRecord]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT doc_id, source, content_hash, n_pages, complete, metadata "
                "FROM documents ORDER BY doc_id"
            ).fetchall()
        return [_doc(r) for r in rows]

    def document(self, doc_id: str) -> DocumentRecord | None:
        check_id(doc_id, "doc_id")
        with self._read() as conn:
            row = conn.execute(
                "SELECT doc_id, source, content_hash, n_pages, complete, metadata "
                "FROM documents WHERE doc_id = ?",
                (doc_id,),
            ).fetchone()
        return None if row is None else _doc(row)

    def page_ids(self, doc_id: str | None = None) -> list[str]:
        """All page ids (sorted), or a document's in page order."""
        with self._read() as conn:
            if doc_id is None:
                rows = conn.execute("SELECT page_id FROM pages ORDER BY page_id")
            else:
                check_id(doc_id, "doc_id")
                rows = conn.execute(
                    "SELECT page_id FROM pages WHERE doc_id = ? ORDER BY page_no, page_id",
                    (doc_id,),
                )
            return [r[0] for r in rows]

    # ----------------------------------------------------------------- search

    def search(
        self,
        query: np.ndarray,
        k: int = 5,
        *,
        filter: dict[str, Any] | None = None,
        mode: SearchMode = "auto",
    ) -> list[SearchResult]:
        """Top-k pages by MaxSim, best first; ties by page_id ascending."""
        return self.search_many([query], k, filter=filter, mode=mode)[0]

    def search_many(
        self,
        queries: Sequence[np.ndarray],
        k: int = 5,
        *,
        filter: dict[str, Any] | None = None,
        mode: SearchMode = "auto",
    ) -> list[list[SearchResult]]:
        """`search` for several queries; exact mode scores them all in one pass."""
        qs = [check_query(q, self.dim, f"queries[{i}]") for i, q in enumerate(_as_list(queries))]
        k = check_k(k)
        if mode not in _MODES:
            raise StoreInputError(f"mode must be one of {_MODES}, got {mode!r}")
        where = compile_filter(filter) if filter else None
        if not qs:
            return []
        with self._mutex:
            for attempt in range(3):
                hits = self._search_snapshot(qs, k, where, mode)
                results = self._resolve(hits, drop_missing=attempt == 2)
                if results is not None:
                    return results
                self._snap = None  # a hit vanished (concurrent delete): retry on a fresh snapshot
            raise AssertionError("unreachable: the last attempt drops vanished hits")

    def _search_snapshot(
        self, qs: list[np.ndarray], k: int, where: tuple[str, list] | None, mode: str
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query: (pids, scores) of the top-k on the current snapshot."""
        snap = self._snapshot()
        pos = None if where is None else snap.positions(self._filter_pids(where))
        n_tokens = (
            int(snap.bounds[-1])
            if pos is None
            else int((snap.bounds[pos + 1] - snap.bounds[pos]).sum())
        )
        exact = mode == "exact" or (mode == "auto" and n_tokens <= self.options.exact_max_tokens)
        if exact:
            return self._exact(snap, qs, k, pos)
        return [self._two_stage(snap, q, k, pos) for q in qs]

    def _exact(
        self, snap: _Snapshot, qs: list[np.ndarray], k: int, pos: np.ndarray | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        if pos is None:
            tokens, bounds, pos = snap.tokens, snap.bounds, np.arange(len(snap.pids))
        else:
            rows, bounds = gather_pages(snap.bounds, pos)
            tokens = snap.tokens[rows]
        scores = maxsim_scores(
            qs, tokens, bounds, chunk_tokens=self.options.chunk_tokens, threads=self.options.threads
        )
        out = []
        for row in scores:
            best = top_k(row, k)
            out.append((snap.pids[pos[best]], row[best]))
        return out

    def _two_stage(
        self, snap: _Snapshot, q: np.ndarray, k: int, pos: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        ann = self._token_index(snap)
        cand = snap.positions(ann.candidates(q, self.options.candidates_per_token))
        if pos is not None:
            cand = np.intersect1d(cand, pos, assume_unique=True)
            if len(cand) < min(k, len(pos)):
                cand = pos  # the filter left too few candidates: score all that pass it
        if len(cand) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        return self._exact(snap, [q], k, cand)[0]

    def _token_index(self, snap: _Snapshot) -> TokenIndex:
        if self._ann is None:
            self._ann = TokenIndex(
                self.dim, ivf_min_tokens=self.options.ivf_min_tokens, nprobe=self.options.nprobe
            )
        self._ann.nprobe = self.options.nprobe
        self._ann.sync(snap.generation, snap.pids, snap.bounds, snap.tokens)
        return self._ann

    def build_token_index(self) -> None:
        """Build the FAISS token index now instead of on the first two-stage search."""
        with self._mutex:
            self._token_index(self._snapshot())

    def _filter_pids(self, where: tuple[str, list]) -> np.ndarray:
        sql, params = where
        with self._read() as conn:
            rows = conn.execute(f"SELECT pid FROM pages WHERE {sql}", params).fetchall()
        return np.array(sorted(r[0] for r in rows), dtype=np.int64)

    def _resolve(
        self, hits: list[tuple[np.ndarray, np.ndarray]], drop_missing: bool = False
    ) -> list[list[SearchResult]] | None:
        """Attach ids and metadata to hits; None when a hit's row vanished meanwhile (a
        concurrent delete), unless ``drop_missing``, which leaves such hits out."""
        wanted = sorted({int(p) for pids, _ in hits for p in pids})
        rows: dict[int, tuple] = {}
        with self._read() as conn:
            for i in range(0, len(wanted), _SQL_BATCH):
                part = wanted[i : i + _SQL_BATCH]
                for r in conn.execute(
                    "SELECT pid, page_id, doc_id, page_no, metadata, image_ref, text FROM pages"
                    f" WHERE pid IN ({','.join('?' * len(part))})",
                    part,
                ):
                    rows[r[0]] = r
        if len(rows) < len(wanted) and not drop_missing:
            return None
        return [
            [
                SearchResult(
                    rows[p][1],
                    rows[p][2],
                    rows[p][3],
                    float(s),
                    json.loads(rows[p][4]),
                    rows[p][5],
                    rows[p][6],
                )
                for p, s in zip(pids.tolist(), scores, strict=True)
                if p in rows
            ]
            for pids, scores in hits
        ]

    # ----------------------------------------------------------------- snapshot and cache

    def _snapshot(self) -> _Snapshot:
        """The committed pages and their token matrix, rebuilt when the generation moved."""
        gen = self._generation()
        if self._snap is not None and self._snap.generation == gen:
            return self._snap
        for attempt in range(5):
            try:
                self._snap = self._load_snapshot()
                return self._snap
            except FileNotFoundError:  # a compaction removed a segment we were about to map
                self._maps.clear()
                time.sleep(0.01 * (attempt + 1))
        raise StoreError(f"segments of {self.root} kept disappearing while loading; retry")

    def _load_snapshot(self) -> _Snapshot:
        with self._read() as conn:
            conn.execute("BEGIN")
            try:
                gen = int(
                    json.loads(
                        conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[
                            0
                        ]
                    )
                )
                rows = conn.execute(
                    "SELECT pid, segment_id, row_offset, n_vectors FROM pages ORDER BY page_id"
                ).fetchall()
                seg_rows = dict(conn.execute("SELECT segment_id, committed_rows FROM segments"))
            finally:
                conn.execute("COMMIT")
        info = np.array(rows, dtype=np.int64).reshape(-1, 4)
        pids, seg_ids, offsets, lengths = info.T
        bounds = np.zeros(len(pids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=bounds[1:])
        tokens = self._gather_tokens(seg_ids, offsets, lengths, bounds, seg_rows)
        order = np.argsort(pids)
        return _Snapshot(gen, pids.copy(), bounds, tokens, pids[order], order)

    def _gather_tokens(
        self,
        seg_ids: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        bounds: np.ndarray,
        seg_rows: dict[int, int],
    ) -> np.ndarray:
        total = int(bounds[-1])
        fp32 = total * self.dim * 4 <= self.options.cache_fp32_max_bytes
        dtype = np.float32 if fp32 else np.float16
        unique = np.unique(seg_ids)
        if not fp32 and len(unique) == 1:  # large single segment in page order: map, don't copy
            sid = int(unique[0])
            if (offsets == bounds[:-1]).all():
                return self._segment_map(sid, seg_rows[sid])[:total]
        tokens = np.empty((total, self.dim), dtype=dtype)
        for sid in unique.tolist():
            sel = np.flatnonzero(seg_ids == sid)
            dst, _ = gather_pages(bounds, sel)
            src = dst - np.repeat(bounds[sel] - offsets[sel], lengths[sel])
            tokens[dst] = self._segment_map(sid, seg_rows[sid])[src]
        return tokens

    def _segment_map(self, seg_id: int, rows: int) -> np.ndarray:
        """Memory map of a segment's committed rows (remapped when it grew)."""
        current = self._maps.get(seg_id)
        if current is None or len(current) < rows:
            current = seg.open_rows(seg.segment_path(self.root, seg_id), rows, self.dim)
            self._maps[seg_id] = current
        return current[:rows]

    # ----------------------------------------------------------------- integrity

    def verify(self) -> VerifyReport:
        """Full check: SQLite integrity, row and vector CRCs, ranges, segment sizes."""
        problems: list[str] = []
        notes: list[str] = []
        with self._mutex:
            try:
                with self._read() as conn:
                    rows = conn.execute("PRAGMA integrity_check").fetchall()
                    if rows != [("ok",)]:
                        problems.append(
                            f"{self._catalog_path}: integrity_check: "
                            + "; ".join(r[0] for r in rows[:5])
                        )
                    n_docs = self._check_documents(conn, problems)
                    stats = self._check_pages(conn, problems, notes, full=True)
            except StoreCorruptError as exc:
                return VerifyReport(False, [str(exc)], 0)
        return VerifyReport(
            not problems,
            problems,
            stats["pages"],
            n_docs,
            stats["segments"],
            stats["live_bytes"],
            stats["dead_bytes"],
            notes,
        )

    def _check_on_open(self) -> None:
        """Cheap checks on every open: catalog quick_check, segment sizes, CRCs for small stores."""
        problems: list[str] = []
        with self._read() as conn:
            rows = conn.execute("PRAGMA quick_check").fetchall()
            if rows != [("ok",)]:
                raise StoreCorruptError(str(self._catalog_path), f"quick_check: {rows[0][0]}")
            live = conn.execute("SELECT coalesce(sum(n_vectors), 0) FROM pages").fetchone()[0]
            full = live * self._row_bytes <= self.options.verify_on_open_max_bytes
            if full:
                self._check_documents(conn, problems)
            self._check_pages(conn, problems, [], full=full)
        if problems:
            file, _, detail = problems[0].partition(": ")
            raise StoreCorruptError(
                file,
                detail + (f" (+{len(problems) - 1} more problems)" if len(problems) > 1 else ""),
            )

    def _check_documents(self, conn: sqlite3.Connection, problems: list[str]) -> int:
        n = 0
        for doc_id, source, chash, n_pages, complete, meta, crc in conn.execute(
            "SELECT doc_id, source, content_hash, n_pages, complete, metadata, row_crc "
            "FROM documents"
        ):
            n += 1
            if cat.doc_row_crc(doc_id, source, chash, n_pages, complete, meta) != crc:
                problems.append(f"{self._catalog_path}: document row {doc_id!r} fails its checksum")
        return n

    def _check_pages(
        self, conn: sqlite3.Connection, problems: list[str], notes: list[str], *, full: bool
    ) -> dict[str, int]:
        """Segment files vs committed lengths; with ``full`` also every row and vector CRC."""
        seg_rows = dict(conn.execute("SELECT segment_id, committed_rows FROM segments"))
        usable = self._check_segment_files(seg_rows, problems, notes)
        dead = conn.execute("SELECT coalesce(sum(n_vectors), 0) FROM tombstones").fetchone()[0]
        stats = {
            "pages": 0,
            "segments": len(seg_rows),
            "live_bytes": 0,
            "dead_bytes": int(dead) * self._row_bytes,
        }
        cursor = conn.execute(
            "SELECT page_id, doc_id, page_no, metadata, image_ref, text, segment_id, row_offset, "
            "n_vectors, vec_crc, row_crc FROM pages ORDER BY segment_id, row_offset"
        )
        prev_end: dict[int, int] = {}
        for row in cursor:
            stats["pages"] += 1
            stats["live_bytes"] += row[8] * self._row_bytes
            self._check_page_row(row, seg_rows, usable, prev_end, problems, full)
        return stats

    def _check_segment_files(
        self, seg_rows: dict[int, int], problems: list[str], notes: list[str]
    ) -> set[int]:
        usable = set()
        on_disk = seg.list_segment_files(self.root)
        for sid, rows in seg_rows.items():
            path = seg.segment_path(self.root, sid)
            need = rows * self._row_bytes
            if sid not in on_disk:
                problems.append(f"{path}: segment file is missing")
                continue
            size = path.stat().st_size
            if size < need:
                problems.append(f"{path}: is {size} bytes, catalog expects {need} (truncated)")
                continue
            if size > need:
                notes.append(f"{path}: torn tail of {size - need} uncommitted bytes (ignored)")
            usable.add(sid)
        for sid in sorted(set(on_disk) - set(seg_rows)):
            notes.append(f"{on_disk[sid]}: orphan segment file (removed by the next writer)")
        return usable

    def _check_page_row(
        self,
        row: tuple,
        seg_rows: dict[int, int],
        usable: set[int],
        prev_end: dict[int, int],
        problems: list[str],
        full: bool,
    ) -> None:
        page_id, doc_id, page_no, meta, image_ref, text, sid, off, n, vcrc, rcrc = row
        where = f"{self._catalog_path}: page {page_id!r}"
        if (
            full
            and cat.page_row_crc(page_id, doc_id, page_no, meta, image_ref, text, sid, off, n, vcrc)
            != rcrc
        ):
            problems.append(f"{where} fails its row checksum (damaged catalog record)")
            return
        if sid not in seg_rows or n < 1 or off < prev_end.get(sid, 0) or off + n > seg_rows[sid]:
            problems.append(f"{where} points outside the committed rows of segment {sid}")
            return
        prev_end[sid] = off + n
        if full and sid in usable:
            vec = self._segment_map(sid, seg_rows[sid])[off : off + n]
            if seg.vectors_crc(vec) != vcrc:
                problems.append(
                    f"{seg.segment_path(self.root, sid)}: vectors of page "
                    f"{page_id!r} fail their checksum"
                )

    def _recover(self) -> None:
        """Writer open: drop torn segment tails and orphan segment files left by a crash."""
        with self._read() as conn:
            seg_rows = dict(conn.execute("SELECT segment_id, committed_rows FROM segments"))
        for sid, path in seg.list_segment_files(self.root).items():
            if sid not in seg_rows:
                path.unlink()
            elif path.stat().st_size > seg_rows[sid] * self._row_bytes:
                seg.drop_tail(path, seg_rows[sid] * self._row_bytes)

    # ----------------------------------------------------------------- helpers

    @property
    def _row_bytes(self) -> int:
        return self.dim * seg.DTYPE.itemsize

    def _load_meta(self) -> dict[str, Any]:
        with self._read() as conn:
            try:
                meta = cat.read_meta(conn)
            except (ValueError, TypeError) as exc:
                raise StoreCorruptError(str(self._catalog_path), f"unreadable meta: {exc}") from exc
        for key in ("schema_version", "config", "generation", "next_segment_id"):
            if key not in meta:
                raise StoreCorruptError(str(self._catalog_path), f"meta entry {key!r} is missing")
        if meta["schema_version"] > cat.SCHEMA_VERSION:
            raise StoreError(
                f"store {self.root} has schema {meta['schema_version']}, newer than "
                f"this vrag_compress ({__version__}) reads; upgrade vrag_compress"
            )
        if not isinstance(meta["config"], dict):
            raise StoreCorruptError(str(self._catalog_path), "meta 'config' is not a dict")
        return meta

    def _generation(self) -> int:
        with self._read() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(json.loads(row[0]))

    def _count(self, conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT count(*) FROM pages").fetchone()[0])

    def _rows_by_page_id(
        self, conn: sqlite3.Connection, ids: list[str], columns: str, missing_ok: bool = True
    ) -> list[tuple]:
        out: list[tuple] = []
        for i in range(0, len(ids), _SQL_BATCH):
            part = ids[i : i + _SQL_BATCH]
            out.extend(
                conn.execute(
                    f"SELECT {columns} FROM pages WHERE page_id IN ({','.join('?' * len(part))})",
                    part,
                ).fetchall()
            )
        return out

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosedError(f"store {self.root} is closed")
        return self._conn

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """The connection under the store mutex, with SQLite errors translated."""
        with self._mutex, cat.translate_errors(self._catalog_path):
            yield self._connection()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction that bumps the generation on commit and rolls back on error."""
        if self.readonly:
            raise StoreReadOnlyError(f"store {self.root} was opened read-only")
        with self._mutex, cat.translate_errors(self._catalog_path):
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                gen = int(
                    json.loads(
                        conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[
                            0
                        ]
                    )
                )
                cat.write_meta(conn, "generation", gen + 1)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")


class _SegmentWriter:
    """Streams rows into a new segment file in bounded buffers (used by `compact`)."""

    FLUSH_BYTES = 64 << 20

    def __init__(self, root: Path, row_bytes: int):
        self.root = root
        self.row_bytes = row_bytes
        self.seg_id = -1
        self.rows = 0
        self._flushed = 0
        self._buffer: list[np.ndarray] = []

    def start(self, seg_id: int) -> None:
        self.seg_id, self.rows, self._flushed, self._buffer = seg_id, 0, 0, []

    def write(self, vectors: np.ndarray) -> None:
        self._buffer.append(np.asarray(vectors))
        self.rows += len(vectors)
        if (self.rows - self._flushed) * self.row_bytes >= self.FLUSH_BYTES:
            self._flush()

    def finish(self) -> tuple[int, int]:
        self._flush()
        return self.seg_id, self.rows

    def _flush(self) -> None:
        if self._buffer:
            seg.append(
                seg.segment_path(self.root, self.seg_id),
                self._flushed * self.row_bytes,
                np.concatenate(self._buffer).data,
            )
        self._flushed, self._buffer = self.rows, []


def _as_list(items: Any, what: str = "queries") -> list[Any]:
    """A list from a sequence argument; a lone record or array is a clear error, not a surprise."""
    if isinstance(items, (str, bytes, dict, np.ndarray, PageRecord, DocumentRecord)):
        raise StoreInputError(f"{what} must be a sequence (list/tuple), got {type(items).__name__}")
    try:
        return list(items)
    except TypeError as exc:
        raise StoreInputError(f"{what} must be a sequence, got {type(items).__name__}") from exc


def _doc(row: tuple) -> DocumentRecord:
    doc_id, source, content_hash, n_pages, complete, meta = row
    return DocumentRecord(doc_id, source, content_hash, n_pages, bool(complete), json.loads(meta))
