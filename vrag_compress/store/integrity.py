"""Integrity of a `LocalStore`: the full `verify`, the cheap checks on every open, and the
writer's recovery of what a crash leaves behind (torn segment tails, orphan segment files).
"""

from __future__ import annotations

import sqlite3

from vrag_compress.store import catalog as cat
from vrag_compress.store import segments as seg
from vrag_compress.store.base import StoreCorruptError, VerifyReport
from vrag_compress.store.context import StoreContext


def verify(ctx: StoreContext) -> VerifyReport:
    """Full check: SQLite integrity, row and vector CRCs, ranges, segment sizes."""
    problems: list[str] = []
    notes: list[str] = []
    with ctx.catalog.mutex:
        try:
            with ctx.catalog.read() as conn:
                bad = cat.integrity_problems(conn, quick=False)
                if bad:
                    problems.append(f"{ctx.catalog.path}: integrity_check: " + "; ".join(bad[:5]))
                n_docs = _check_documents(ctx, conn, problems)
                stats = _check_pages(ctx, conn, problems, notes, full=True)
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
    """Cheap checks on every open: catalog quick_check, segment sizes, CRCs for small stores."""
    problems: list[str] = []
    with ctx.catalog.read() as conn:
        bad = cat.integrity_problems(conn, quick=True)
        if bad:
            raise StoreCorruptError(str(ctx.catalog.path), f"quick_check: {bad[0]}")
        live = cat.live_vectors(conn)
        full = live * ctx.row_bytes <= ctx.options.verify_on_open_max_bytes
        if full:
            _check_documents(ctx, conn, problems)
        _check_pages(ctx, conn, problems, [], full=full)
    if problems:
        file, _, detail = problems[0].partition(": ")
        raise StoreCorruptError(
            file,
            detail + (f" (+{len(problems) - 1} more problems)" if len(problems) > 1 else ""),
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
    return n


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
        "dead_bytes": cat.dead_vectors(conn) * ctx.row_bytes,
    }
    prev_end: dict[int, int] = {}
    for row in cat.pages_for_check(conn):
        stats["pages"] += 1
        stats["live_bytes"] += row[8] * ctx.row_bytes
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
