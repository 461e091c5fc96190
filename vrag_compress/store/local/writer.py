"""The write path of a `LocalStore`: add/upsert, documents, deletes and compaction.

Crash safety: validate everything, take the catalog write lock, append the fp16 rows to the
active segment and fsync, then commit the rows that point at them in one transaction. A crash
before the commit leaves only a torn tail past the committed length, which readers never read and
the next writer truncates. Deletes only touch the catalog (the ranges become tombstones);
`compact` copies live rows into new segments, commits the new locations, then unlinks old files.

A store created without fp16 vectors (config ``fp16: false``) keeps its first pages as fp16 rows
("staged") until it holds ``codes_min_tokens`` vectors; then the candidate index is trained on
them and, in the commit that records it, every page is pointed at ``NO_SEGMENT`` and the staged
segments leave the catalog (their files are unlinked after the commit). From then on a write
appends no segment rows: its vectors live only as centroid + residual codes, committed by the
same transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np

from vrag_compress.store.base import (
    DocumentRecord,
    DuplicatePageError,
    PageRecord,
    StoreCorruptError,
)
from vrag_compress.store.local import catalog as cat
from vrag_compress.store.local import segments as seg
from vrag_compress.store.local.candidates import CandidateIndexes
from vrag_compress.store.local.context import StoreContext
from vrag_compress.store.validate import (
    StoreInputError,
    check_batch,
    check_document,
    check_id,
    check_ids,
    metadata_json,
)


class PageWriter:
    """Validated, crash-safe writes to one store (the caller holds the writer lock)."""

    def __init__(self, ctx: StoreContext, centroids: CandidateIndexes | None = None):
        self.ctx = ctx
        self.centroids = centroids

    def write_pages(
        self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord], *, replace: bool
    ) -> None:
        """Store pages and document rows in one transaction; ``replace`` allows existing ids."""
        batch = check_batch(pages, documents, self.ctx.dim)
        if not batch.pages and not batch.documents:
            return
        with self.ctx.catalog.write() as conn:
            ids = [p.page_id for p in batch.pages]
            existing = cat.pages_by_id(conn, ids, cat.LOCATION + ", page_id")
            if existing and not replace:
                taken = sorted(r[4] for r in existing)
                raise DuplicatePageError(
                    f"{len(taken)} page ids already exist in {self.ctx.root} (e.g. {taken[:5]}); "
                    "use upsert() to replace them"
                )
            cat.tombstone(conn, [r[:4] for r in existing])
            if batch.pages:
                self._insert_pages(conn, batch.pages, batch.vectors, batch.page_metadata)
                if self.centroids is not None:  # new tokens join the existing centroids
                    self.centroids.on_insert(conn, ids, batch.vectors)
            docs = list(zip(batch.documents, batch.document_metadata, strict=True))
            cat.put_documents(conn, docs)
            cat.ensure_documents(conn, [p.doc_id for p in batch.pages])

    def put_document(self, doc: DocumentRecord) -> None:
        doc = check_document(doc)
        meta = metadata_json(doc.metadata, f"documents[0] ({doc.doc_id!r}).metadata")
        with self.ctx.catalog.write() as conn:
            cat.put_documents(conn, [(doc, meta)])

    def delete(self, *, doc_id: str | None, page_ids: Sequence[str] | None) -> int:
        """Delete a document's pages and its row, or the given pages; returns pages removed."""
        if (doc_id is None) == (page_ids is None):
            raise StoreInputError("delete needs exactly one of doc_id= or page_ids=")
        ids: list[str] = []
        if doc_id is not None:
            check_id(doc_id, "doc_id")
        else:
            ids = check_ids(page_ids)
        with self.ctx.catalog.write() as conn:
            if doc_id is not None:
                rows = cat.page_locations_of_document(conn, doc_id)
                cat.delete_document(conn, doc_id)
            else:
                rows = cat.pages_by_id(conn, ids, cat.LOCATION)
            cat.tombstone(conn, rows)
        return len(rows)

    def compact(self) -> None:
        """Rewrite live vectors into fresh segments, dropping deleted rows and torn tails."""
        with self.ctx.catalog.write() as conn:
            dead = cat.tombstone_count(conn)
            segs = cat.segment_rows(conn)
            if dead == 0 and len(segs) <= 1:
                segs = {}
            else:
                live = [r for r in cat.pages_to_copy(conn) if r[7] != seg.NO_SEGMENT]
                updates, new_segs = self._copy_live(conn, live, segs)
                cat.move_pages(conn, updates)
                cat.replace_segments(conn, new_segs)
            if self.centroids is not None:  # one base part, deleted pages dropped from lists
                self.centroids.on_compact(conn)
        if self.centroids is not None:
            self.centroids.remove_orphans()
        if not segs:
            return
        for seg_id in segs:
            self.ctx.segment_path(seg_id).unlink(missing_ok=True)
            self.ctx.maps.drop(seg_id)
        seg.fsync_dir(self.ctx.root / seg.SEGMENT_DIR)

    def _insert_pages(
        self,
        conn: sqlite3.Connection,
        pages: list[PageRecord],
        vectors: list[np.ndarray],
        metas: list[str],
    ) -> None:
        staged = self.ctx.fp16 or self.centroids is None or self.centroids.manifest(conn) is None
        if staged:  # fp16 rows (without fp16 vectors: staged until the codes are trained)
            blob = np.concatenate(vectors, axis=0)
            seg_id, offset = self._active_segment(conn, blob.nbytes)
            seg.append(self.ctx.segment_path(seg_id), offset * self.ctx.row_bytes, blob.data)
        else:  # the candidate index keeps the only copy (as codes)
            seg_id, offset = seg.NO_SEGMENT, 0
        rows = []
        for page, vec, meta in zip(pages, vectors, metas, strict=True):
            fields = (
                page.page_id,
                page.doc_id,
                int(page.page_no),
                meta,
                page.image_ref,
                page.text,
                seg_id,
                offset,
                len(vec),
                seg.vectors_crc(vec),
            )
            rows.append((*fields, cat.page_row_crc(*fields)))
            offset += len(vec) if staged else 0
        cat.insert_pages(conn, rows)
        if staged:
            cat.set_segment_rows(conn, seg_id, offset)

    def _active_segment(self, conn: sqlite3.Connection, nbytes: int) -> tuple[int, int]:
        """The segment to append to and its committed rows; starts a new one when full."""
        last = cat.last_segment(conn)
        if last is not None and (
            last[1] == 0
            or last[1] * self.ctx.row_bytes + nbytes <= self.ctx.options.segment_max_bytes
        ):
            return last
        return self._new_segment_id(conn), 0

    def _new_segment_id(self, conn: sqlite3.Connection) -> int:
        """A never-used segment id; a stale file of that name (uncommitted) is cleared."""
        seg_id = cat.take_segment_id(conn)
        path = self.ctx.segment_path(seg_id)
        if path.exists():
            path.unlink()
        return seg_id

    def _copy_live(
        self, conn: sqlite3.Connection, live: list[tuple], seg_rows: dict[int, int]
    ) -> tuple[list[tuple[int, int, int, int]], list[tuple[int, int]]]:
        """Append live pages to new segments (checking CRCs); new locations and segment rows."""
        updates: list[tuple[int, int, int, int]] = []
        new_segs: list[tuple[int, int]] = []
        row_bytes, max_bytes = self.ctx.row_bytes, self.ctx.options.segment_max_bytes
        writer = seg.SegmentWriter(self.ctx.root, row_bytes)
        for pid, page_id, doc_id, page_no, meta, image_ref, text, old_seg, off, n, vcrc in live:
            full = writer.rows > 0 and (writer.rows + n) * row_bytes > max_bytes
            if writer.seg_id < 0 or full:
                if writer.seg_id >= 0:
                    new_segs.append(writer.finish())
                writer.start(self._new_segment_id(conn))
            vec = self.ctx.vectors(old_seg, seg_rows[old_seg], off, n)
            if seg.vectors_crc(vec) != vcrc:
                raise StoreCorruptError(
                    str(self.ctx.segment_path(old_seg)),
                    f"checksum mismatch for page {page_id!r}; compact aborted",
                )
            crc = cat.page_row_crc(
                page_id, doc_id, page_no, meta, image_ref, text, writer.seg_id, writer.rows, n, vcrc
            )
            updates.append((writer.seg_id, writer.rows, crc, pid))
            writer.write(vec)
        if writer.seg_id >= 0:
            new_segs.append(writer.finish())
        return updates, new_segs
