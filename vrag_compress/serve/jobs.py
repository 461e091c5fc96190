"""Uploads indexed in the background by one writer thread, with progress you can poll.

Every upload is saved under ``<index>/uploads/<job id>/<sanitised name>`` and indexed through
`VisualIndex.add`, the same streaming path as `vrag index`: each batch of pages is committed
atomically, so a server killed mid-upload leaves an index that verifies, and on the next start
the unfinished uploads are queued again and resume at their first uncommitted page.

Next to the file, ``.job.json`` records what the upload asked for (name, metadata, options) and,
once it ends, how it ended. It is written only after the upload was checked and accepted, so a
restart resumes exactly the accepted uploads, with their metadata, and answers the status of
finished ones; a folder without a record (a refused or half-saved upload) is never indexed.

Progress is read from the store itself (the pages of the document committed so far), so it is
exactly what a search can already find. One writer at a time: jobs and deletes share one lock and
open the index for writing only while they work, so `vrag index` can write when the server idles.
The writer thread runs at a lower CPU priority (nice + `WRITER_NICE`), so searches on the same
machine are served first while an upload is encoded.

With several worker processes (``shared``, `vrag serve --workers N`) the record is the queue:
any worker accepts an upload and writes its record; the one worker holding the writer role
(a lock on ``uploads/.writer`` for its lifetime) picks queued records up and indexes them;
deletes run in whichever worker received them, under a lock shared by the processes
(``uploads/.write.lock``); a job's status is read from its record and the store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import queue
import re
import shutil
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrag_compress.durable import atomic_write
from vrag_compress.index import VisualIndex
from vrag_compress.ingest import (
    SUPPORTED_SUFFIXES,
    EncryptedPDFError,
    IngestError,
    open_document,
)
from vrag_compress.serve.guards import hide_root
from vrag_compress.store import StoreError
from vrag_compress.store.filters import check_user_metadata
from vrag_compress.store.user_input import show
from vrag_compress.store.validate import (
    StoreInputError,
    check_id,
    check_optional_str,
    metadata_json,
)

log = logging.getLogger(__name__)

UPLOADS = "uploads"
RECORD = ".job.json"
JOB_STATES = ("queued", "running", "done", "failed")
MAX_NAME_BYTES = 200
"""Below the 255-byte file name limit of common file systems, in UTF-8."""
_UNSAFE = re.compile(r'[<>:"|?*]+')
"""Characters Windows refuses in file names (path separators and controls go first)."""
JOB_ID = re.compile(r"[0-9a-f]{12}")
WRITER_ROLE = ".writer"
WRITE_LOCK = ".write.lock"
POLL_S = 0.3
"""How often the writer of several workers looks for uploads the others accepted."""
WRITER_NICE = 10
"""How much lower the writer thread's CPU priority is than the readers' (Linux: per thread)."""
UPLOAD_COMMITS = 4
"""An upload is committed in at least this many batches (as its pages allow): progress is read
from the store, so a 3-page upload in one batch of 4 would sit at 0/3 until its end."""


class UploadError(ValueError):
    """An upload the server refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def safe_filename(name: str) -> str:
    """The base name of an uploaded file, kept in any script (NFC): no folders, no leading dots,
    no control or format characters, none that Windows refuses, at most `MAX_NAME_BYTES` bytes
    of UTF-8, the suffix kept (lower case)."""
    base = re.split(r"[\\/]", unicodedata.normalize("NFC", name or ""))[-1]
    base = "".join(c for c in base if unicodedata.category(c)[0] != "C")
    base = _UNSAFE.sub("_", base).strip(" .")
    stem, dot, suffix = base.rpartition(".")
    if not dot:
        stem, suffix = base, ""
    suffix = _utf8_prefix(suffix.lower(), 16)
    stem = _utf8_prefix(stem, MAX_NAME_BYTES - len(suffix.encode()) - 1).strip(" .") or "upload"
    return f"{stem}.{suffix}" if suffix else stem


