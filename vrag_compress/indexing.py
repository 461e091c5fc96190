"""The indexing pipeline behind `VisualIndex.add` and `upsert_pages`.

plan (open every document, skip unchanged ones, find where interrupted ones resume) -> stream
(render pages lazily from each resume point) -> commit (OCR, encode, compress, save images, one
atomic store write per batch) -> finish (mark documents complete, retire older versions).
Each batch is committed together with the rows of the documents it touches, so an interrupted
run resumes at the first uncommitted page and never stores a page twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from vrag_compress.compress.base import CompressedPage, Compressor
from vrag_compress.encoders.base import Encoder, PageEncoding, ReadsPageText
from vrag_compress.encoders.errors import EncoderLoadError
from vrag_compress.index_config import VisualIndexError
from vrag_compress.ingest import (
    Document,
    IngestError,
    Page,
    RenderOptions,
    display_path,
    iter_documents,
    open_document,
    with_title,
)
from vrag_compress.ingest import page_id as default_page_id
from vrag_compress.ingest.ocr import PageOcr, PageText
from vrag_compress.ingest.page_assets import PageAssets, StoredImage
from vrag_compress.ingest.passwords import password_for
from vrag_compress.progress import IndexProgress
from vrag_compress.store import DocumentRecord, MultiVectorStore, PageRecord

log = logging.getLogger(__name__)


class NoVisualTokensError(VisualIndexError):
    """The encoder produced no visual tokens for pages given by id (adapter upserts)."""


@dataclass
class AddReport:
    """What one `add` call did: counts, and every failure with its reason."""

    pages_indexed: int = 0
    pages_skipped: int = 0
    documents_indexed: list[str] = field(default_factory=list)
    documents_skipped: list[str] = field(default_factory=list)
    documents_replaced: list[str] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    ocr_mode: str = "never"
    ocr_pages: list[dict[str, Any]] = field(default_factory=list)
    ocr_failures: list[dict[str, str]] = field(default_factory=list)
    unsupported_files: dict[str, int] = field(default_factory=dict)
    """Files inside the given folders that are not PDFs or images, skipped: count by suffix."""

    @property
    def ok(self) -> bool:
        return not self.failures

    def record_ocr(self, page: Page, result: PageText) -> None:
        """Per-page OCR timing; an OCR failure is listed but the page is still indexed."""
        if result.error is not None:
            entry = {
                "path": display_path(page.source or page.doc_id),
                "page_no": str(page.page_no),
                "reason": result.error,
            }
            self.ocr_failures.append(entry)
        elif result.ocr_ran:
            self.ocr_pages.append(
                {
                    "doc_id": page.doc_id,
                    "page_no": page.page_no,
                    "seconds": round(result.seconds, 3),
                    "chars": len(result.text or ""),
                }
            )

    def ocr_summary(self) -> dict[str, Any]:
        seconds = sum(p["seconds"] for p in self.ocr_pages)
        return {
            "mode": self.ocr_mode,
            "pages": len(self.ocr_pages),
            "seconds": round(seconds, 3),
            "per_page": self.ocr_pages,
            "failures": self.ocr_failures,
        }

    def fail(
        self, path: str | Path, reason: str, page_no: int | None = None, fix: str | None = None
    ) -> None:
        """One failure; ``fix`` (how to fix it, e.g. the password a protected PDF needs) is kept
        for the report to print after the reason."""
        entry = {"path": display_path(path), "reason": reason}
        if page_no is not None:
            entry["page_no"] = str(page_no)
        if fix:
            entry["fix"] = fix
        self.failures.append(entry)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pages_indexed": self.pages_indexed,
            "pages_skipped": self.pages_skipped,
            "documents_indexed": self.documents_indexed,
            "documents_skipped": self.documents_skipped,
            "documents_replaced": self.documents_replaced,
            "failures": self.failures,
            "seconds": round(self.seconds, 3),
            "ocr": self.ocr_summary(),
            "unsupported_files": dict(sorted(self.unsupported_files.items())),
        }


@dataclass
class ProcessedBatch:
    """What the compute half of a commit made of a batch: per position that worked, the page's
    encoding, compressed vectors, text and image ready to store; ``refused``: positions that
    failed (reported), which their documents list as failed pages. Pages without visual tokens
    are in neither."""

    done: list[tuple[int, PageEncoding, CompressedPage, PageText, StoredImage]] = field(
        default_factory=list
    )
    refused: list[int] = field(default_factory=list)


class PageFields(Protocol):
    """What the writer reads of a page besides its pixels (whose stored form comes ready in
    `ProcessedBatch`): a `Page`, or the header of a page rendered on a Ray worker."""

    @property
    def doc_id(self) -> str: ...

    @property
    def page_no(self) -> int: ...

    @property
    def text(self) -> str | None: ...

    @property
    def source(self) -> Path: ...


class _Pages(Protocol):
    """What the pipeline reads from a document: a `Document` or rendered `Page`s."""

    doc_id: str
    source: Any
    content_hash: str
    n_pages: int

    def page(self, page_no: int) -> Page: ...

    def close(self) -> None: ...


@dataclass
class DocState:
    """Bookkeeping for one document while its pages stream through the pipeline."""

    opener: Callable[[], _Pages]
    record: DocumentRecord
    last_page: int
    failed_pages: list[int] = field(default_factory=list)


class PagesDocument:
    """Adapts already-rendered `Page`s of one document to the `Document` interface."""

    def __init__(self, doc_id: str, pages: list[Page]) -> None:
        self.doc_id = doc_id
        self.pages = sorted(pages, key=lambda p: p.page_no)
        self.source = pages[0].source
        self.content_hash = doc_id
        self.n_pages = max(p.page_no for p in pages)

    def page(self, page_no: int) -> Page:
        for page in self.pages:
            if page.page_no == page_no:
                return page
        raise LookupError(page_no)

    def close(self) -> None:
        pass


def _reopen(document: PagesDocument) -> Callable[[], _Pages]:
    """An opener for rendered pages: they are already open."""
    return lambda: document


class Indexer:
    """One index's write path: turns files or rendered pages into committed store batches.

    ``encoder`` and ``compressor`` are called when a batch is first encoded, so a run that only
    skips unchanged documents never loads the model; ``delete_document`` removes a document with
    its files (older versions of a re-indexed file).
    """

    def __init__(
        self,
        store: MultiVectorStore,
        assets: PageAssets,
        encoder: Callable[[], Encoder],
        compressor: Callable[[], Compressor],
        delete_document: Callable[[str], int],
        *,
        model_id: str,
        batch_size: int,
        dpi: int,
        renderer: str,
        passwords: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self.assets = assets
        self._encoder = encoder
        self._compressor = compressor
        self.delete_document = delete_document
        self.model_id = model_id
        self.batch_size = batch_size
        self.dpi = dpi
        self.renderer = renderer
        self.passwords = passwords  # per file, for protected PDFs; used to open, never stored
        self._sources: dict[str, set[str]] | None = None  # source file -> its doc ids (lazy)

    def encode(
        self, pages: Sequence[Page], texts: Sequence[str | None] | None = None
    ) -> tuple[list[PageEncoding], list[CompressedPage]]:
        """Encode a batch of pages and compress those that have visual tokens (same order;
        pages without tokens get an encoding with 0 tokens and no compressed entry).

        Text encoders (MiniLM) read `texts` (OCR'd text where given, else the text layer)."""
        encoder, compressor = self._encoder(), self._compressor()
        stats = compressor.requires_stats
        if isinstance(encoder, ReadsPageText):
            if texts is None:
                texts = [p.text for p in pages]
            titled = [with_title(p.title, t) for p, t in zip(pages, texts, strict=True)]
            encodings = encoder.encode_page_texts(titled, with_stats=stats)
        else:
            encodings = encoder.encode_pages([p.image for p in pages], with_stats=stats)
        compressed = compressor.compress_many([e for e in encodings if e.n_tokens > 0])
        return encodings, compressed

    def no_tokens_reason(self) -> str:
        """Why a page has no vectors: no visual tokens, or no text for a text encoder."""
        if isinstance(self._encoder(), ReadsPageText):
            return (
                f"no text on this page (text layer or OCR): the text encoder {self.model_id} "
                "reads page text, not pixels"
            )
        return "the encoder produced no visual tokens"

    # ----------------------------------------------------------------- files and Page lists
    def add(
        self,
        items: str | Path | Iterable[str | Path] | Sequence[Page],
        metadata: dict[str, Any],
        *,
        progress: bool,
        page_ocr: PageOcr,
    ) -> AddReport:
        """Index files, folders or rendered pages (see `VisualIndex.add`)."""
        report = AddReport(ocr_mode=page_ocr.mode)
        started = time.perf_counter()
        self._sources = None
        with IndexProgress(0, enabled=progress) as bar:
            batch: list[tuple[DocState, Page]] = []
            streamed: list[DocState] = []  # every page handed out; finished after the commit
            for state, page in self.stream(self.plan(items, metadata, report, bar), report):
                if page is None:
                    streamed.append(state)
                    continue
                batch.append((state, page))
                if len(batch) >= self.batch_size:
                    self.commit(batch, report, bar, page_ocr)
                    batch = []
                    self.finish(streamed, report)
                    streamed = []
            self.commit(batch, report, bar, page_ocr)
            self.finish(streamed, report)
            bar.discovery_done()
        report.seconds = time.perf_counter() - started
        return report

    def plan(
        self,
        items: Any,
        metadata: dict[str, Any],
        report: AddReport,
        bar: IndexProgress | None = None,
    ) -> Iterator[DocState]:
        """Each document to index, as the folders are walked: unchanged ones are skipped,
        interrupted ones resume. A stream, so memory stays flat whatever the folder size and the
        first batch commits while the walk goes on."""
        if isinstance(items, (str, Path)):
            items = [items]
        items = list(items)
        if items and all(isinstance(i, Page) for i in items):
            states = self._plan_pages(items, metadata, report)
            if bar is not None:
                bar.discover(len(states), sum(_todo(s) for s in states))
            yield from states
            return
        seen: dict[str, str] = {}
        for path in iter_documents(items, unsupported=report.unsupported_files):
            if isinstance(path, IngestError):
                report.fail(path.path, path.reason)
                continue
            # the password travels inside RenderOptions, whose repr hides it (never logged)
            render = RenderOptions(
                dpi=self.dpi, renderer=self.renderer, password=password_for(path, self.passwords)
            )
            try:
                with open_document(path, render=render) as document:
                    opener = partial(open_document, path, doc_id=document.doc_id, render=render)
                    state = self.resume_state(document, opener, metadata, report, seen)
            except IngestError as error:
                report.fail(error.path, error.reason, fix=error.fix)
                continue
            seen.setdefault(document.doc_id, display_path(path))
            if bar is not None:
                bar.discover(1, _todo(state) if state is not None else 0)
            if state is not None:
                yield state

    def _plan_pages(
        self, pages: list[Page], metadata: dict[str, Any], report: AddReport
    ) -> list[DocState]:
        states: list[DocState] = []
        for doc_id in dict.fromkeys(p.doc_id for p in pages):
            document = PagesDocument(doc_id, [p for p in pages if p.doc_id == doc_id])
            state = self.resume_state(document, _reopen(document), metadata, report)
            if state is not None:
                states.append(state)
        return states

    def resume_state(
        self,
        document: Document | PagesDocument,
        opener: Callable[[], _Pages],
        metadata: dict[str, Any],
        report: AddReport,
        seen: dict[str, str] | None = None,
    ) -> DocState | None:
        """Where this document's indexing starts, or None when there is nothing to do
        (already complete, or the same content as another file of this run)."""
        if seen and document.doc_id in seen:
            log.info(
                "%s has the same content as %s; indexed once",
                document.source,
                seen[document.doc_id],
            )
            report.documents_skipped.append(document.doc_id)
            return None
        source = _source(document.source)
        existing = self.store.document(document.doc_id)
        if existing is not None and existing.complete:
            report.documents_skipped.append(document.doc_id)
            report.pages_skipped += existing.n_pages or 0
            self.retire_old_versions(document.doc_id, source, report)  # a crash may have cut it
            return None
        stored = [r.page_no for r in self.store.get(self.store.page_ids(document.doc_id))]
        record = DocumentRecord(
            doc_id=document.doc_id,
            source=source,
            content_hash=document.content_hash,
            n_pages=document.n_pages,
            complete=False,
            metadata=dict(metadata),
        )
        return DocState(opener, record, last_page=max(stored, default=0))

    def stream(
        self, states: Iterable[DocState], report: AddReport
    ) -> Iterator[tuple[DocState, Page | None]]:
        """Pages of every planned document, rendered lazily, from each one's resume point, and
        ``(state, None)`` once a document has handed out all its pages.

        Documents are opened one at a time; a page that fails to render is reported and the
        document's later pages still get indexed."""
        for state in states:
            try:
                document = state.opener()
            except IngestError as error:
                report.fail(error.path, error.reason)
                continue
            try:
                for page_no in range(state.last_page + 1, document.n_pages + 1):
                    try:
                        page = document.page(page_no)
                    except LookupError:  # caller-rendered pages may skip numbers
                        continue
                    except IngestError as error:
                        report.fail(error.path, error.reason, page_no)
                        state.failed_pages.append(page_no)
                        continue
                    yield state, page
            finally:
                document.close()
            yield state, None

    def commit(
        self,
        batch: list[tuple[DocState, Page]],
        report: AddReport,
        bar: IndexProgress,
        page_ocr: PageOcr,
    ) -> None:
        """OCR where needed, encode, compress, save images, and commit one batch atomically."""
        if not batch:
            return
        processed = self.process([page for _, page in batch], report, page_ocr)
        self.write(batch, processed, report, bar)

    def process(self, pages: list[Page], report: AddReport, page_ocr: PageOcr) -> ProcessedBatch:
        """The compute half of a commit (OCR, encode, compress, the image file to store), which
        touches no store: it runs here, or on a Ray worker whose result the driver `write`s."""
        texts = page_texts(pages, page_ocr, report)
        processed = ProcessedBatch()
        encoded = self.encode_guarded(pages, [t.text for t in texts], report)
        for i, encoding, packed in encoded:
            if packed is None:
                report.fail(_where(pages[i]), self.no_tokens_reason(), pages[i].page_no)
                continue
            image = self.assets.prepare(pages[i].image)
            processed.done.append((i, encoding, packed, texts[i], image))
        answered = {i for i, _, _ in encoded}
        processed.refused = [i for i in range(len(pages)) if i not in answered]
        return processed

    def write(
        self,
        batch: Sequence[tuple[DocState, PageFields | int]],
        processed: ProcessedBatch,
        report: AddReport,
        bar: IndexProgress,
    ) -> None:
        """The one writer: save the processed pages' files and commit them with the rows of the
        documents they touch, in one atomic store write. ``batch`` holds each position's page
        (or only its number, for a page rendered elsewhere that failed)."""
        records = []
        for i, encoding, packed, text, image in processed.done:
            state, page = batch[i]
            assert not isinstance(page, int)
            metadata = state.record.metadata
            records.append(
                self.page_record(page, encoding, packed, image, metadata=metadata, text=text)
            )
        for i in processed.refused:
            batch[i][0].failed_pages.append(_page_no(batch[i][1]))
        touched: dict[str, DocState] = {}
        for state, page in batch:
            state.last_page = _page_no(page)
            touched[state.record.doc_id] = state
        for state in touched.values():
            state.record.complete = state.last_page >= (state.record.n_pages or 0)
        self.assets.sync()
        self.store.add(records, documents=[s.record for s in touched.values()])
        report.pages_indexed += len(records)
        bar.advance(len(batch))

    def encode_guarded(
        self, pages: list[Page], texts: list[str | None], report: AddReport
    ) -> list[tuple[int, PageEncoding, CompressedPage | None]]:
        """Encode and compress a batch: ``(position, encoding, compressed or None when the page
        has no visual tokens)``. When the batch fails, its pages are retried one at a time, so a
        page the encoder refuses is reported (file, page, reason) and left out, and the others
        are indexed."""
        self._encoder(), self._compressor()  # a model or config problem is no page's fault
        try:
            return _paired(range(len(pages)), *self.encode(pages, texts))
        except EncoderLoadError:  # the model itself is unusable: no page can be encoded
            raise
        except Exception as error:  # a model or processor error caused by some page's content
            if len(pages) == 1:
                self._encode_failed(pages[0], error, report)
                return []
        done: list[tuple[int, PageEncoding, CompressedPage | None]] = []
        for i, page in enumerate(pages):
            try:
                done.extend(_paired([i], *self.encode([page], texts[i : i + 1])))
            except EncoderLoadError:
                raise
            except Exception as error:
                self._encode_failed(page, error, report)
        return done

    @staticmethod
    def _encode_failed(page: Page, error: Exception, report: AddReport) -> None:
        log.debug("encoding %s page %d failed", _where(page), page.page_no, exc_info=error)
        reason = f"the encoder cannot process this page ({type(error).__name__}: {error})"
        report.fail(_where(page), reason, page.page_no)

    def retire_old_versions(self, doc_id: str, source: str | None, report: AddReport) -> None:
        """Delete the other documents indexed from the same source file (its older versions)."""
        if source is None:
            return
        if self._sources is None:  # one pass over the store per `add`, then kept up to date
            self._sources = {}
            for doc in self.store.documents():
                if doc.source is not None:
                    self._sources.setdefault(doc.source, set()).add(doc.doc_id)
        versions = self._sources.setdefault(source, set())
        for old in sorted(versions - {doc_id}):
            self.delete_document(old)
            report.documents_replaced.append(old)
        versions.intersection_update({doc_id})
        versions.add(doc_id)

    def finish(self, states: list[DocState], report: AddReport) -> None:
        """Mark finished documents and retire older versions of the same source files."""
        for state in states:
            record = state.record
            if state.failed_pages:
                record.metadata = {**record.metadata, "failed_pages": state.failed_pages}
            if state.failed_pages or (
                not record.complete and state.last_page >= (record.n_pages or 0)
            ):
                record.complete = True
                self.store.put_document(record)
            if not record.complete:
                continue
            report.documents_indexed.append(record.doc_id)
            self.retire_old_versions(record.doc_id, record.source, report)

    # ----------------------------------------------------------------- pages with their own ids
    def upsert(self, pages: list[Page], ids: list[str], metas: list[dict[str, Any]]) -> list[str]:
        """Encode, compress and store pages under ``ids`` (one atomic batch per `batch_size`)."""
        for start in range(0, len(pages), self.batch_size):
            chunk = slice(start, start + self.batch_size)
            encodings, compressed = self.encode(pages[chunk])
            empty = [i for i, e in zip(ids[chunk], encodings, strict=True) if e.n_tokens == 0]
            if empty:
                raise NoVisualTokensError(f"pages {empty}: {self.no_tokens_reason()}")
            records = [
                self.page_record(
                    page,
                    encoding,
                    packed,
                    self.assets.prepare(page.image),
                    metadata=meta,
                    page_id=pid,
                )
                for page, encoding, packed, meta, pid in zip(
                    pages[chunk], encodings, compressed, metas[chunk], ids[chunk], strict=True
                )
            ]
            documents = {
                r.doc_id: DocumentRecord(
                    doc_id=r.doc_id, source=r.metadata.get("source"), complete=True
                )
                for r in records
                if self.store.document(r.doc_id) is None
            }
            self.assets.sync()
            self.store.upsert(records, documents=list(documents.values()))
        return ids

    def page_record(
        self,
        page: PageFields,
        encoding: PageEncoding,
        compressed: CompressedPage,
        image: StoredImage,
        *,
        metadata: dict[str, Any],
        text: PageText | None = None,
        page_id: str | None = None,
    ) -> PageRecord:
        """Save the page's image and layout, and build its catalog record."""
        image_ref = self.assets.save(page.doc_id, page.page_no, image, page_id)
        self.assets.save_layout(
            page.doc_id, page.page_no, encoding, compressed, image.size, page_id
        )
        metadata = {**metadata, "n_tokens": encoding.n_tokens}
        if page.source:
            metadata["source"] = _source(page.source)
            metadata["filename"] = display_path(Path(page.source).name)
        if text is None:
            text = PageText(page.text or None, "layer" if page.text else "none")
        metadata["text_source"] = text.source
        return PageRecord(
            page_id=page_id or default_page_id(page.doc_id, page.page_no),
            doc_id=page.doc_id,
            page_no=page.page_no,
            vectors=compressed.vectors,
            metadata=metadata,
            image_ref=image_ref,
            text=text.text,
        )


def _paired(
    positions: Iterable[int], encodings: list[PageEncoding], compressed: list[CompressedPage]
) -> list[tuple[int, PageEncoding, CompressedPage | None]]:
    """Encodings with their compressed pages (given only for pages that have visual tokens)."""
    packed = iter(compressed)
    return [
        (i, e, next(packed) if e.n_tokens > 0 else None)
        for i, e in zip(positions, encodings, strict=True)
    ]


def _source(path: Any) -> str | None:
    """A source file as stored: absolute, and safe to store whatever bytes its name has."""
    return display_path(Path(path).resolve()) if path else None


def _page_no(page: PageFields | int) -> int:
    return page if isinstance(page, int) else page.page_no


def _where(page: Page) -> str:
    return display_path(page.source) if page.source else page.doc_id


def _todo(state: DocState) -> int:
    return max((state.record.n_pages or 0) - state.last_page, 0)


def page_texts(pages: list[Page], page_ocr: PageOcr, report: AddReport) -> list[PageText]:
    """Each page's text layer, or its OCR'd text; OCR failures are reported, not raised."""
    texts = page_ocr.page_texts([p.image for p in pages], [p.text for p in pages])
    for page, text in zip(pages, texts, strict=True):
        report.record_ocr(page, text)
    return texts
