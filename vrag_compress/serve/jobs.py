"""Uploads indexed in the background by one writer thread, with progress you can poll.

Every upload is saved under ``<index>/uploads/<job id>/<sanitised name>`` and indexed through
`VisualIndex.add`, the same streaming path as `vrag index`: each batch of pages is committed
atomically, so a server killed mid-upload leaves an index that verifies, and on the next start
the unfinished uploads are queued again and resume at their first uncommitted page.

Progress is read from the store itself (the pages of the document committed so far), so it is
exactly what a search can already find. One writer at a time: jobs and deletes share one lock and
open the index for writing only while they work, so `vrag index` can write when the server idles.
"""

from __future__ import annotations

import logging
import queue
import re
import shutil
import threading
import unicodedata
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrag_compress.index import VisualIndex
from vrag_compress.ingest import SUPPORTED_SUFFIXES, IngestError, open_document

log = logging.getLogger(__name__)

UPLOADS = "uploads"
JOB_STATES = ("queued", "running", "done", "failed")
_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")


class UploadError(ValueError):
    """An upload the server refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def safe_filename(name: str) -> str:
    """The base name of an uploaded file with anything risky replaced: no folders, no leading
    dots, no control or shell characters, at most 120 characters, the suffix kept."""
    base = re.split(r"[\\/]", unicodedata.normalize("NFKC", name or ""))[-1]
    base = _UNSAFE.sub("_", base).strip(" .")
    stem, dot, suffix = base.rpartition(".")
    if not dot:
        stem, suffix = base, ""
    stem = stem.strip(" .")[: 120 - len(suffix) - 1] or "upload"
    return f"{stem}.{suffix.lower()}" if suffix else stem


@dataclass
class Job:
    """One upload being indexed; `to_dict` is the ``GET /api/jobs/{id}`` body."""

    id: str
    path: Path
    filename: str
    doc_id: str
    n_pages: int
    metadata: dict[str, Any] = field(default_factory=dict)
    state: str = "queued"
    pages_done: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None
    resumed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.id,
            "state": self.state,
            "pages_done": self.pages_done,
            "pages_total": self.n_pages,
            "failures": self.failures,
            "error": self.error,
            "filename": self.filename,
            "doc_id": self.doc_id,
            "resumed": self.resumed,
        }


class JobQueue:
    """FIFO of uploads and the single writer thread that indexes them."""

    def __init__(
        self,
        root: Path,
        reader: VisualIndex,
        open_writer: Callable[[], VisualIndex],
        *,
        ocr: str = "auto",
    ) -> None:
        self.root = Path(root)
        self.uploads = self.root / UPLOADS
        self.reader = reader
        self.open_writer = open_writer
        self.ocr = ocr
        self.write_lock = threading.Lock()
        self.jobs: dict[str, Job] = {}
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="vrag-writer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ submitting
    def submit(
        self, filename: str, save: Callable[[Path], None], metadata: dict[str, Any], max_pages: int
    ) -> Job:
        """Save an upload (``save`` writes the bytes to the path it is given), check it is a
        document within the page limit, and queue it. Raises `UploadError` (nothing is kept)."""
        name = safe_filename(filename)
        if Path(name).suffix.lower() not in SUPPORTED_SUFFIXES:
            kinds = " ".join(sorted(SUPPORTED_SUFFIXES))
            raise UploadError(f"{name}: unsupported file type; upload one of {kinds}", 415)
        job_id = uuid.uuid4().hex[:12]
        folder = self.uploads / job_id
        folder.mkdir(parents=True)
        path = folder / name
        try:
            save(path)
            doc_id, n_pages = _inspect(path, name)
            if n_pages > max_pages:
                raise UploadError(
                    f"{name} has {n_pages} pages; this server takes at most {max_pages} "
                    "per upload (--max-pages)",
                    413,
                )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        job = Job(job_id, path, name, doc_id, n_pages, metadata=metadata)
        self.jobs[job_id] = job
        self._queue.put(job)
        return job

    def resume_unfinished(self) -> list[Job]:
        """Queue again the uploads whose document is missing or incomplete (a killed server)."""
        resumed = []
        for folder in sorted(p for p in self.uploads.glob("*") if p.is_dir()):
            files = [f for f in folder.iterdir() if f.is_file() and not f.name.startswith(".")]
            if len(files) != 1:
                continue
            try:
                doc_id, n_pages = _inspect(files[0], files[0].name)
            except UploadError as error:
                log.warning("not resuming %s: %s", files[0], error)
                continue
            record = self.reader.store.document(doc_id)
            if record is not None and record.complete:
                continue
            job = Job(folder.name, files[0], files[0].name, doc_id, n_pages, resumed=True)
            self.jobs[job.id] = job
            self._queue.put(job)
            resumed.append(job)
        return resumed

    # ------------------------------------------------------------------ reading
    def status(self, job_id: str) -> Job | None:
        job = self.jobs.get(job_id)
        if job is not None and job.state == "running":
            job.pages_done = len(self.reader.store.page_ids(job.doc_id))
        return job

    # ------------------------------------------------------------------ writing
    def delete_document(self, doc_id: str, timeout: float = 60.0) -> int:
        """Delete a document and its upload folder; waits for a running job up to ``timeout``."""
        if not self.write_lock.acquire(timeout=timeout):
            raise UploadError("the index is busy indexing an upload; retry when it is done", 409)
        try:
            record = self.reader.store.document(doc_id)
            with self.open_writer() as writer:
                removed = writer.delete(doc_id)
            if record is not None and record.source:
                self._remove_upload(Path(record.source))
            return removed
        finally:
            self.write_lock.release()

    def _remove_upload(self, source: Path) -> None:
        """Remove ``uploads/<job>/`` when the deleted document came from an upload."""
        uploads = self.uploads.resolve()
        folder = source.resolve().parent
        if folder.parent == uploads:
            shutil.rmtree(folder, ignore_errors=True)

    def close(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            with self.write_lock:
                self._run(job)

    def _run(self, job: Job) -> None:
        job.state = "running"
        try:
            with self.open_writer() as writer:
                report = writer.add([job.path], metadata=job.metadata, progress=False, ocr=self.ocr)
        except Exception as error:  # lock held by `vrag index`, disk full, model errors...
            log.exception("upload %s failed", job.id)
            job.error = f"{type(error).__name__}: {error}"
            job.state = "failed"
            return
        finally:
            job.pages_done = len(self.reader.store.page_ids(job.doc_id))
        job.failures = [_public_failure(f, job) for f in report.failures]
        record = self.reader.store.document(job.doc_id)
        if job.doc_id in report.documents_skipped and record and record.source != str(job.path):
            self._remove_upload(job.path)  # the same content was indexed from another file
        job.state = "failed" if report.failures and job.pages_done == 0 else "done"


def _inspect(path: Path, name: str) -> tuple[str, int]:
    """(doc_id, pages) of an uploaded file, or `UploadError` with the reason (no server paths)."""
    try:
        with open_document(path, text=False) as document:
            return document.doc_id, int(document.n_pages)
    except IngestError as error:
        raise UploadError(f"{name}: {error.reason} ({error.fix})", 422) from error


def _public_failure(failure: dict[str, str], job: Job) -> dict[str, str]:
    """A failure entry with the upload's name instead of its path on the server."""
    return {**failure, "path": job.filename}