def _utf8_prefix(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 fits ``max_bytes`` (whole characters)."""
    return text.encode()[:max_bytes].decode(errors="ignore")


@dataclass
class Job:
    """One upload being indexed; `to_dict` is the ``GET /api/jobs/{id}`` body."""

    id: str
    path: Path
    filename: str
    doc_id: str
    n_pages: int
    metadata: dict[str, Any] = field(default_factory=dict)
    ocr: str = "auto"
    state: str = "queued"
    pages_done: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None
    resumed: bool = False
    password: str | None = field(default=None, repr=False)
    """A protected PDF's password, in memory only: `to_dict` and `save` leave it out."""

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed")

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

    def save(self) -> None:
        """Write ``.job.json`` next to the upload (atomically: a kill leaves the old or new)."""
        record = {
            "job": self.id,
            "filename": self.filename,
            "doc_id": self.doc_id,
            "n_pages": self.n_pages,
            "metadata": self.metadata,
            "options": {"ocr": self.ocr},
            "state": self.state,
            "pages_done": self.pages_done,
            "failures": self.failures,
            "error": self.error,
        }
        path = self.path.parent / RECORD
        atomic_write(path, json.dumps(record, allow_nan=False, ensure_ascii=False))

    @classmethod
    def load(cls, folder: Path) -> Job:
        """The job recorded in ``folder``: OSError when it cannot be read, ValueError (saying
        why) when it is not a record the server could have written (a hand edit, an attacker
        with write access to ``uploads/``): a bad id, metadata, count or nesting."""
        text = (folder / RECORD).read_text(encoding="utf-8")
        try:
            record = json.loads(text)
        except RecursionError:
            raise ValueError("nested too deeply") from None
        if not isinstance(record, dict):
            raise ValueError(f"not a JSON object but {type(record).__name__}")
        try:
            filename = safe_filename(_text(record["filename"], "filename"))  # never a path out
            options = record.get("options") or {}
            if not isinstance(options, dict):
                raise ValueError(f"options must be an object, got {show(options)}")
            return cls(
                id=folder.name,
                path=folder / filename,
                filename=filename,
                doc_id=check_id(record["doc_id"], "doc_id"),
                n_pages=_count(record["n_pages"], "n_pages"),
                metadata=check_user_metadata(record.get("metadata") or {}),
                ocr=_text(options.get("ocr", "auto"), "options.ocr"),
                state=record["state"] if record.get("state") in JOB_STATES else "queued",
                pages_done=_count(record.get("pages_done") or 0, "pages_done"),
                failures=_failures(record.get("failures") or []),
                error=check_optional_str(record.get("error"), "error"),
            )
        except KeyError as error:
            raise ValueError(f"no {error} field") from None
        except (TypeError, AttributeError) as error:
            raise ValueError(str(error)) from None

    @classmethod
    def unreadable(cls, folder: Path, reason: str) -> Job:
        """A failed job for an upload folder whose record cannot be used: its status says why,
        and it is never queued, so its record is never written over."""
        return cls(folder.name, folder / RECORD, "", "", 0, state="failed", error=reason)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be text, got {show(value)}")
    return value


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a whole number >= 0, got {show(value)}")
    return value


def _failures(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not all(
        isinstance(f, dict) and all(isinstance(v, str) for v in f.values()) for f in value
    ):
        raise ValueError(f"failures must be a list of objects of text, got {show(value)}")
    return value


class FileLock:
    """A lock shared by threads and processes (``flock`` on a file), with a timeout."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._threads = threading.Lock()
        self._file: Any = None

    def acquire(self, timeout: float = -1) -> bool:
        deadline = None if timeout < 0 else time.monotonic() + timeout
        if not self._threads.acquire(timeout=timeout):
            return False
        handle = open(self.path, "a+b")  # noqa: SIM115 (held until release)
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    handle.close()
                    self._threads.release()
                    return False
                time.sleep(0.05)
                continue
            self._file = handle
            return True

    def release(self) -> None:
        handle, self._file = self._file, None
        handle.close()  # closing drops the flock
        self._threads.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def take_writer_role(uploads: Path) -> Any:
    """The open, locked ``uploads/.writer`` file when this process is the writer of several
    workers (held for its lifetime), else None."""
    handle = open(uploads / WRITER_ROLE, "a+b")  # noqa: SIM115 (held while the process lives)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def lower_thread_priority(step: int = WRITER_NICE) -> None:
    """Raise the calling thread's nice value (Linux sets it per thread; threads it starts,
    such as torch's intra-op pool, inherit it). Elsewhere nothing changes."""
    try:
        tid = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, now + step))
    except (AttributeError, OSError) as error:
        log.info("writer thread keeps its priority (%s)", error)


