"""Integrity of a `LocalStore`: the full `verify`, the cheap checks on every open, and the
writer's recovery of what a crash leaves behind (torn segment tails, orphan segment files).

Checks read the catalog in one read transaction (one snapshot), so a writer committing meanwhile
cannot make a healthy store look damaged. Segment files are not in that snapshot: a compaction
may replace them after it. So when a check finds a problem and a writer has committed since the
snapshot began, the check runs again on a fresh one; only a problem that holds still is reported.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from vrag_compress.store.base import StoreCorruptError, StoreError, VerifyReport
from vrag_compress.store.candidates.cells import code_bytes_per_token
from vrag_compress.store.candidates.files import INDEX_DIR
from vrag_compress.store.local import catalog as cat
from vrag_compress.store.local import segments as seg
from vrag_compress.store.local.context import StoreContext

T = TypeVar("T")
# Fresh snapshots a check takes when writers keep committing under it.
_ATTEMPTS = 8


def verify(
    ctx: StoreContext, extra: Callable[[sqlite3.Connection], list[str]] | None = None
) -> VerifyReport:
    """Full check: SQLite integrity, meta checksum, schema objects, pages against documents,
    row and vector CRCs, ranges, segment sizes, and ``extra``'s problems (the candidate index:
    files named by the same snapshot, so one a writer replaced meanwhile is no false alarm)."""
    return _stable(ctx, lambda: _verify_once(ctx, extra), lambda r: not r.ok)


def _verify_once(
    ctx: StoreContext, extra: Callable[[sqlite3.Connection], list[str]] | None
) -> VerifyReport:
    problems: list[str] = []
    notes: list[str] = []
    with ctx.catalog.mutex:
        try:
            with ctx.catalog.snapshot() as conn:
                ctx.refresh_config(conn)
                bad = cat.integrity_problems(conn, quick=False)
                if bad:
                    problems.append(f"{ctx.catalog.path}: integrity_check: " + "; ".join(bad[:5]))
                _check_meta(ctx, conn, problems)
                n_docs = _check_documents(ctx, conn, problems)
                _check_page_documents(ctx, conn, problems)
                stats = _check_pages(ctx, conn, problems, notes, full=True)
                if extra is not None:
                    problems += extra(conn)
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


def check_on_open(ctx: StoreContext) -> None:
    """Cheap checks on every open: the meta checksum and counters, segment files present and
    long enough. SQLite's ``quick_check`` and every row and vector CRC grow with the collection,
    so they run at open only while the store is small (`_checks_all_on_open`), else in `verify`;
    a search checks the CRCs of the rows it returns (`check_hit_rows`)."""
    problems = _stable(ctx, lambda: _open_problems(ctx), bool)
    if problems:
        file, _, detail = problems[0].partition(": ")
        raise StoreCorruptError(
            file,
            detail + (f" (+{len(problems) - 1} more problems)" if len(problems) > 1 else ""),
        )


def _open_problems(ctx: StoreContext) -> list[str]:
    problems: list[str] = []
    with ctx.catalog.snapshot() as conn:
        seg_rows = cat.segment_rows(conn)
        full = _checks_all_on_open(ctx, seg_rows)
        if full:
            bad = cat.integrity_problems(conn, quick=True)
            if bad:
                return [f"{ctx.catalog.path}: quick_check: {bad[0]}"]
        _check_meta(ctx, conn, problems)
        if full:
            _check_documents(ctx, conn, problems)
            _check_pages(ctx, conn, problems, [], full=True)
        else:
            _check_segment_files(ctx, seg_rows, problems, [])
    return problems


def _checks_all_on_open(ctx: StoreContext, seg_rows: dict[int, int]) -> bool:
    """Whether open can afford every check: the catalog, the committed segment bytes and the
    candidate index's files (a codes-only store keeps its vectors there, and checking 100,000
    pages' rows took a second at open) together are at most ``verify_on_open_max_bytes``
    (file sizes only: nothing is read to decide)."""
    limit = ctx.options.verify_on_open_max_bytes
    if limit <= 0:
        return False
    size = sum(seg_rows.values()) * ctx.row_bytes
    for suffix in ("", "-wal"):
        try:
            size += os.stat(f"{ctx.catalog.path}{suffix}").st_size
        except FileNotFoundError:
            pass
    try:
        with os.scandir(ctx.root / INDEX_DIR) as files:
            size += sum(f.stat().st_size for f in files if f.is_file())
    except FileNotFoundError:  # no candidate index yet
        pass
    return size <= limit


def _stable(ctx: StoreContext, check: Callable[[], T], failed: Callable[[T], bool]) -> T:
    """Run ``check`` until it passes, or fails on a snapshot no writer moved past meanwhile."""
    result: T | None = None
    for attempt in range(_ATTEMPTS):
        before = _generation(ctx)
        try:
            result = check()
        except FileNotFoundError:  # a segment vanished between the snapshot and the read
            ctx.maps.clear()
            time.sleep(0.01 * (attempt + 1))
            continue
        if not failed(result) or _generation(ctx) == before:
            return result
        ctx.maps.clear()
    if result is None:
        raise StoreError(f"segments of {ctx.root} kept disappearing during the check; retry")
    return result


def _generation(ctx: StoreContext) -> int:
    with ctx.catalog.read() as conn:
        return cat.generation(conn)


def _check_meta(ctx: StoreContext, conn: sqlite3.Connection, problems: list[str]) -> None:
    """The meta checksum, the segment counter and the schema objects (all O(schema))."""
    where = str(ctx.catalog.path)
    problems += [f"{where}: {p}" for p in cat.schema_problems(conn)]
    problem = cat.meta_problem(conn)
    if problem:
        problems.append(f"{where}: {problem}")
        return
    meta = cat.read_meta(conn)
    next_id, last = meta.get("next_segment_id"), cat.max_segment_id(conn)
    if not isinstance(next_id, int) or next_id <= last:
        problems.append(
            f"{where}: meta next_segment_id={next_id!r} would reuse live segment ids (up to {last})"
        )


def recover(ctx: StoreContext) -> None:
    """Writer open: drop torn segment tails and orphan segment files left by a crash."""
    with ctx.catalog.read() as conn:
        seg_rows = cat.segment_rows(conn)
    for sid, path in seg.list_segment_files(ctx.root).items():
        if sid not in seg_rows:
            path.unlink()
        elif path.stat().st_size > seg_rows[sid] * ctx.row_bytes:
            seg.drop_tail(path, seg_rows[sid] * ctx.row_bytes)


def _check_documents(ctx: StoreContext, conn: sqlite3.Connection, problems: list[str]) -> int:
    n = 0
    for doc_id, source, chash, n_pages, complete, meta, crc in cat.documents_for_check(conn):
        n += 1
        if cat.doc_row_crc(doc_id, source, chash, n_pages, complete, meta) != crc:
            problems.append(f"{ctx.catalog.path}: document row {doc_id!r} fails its checksum")
            continue
        _check_metadata(ctx, meta, f"document {doc_id!r}", problems)
    return n


def _check_page_documents(ctx: StoreContext, conn: sqlite3.Connection, problems: list[str]) -> None:
    """Every page's document has a row (a write always gives it one; a document row without
    pages is allowed: deleting single pages keeps it)."""
    n, first = cat.orphan_pages(conn)
    if n:
        problems.append(
            f"{ctx.catalog.path}: {n} pages belong to documents without a document row "
            f"(first {first!r}); the documents table lost rows"
        )


def _check_metadata(ctx: StoreContext, meta: str, where: str, problems: list[str]) -> None:
    try:
        cat.metadata_dict(meta, where)
    except StoreCorruptError as exc:
        problems.append(f"{ctx.catalog.path}: {exc.detail}")


def _check_pages(
    ctx: StoreContext,
    conn: sqlite3.Connection,
    problems: list[str],
    notes: list[str],
    *,
    full: bool,
) -> dict[str, int]:
    """Segment files vs committed lengths; with ``full`` also every row and vector CRC."""
    seg_rows = cat.segment_rows(conn)
    usable = _check_segment_files(ctx, seg_rows, problems, notes)
    stats = {
        "pages": 0,
        "segments": len(seg_rows),
        "live_bytes": 0,
    }
    coded_bytes = code_bytes_per_token(ctx.dim, ctx.codes)
    dead_coded = cat.dead_coded_vectors(conn)
    dead_rows = cat.dead_vectors(conn) - dead_coded
    stats["dead_bytes"] = dead_rows * ctx.row_bytes + dead_coded * coded_bytes
    prev_end: dict[int, int] = {}
    for row in cat.pages_for_check(conn):
        stats["pages"] += 1
        # the bytes actually kept: fp16 rows, or (no fp16 vectors) centroid id + residual codes
        stats["live_bytes"] += row[8] * (coded_bytes if row[6] == seg.NO_SEGMENT else ctx.row_bytes)
        _check_page_row(ctx, row, seg_rows, usable, prev_end, problems, full)
    return stats


def _check_segment_files(
    ctx: StoreContext, seg_rows: dict[int, int], problems: list[str], notes: list[str]
) -> set[int]:
    usable = set()
    on_disk = seg.list_segment_files(ctx.root)
    for sid, rows in seg_rows.items():
        path = ctx.segment_path(sid)
        need = rows * ctx.row_bytes
        if sid not in on_disk:
            problems.append(f"{path}: segment file is missing")
            continue
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            problems.append(f"{path}: segment file is missing")
            continue
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
    ctx: StoreContext,
    row: tuple,
    seg_rows: dict[int, int],
    usable: set[int],
    prev_end: dict[int, int],
    problems: list[str],
    full: bool,
) -> None:
    page_id, doc_id, page_no, meta, image_ref, text, sid, off, n, vcrc, rcrc = row
    where = f"{ctx.catalog.path}: page {page_id!r}"
    if (
        full
        and cat.page_row_crc(page_id, doc_id, page_no, meta, image_ref, text, sid, off, n, vcrc)
        != rcrc
    ):
        problems.append(f"{where} fails its row checksum (damaged catalog record)")
        return
    if full:
        _check_metadata(ctx, meta, f"page {page_id!r}", problems)
    if sid == seg.NO_SEGMENT and not ctx.fp16:  # vectors only as codes: the index checks them
        return
    if sid not in seg_rows or n < 1 or off < prev_end.get(sid, 0) or off + n > seg_rows[sid]:
        problems.append(f"{where} points outside the committed rows of segment {sid}")
        return
    prev_end[sid] = off + n
    if full and sid in usable:
        vec = ctx.vectors(sid, seg_rows[sid], off, n)
        if seg.vectors_crc(vec) != vcrc:
            problems.append(
                f"{ctx.segment_path(sid)}: vectors of page {page_id!r} fail their checksum"
            )


def check_fp16_rows(ctx: StoreContext, conn: sqlite3.Connection, why: str) -> None:
    """Every fp16 row against its page's vector checksum, before a rewrite drops the rows
    (a switch to codes only); the first damaged page raises, naming its file and ``why``."""
    seg_rows = cat.segment_rows(conn)
    for row in cat.pages_to_copy(conn):
        page_id, sid, off, n, vcrc = row[1], *row[7:11]
        if sid == seg.NO_SEGMENT:
            continue
        if sid not in seg_rows or off < 0 or off + n > seg_rows[sid]:
            raise StoreCorruptError(
                str(ctx.catalog.path),
                f"page {page_id!r} points outside the committed rows of segment {sid}; {why}",
            )
        if seg.vectors_crc(ctx.vectors(sid, seg_rows[sid], off, n)) != vcrc:
            raise StoreCorruptError(
                str(ctx.segment_path(sid)),
                f"vectors of page {page_id!r} fail their checksum; {why}",
            )


def check_hit_rows(ctx: StoreContext, conn: sqlite3.Connection, rows: list[tuple]) -> None:
    """Row and vector CRCs of the pages a search returns (a handful: cheap), so damage that
    open no longer looks for is reported where it is met. ``rows`` are `HIT_CHECKED` rows."""
    seg_rows: dict[int, int] | None = None
    for row in rows:
        page_id, doc_id, page_no, meta, image_ref, text, sid, off, n, vcrc, rcrc = row[1:]
        if (
            cat.page_row_crc(page_id, doc_id, page_no, meta, image_ref, text, sid, off, n, vcrc)
            != rcrc
        ):
            raise StoreCorruptError(
                str(ctx.catalog.path), f"page {page_id!r} fails its row checksum; run `verify`"
            )
        if sid == seg.NO_SEGMENT and not ctx.fp16:  # vectors only as codes: the index's
            continue
        seg_rows = cat.segment_rows(conn) if seg_rows is None else seg_rows
        if sid not in seg_rows or n < 1 or off < 0 or off + n > seg_rows[sid]:
            raise StoreCorruptError(
                str(ctx.catalog.path),
                f"page {page_id!r} points outside the committed rows of segment {sid}",
            )
        try:
            vectors = ctx.vectors(sid, seg_rows[sid], off, n)
        except FileNotFoundError:  # a compaction replaced the file (checking what it copied)
            continue
        if seg.vectors_crc(vectors) != vcrc:
            raise StoreCorruptError(
                str(ctx.segment_path(sid)), f"vectors of page {page_id!r} fail their checksum"
            )


HIT_CHECKED = cat.HIT + ", segment_id, row_offset, n_vectors, vec_crc, row_crc"