class JobQueue:
    """FIFO of uploads and the single writer thread that indexes them.

    ``shared``: several worker processes serve the same index (see the module docstring);
    only the one that takes the writer role runs the writer thread."""

    def __init__(
        self,
        root: Path,
        reader: VisualIndex,
        open_writer: Callable[[], VisualIndex],
        *,
        ocr: str = "auto",
        shared: bool = False,
    ) -> None:
        self.root = Path(root)
        self.uploads = self.root / UPLOADS
        self.reader = reader
        self.open_writer = open_writer
        self.ocr = ocr
        self.shared = shared
        self.write_lock: Any = threading.Lock()
        self._role: Any = None
        if shared:
            self.uploads.mkdir(parents=True, exist_ok=True)
            self.write_lock = FileLock(self.uploads / WRITE_LOCK)
            self._role = take_writer_role(self.uploads)
        self.is_writer = not shared or self._role is not None
        self.jobs: dict[str, Job] = {}
        self._jobs_lock = threading.Lock()
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="vrag-writer", daemon=True)
        if self.is_writer:
            self._thread.start()

    # ------------------------------------------------------------------ submitting
    def submit(
        self,
        filename: str,
        save: Callable[[Path], None],
        metadata: dict[str, Any],
        max_pages: int,
        *,
        password: str | None = None,
    ) -> Job:
        """Save an upload (``save`` writes the bytes to the path it is given), check it is a
        document within the page limit, and queue it. Raises `UploadError` (nothing is kept).
        ``password`` opens a protected PDF; it stays in this process's memory until the job
        ends and is never written to the job record."""
        name = safe_filename(filename)
        if Path(name).suffix.lower() not in SUPPORTED_SUFFIXES:
            kinds = " ".join(sorted(SUPPORTED_SUFFIXES))
            raise UploadError(f"{name}: unsupported file type; upload one of {kinds}", 415)
        try:
            metadata_json(metadata, "metadata")
        except StoreInputError as error:
            raise UploadError(str(error), 422) from error
        except RecursionError as error:
            raise UploadError("metadata is nested too deeply", 422) from error
        job_id = uuid.uuid4().hex[:12]
        folder = self.uploads / job_id
        folder.mkdir(parents=True)
        path = folder / name
        try:
            save(path)
            doc_id, n_pages = _inspect(path, name, password)
            if n_pages > max_pages:
                raise UploadError(
                    f"{name} has {n_pages} pages; this server takes at most {max_pages} "
                    "per upload (--max-pages)",
                    413,
                )
            job = Job(job_id, path, name, doc_id, n_pages, metadata=metadata, ocr=self.ocr)
            job.password = password
            with self._jobs_lock:  # the writer's pick-up must not queue it a second time
                job.save()
                self.jobs[job_id] = job
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if self.is_writer:
            self._queue.put(job)
        return job

    def resume_unfinished(self) -> list[Job]:
        """Load the recorded jobs: finished ones answer their status again, and the uploads
        whose document is missing or incomplete (a killed server) are queued again, with the
        metadata and options they were accepted with."""
        resumed: list[Job] = []
        if not self.is_writer:
            return resumed
        for folder in sorted(p for p in self.uploads.glob("*") if p.is_dir()):
            job = self._recorded(folder)
            if job is None:
                continue
            self.jobs[job.id] = job
            if job.state in ("done", "failed"):
                continue
            document = self.reader.store.document(job.doc_id)
            if document is not None and document.complete:
                job.state, job.pages_done = "done", len(self.reader.store.page_ids(job.doc_id))
                job.save()  # killed after its last commit, before its record said so
                continue
            job.state, job.resumed = "queued", True
            self._queue.put(job)
            resumed.append(job)
        return resumed

    def _pick_up_submitted(self) -> None:
        """Queue the uploads other workers accepted since the last look (their records)."""
        for folder in sorted(p for p in self.uploads.glob("*") if p.is_dir()):
            if folder.name in self.jobs or not (folder / RECORD).is_file():
                continue  # known, or still being saved (its record comes last)
            with self._jobs_lock:
                if folder.name in self.jobs:
                    continue
                job = self._recorded(folder)
                if job is None:
                    continue
                self.jobs[job.id] = job
            if job.state == "queued":
                self._queue.put(job)

    def _recorded(self, folder: Path) -> Job | None:
        """The job recorded in an upload folder: None (logged) for a folder without a record (an
        upload refused or killed before it was accepted), a failed `Job.unreadable` (logged on
        one line) for a record the server cannot use or whose file is missing. Neither is ever
        indexed, and the folder is left as it is."""
        try:
            job = Job.load(folder)
        except FileNotFoundError:
            log.warning("not resuming %s: no %s (the upload was never accepted)", folder, RECORD)
            return None
        except (OSError, ValueError) as error:  # UnicodeDecodeError is a ValueError too
            job = Job.unreadable(folder, _unreadable(error))
            log.warning("not resuming %s: %s", folder, job.error)
            return job
        if not job.finished and not job.path.is_file():
            log.warning("not resuming %s: its file %s is missing", folder, job.filename)
            return Job.unreadable(folder, f"its file {job.filename} is missing")
        return job

    # ------------------------------------------------------------------ reading
    def status(self, job_id: str) -> Job | None:
        job = self.jobs.get(job_id)
        if self.shared and (job is None or (not self.is_writer and not job.finished)):
            job = self._from_record(job_id)  # accepted or indexed by another worker
        if job is not None and job.state == "running":
            with contextlib.suppress(StoreError):  # a status never fails: the last count stays
                job.pages_done = len(self.reader.store.page_ids(job.doc_id))
        return job

    def _from_record(self, job_id: str) -> Job | None:
        """A job as its record says now (workers that do not index read it from disk)."""
        if not JOB_ID.fullmatch(job_id):
            return None  # never a path: job ids are 12 hex digits
        folder = self.uploads / job_id
        try:
            job = Job.load(folder)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            job = Job.unreadable(folder, _unreadable(error))
        if job.finished and not self.is_writer:
            self.jobs[job_id] = job  # a finished job's record no longer changes
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
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)
        if self._role is not None:
            self._role.close()
            self._role = None

    def _work(self) -> None:
        lower_thread_priority()
        while True:
            try:
                job = self._queue.get(timeout=POLL_S if self.shared else None)
            except queue.Empty:
                try:
                    self._pick_up_submitted()
                except Exception:  # the writer outlives whatever it finds in uploads/
                    log.exception("could not look for new uploads in %s", self.uploads)
                continue
            if job is None:
                return
            with self.write_lock:
                try:
                    self._run(job)
                except Exception as error:  # this job fails with the reason; the next ones run
                    log.exception("upload %s failed", job.id)
                    job.error = self._reason(error)
                    self._end(job, "failed")

    def _run(self, job: Job) -> None:
        job.state = "running"
        if self.shared:
            self._record_end(job)  # other workers read the state from the record
        crashed = False
        try:
            with self.open_writer() as writer:
                writer.batch_size = upload_batch_size(job.n_pages, writer.batch_size)
                passwords = {str(job.path): job.password} if job.password else None
                report = writer.add(
                    [job.path],
                    metadata=job.metadata,
                    progress=False,
                    ocr=job.ocr,
                    passwords=passwords,
                )
        except Exception as error:  # lock held by `vrag index`, disk full, model errors...
            log.exception("upload %s failed", job.id)
            job.error, crashed = self._reason(error), True
        else:
            job.failures = [_public_failure(f, job, self.root) for f in report.failures]
            record = self.reader.store.document(job.doc_id)
            if job.doc_id in report.documents_skipped and record and record.source != str(job.path):
                job.path.unlink(missing_ok=True)  # the same content was indexed from another file
        job.password = None  # held no longer than the job runs
        job.pages_done = len(self.reader.store.page_ids(job.doc_id))
        failed = crashed or (job.failures and job.pages_done == 0)
        self._end(job, "failed" if failed else "done")

    def _end(self, job: Job, state: str) -> None:
        """Record how ``job`` ended, then show it: a client that sees it ended finds its record
        written, not a temporary beside it."""
        self._record_end(dataclasses.replace(job, state=state))
        job.state = state

    def _record_end(self, job: Job) -> None:
        """Keep how a job ended for its status after a restart (best effort: a full disk or a
        value JSON cannot hold must not stop the writer)."""
        try:
            job.save()
        except Exception as error:
            log.warning("could not record the end of upload %s: %s", job.id, error)

    def _reason(self, error: Exception) -> str:
        """Why a job failed, as its status shows it: no absolute path of the index folder."""
        return hide_root(f"{type(error).__name__}: {error}", self.root)


def upload_batch_size(n_pages: int, batch_size: int) -> int:
    """The index's batch size, made smaller for short uploads so that they commit (and show
    progress) page by page or a few pages at a time: at least `UPLOAD_COMMITS` commits."""
    return max(1, min(batch_size, -(-n_pages // UPLOAD_COMMITS)))


def _unreadable(error: OSError | ValueError) -> str:
    """Why a record cannot be used, without its path (an OSError names the file)."""
    if isinstance(error, OSError):
        return f"unreadable {RECORD}: {error.strerror or 'read error'}"
    return f"unreadable {RECORD}: {error}"


def _inspect(path: Path, name: str, password: str | None = None) -> tuple[str, int]:
    """(doc_id, pages) of an uploaded file, or `UploadError` with the reason (no server paths)."""
    try:
        with open_document(path, text=False, password=password) as document:
            return document.doc_id, int(document.n_pages)
    except EncryptedPDFError as error:
        what = "the right password" if password else "its password"
        fix = f"send {what} in the upload's password field (the web page's PDF password box)"
        raise UploadError(f"{name}: {error.reason} ({fix})", 422) from error
    except IngestError as error:
        raise UploadError(f"{name}: {error.reason} ({error.fix})", 422) from error


def _public_failure(failure: dict[str, str], job: Job, root: Path) -> dict[str, str]:
    """A failure entry with the upload's name instead of its path on the server."""
    return {**{k: hide_root(v, root) for k, v in failure.items()}, "path": job.filename}
