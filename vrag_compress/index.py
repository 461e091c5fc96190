"""`VisualIndex`: the one object users hold. Joins ingestion, encoding, compression and the store.

Indexing streams: pages are rendered one at a time, encoded and compressed in batches, and each
batch is committed atomically together with the rows of the documents it touches, so an interrupted
run resumes at the first uncommitted page and never stores a page twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vrag_compress.compress import get_compressor
from vrag_compress.compress.base import CompressedPage, Compressor
from vrag_compress.encoders.base import Encoder, PageEncoding, ReadsPageText
from vrag_compress.explain import Explanation, Region, explain_vectors, query_token_labels
from vrag_compress.ingest import Document, IngestError, Page, find_documents, open_document
from vrag_compress.ingest import page_id as default_page_id
from vrag_compress.ocr import PageOcr, PageText
from vrag_compress.page_assets import PageAssets
from vrag_compress.progress import IndexProgress
from vrag_compress.store import (
    DocumentRecord,
    LocalStore,
    MultiVectorStore,
    PageRecord,
    VerifyReport,
)
from vrag_compress.store.catalog import CATALOG_NAME
from vrag_compress.store.open import (
    create_store,
    open_store,
    read_store_pointer,
    write_store_pointer,
)
from vrag_compress.version import __version__

log = logging.getLogger(__name__)

DEFAULT_MODEL = "vidore/colqwen2-v1.0"


class VisualIndexError(RuntimeError):
    """A problem with the index as a whole (wrong model, missing folder, closed index)."""


class ModelMismatchError(VisualIndexError):
    """The index was built with another model than the one asked for."""


@dataclass
class Hit:
    """One search result: a page with its score, provenance, metadata, text and (lazy) image."""

    doc_id: str
    page_no: int
    score: float
    source: str | None
    metadata: dict[str, Any]
    text: str | None
    page_id: str
    regions: list[Region] = field(default_factory=list)
    _assets: PageAssets | None = field(default=None, repr=False, compare=False)
    _image_ref: str | None = field(default=None, repr=False, compare=False)
    _explanation: Explanation | None = field(default=None, repr=False, compare=False)

    def explain(self) -> Explanation:
        """Why this page matched: per query token, the stored vector it matched, its share of
        the score and the page patches behind it (see `vrag_compress.explain`)."""
        if self._explanation is None:
            raise VisualIndexError("this hit did not come from a search; use VisualIndex.explain")
        return self._explanation

    @property
    def image_path(self) -> Path | None:
        """The stored page image file, when the index keeps images."""
        if self._assets is None:
            return None
        return self._assets.image_path(self._image_ref)

    @property
    def image(self) -> Image.Image:
        """The page image, loaded on first access (from the index folder or the source file)."""
        if self._assets is None:
            raise VisualIndexError("this hit is detached from its index; no image available")
        return self._assets.load(self._image_ref, self.source, self.page_no)

    def to_dict(self) -> dict[str, Any]:
        path = self.image_path
        return {
            "doc_id": self.doc_id,
            "page_no": self.page_no,
            "score": self.score,
            "source": self.source,
            "metadata": self.metadata,
            "text": self.text,
            "image_path": str(path) if path else None,
            "page_id": self.page_id,
            "regions": [r.to_dict() for r in self.regions],
        }


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

    @property
    def ok(self) -> bool:
        return not self.failures

    def record_ocr(self, page: Page, result: PageText) -> None:
        """Per-page OCR timing; an OCR failure is listed but the page is still indexed."""
        if result.error is not None:
            entry = {"path": str(page.source), "page_no": str(page.page_no), "reason": result.error}
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

    def fail(self, path: str | Path, reason: str, page_no: int | None = None) -> None:
        entry = {"path": str(path), "reason": reason}
        if page_no is not None:
            entry["page_no"] = str(page_no)
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
        }


@dataclass
class _DocState:
    """Bookkeeping for one document while its pages stream through the pipeline."""

    opener: Callable[[], Document]
    record: DocumentRecord
    last_page: int
    failed_pages: list[int] = field(default_factory=list)


def _model_config_name(encoder: Encoder) -> str:
    return getattr(encoder, "model_id", type(encoder).__name__)


class VisualIndex:
    """A folder holding a compressed multi-vector index of document pages, plus their images."""

    def __init__(
        self, path: Path, store: MultiVectorStore, encoder: Encoder | None, device: str
    ) -> None:
        self.path = path
        self.store = store
        self._encoder = encoder
        self._device = device
        config = store.config
        self.model_id: str = config["model_id"]
        self.compressor: Compressor = get_compressor(
            config["compressor"], **config.get("compressor_params", {})
        )
        self.batch_size: int = int(config.get("batch_size", 4))
        self.dpi: int = int(config.get("dpi", 150))
        self.renderer: str = config.get("renderer", "pypdfium2")
        self.assets = PageAssets(
            path, **config.get("images", {}), dpi=self.dpi, renderer=self.renderer
        )

    # ----------------------------------------------------------------- lifecycle
    @classmethod
    def create(
        cls,
        path: str | Path,
        model: str = DEFAULT_MODEL,
        compressor: Compressor | str | None = None,
        *,
        ratio: float = 0.1,
        device: str = "auto",
        batch_size: int = 4,
        dpi: int = 150,
        renderer: str = "pypdfium2",
        store_images: bool = True,
        image_format: str = "webp",
        image_max_side: int = 1280,
        encoder: Encoder | None = None,
        store: str | None = None,
    ) -> VisualIndex:
        """Create a new index folder. The encoder loads here (to learn the vector dimension).

        `compressor` is a compressor object, a method name (with `ratio`), or None for SAP at
        `ratio` with the model's built-in layer window when one is known. `store` is None for
        the embedded store inside the folder, or a URL (``qdrant://host:port/collection``,
        ``qdrant+local://PATH``): the vectors then live there and the folder keeps the images,
        layouts and a pointer to the store.
        """
        path = Path(path)
        if encoder is None:
            from vrag_compress.encoders import load_encoder

            encoder = load_encoder(model, device=device, batch_size=batch_size)
        compressor = _resolve_compressor(compressor, ratio, encoder)
        config = {
            "model_id": _model_config_name(encoder),
            "dim": int(encoder.dim),
            "encoder": _encoder_info(encoder),
            "compressor": compressor.name,
            "compressor_params": compressor.params,
            "images": {"store": store_images, "format": image_format, "max_side": image_max_side},
            "batch_size": batch_size,
            "dpi": dpi,
            "renderer": renderer,
            "vrag_version": __version__,
        }
        if store is None:
            return cls(path, LocalStore.create(path, config), encoder, device)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise VisualIndexError(f"{path} already exists and is not an empty folder")
        remote = create_store(store, config)
        path.mkdir(parents=True, exist_ok=True)
        write_store_pointer(path, store)
        return cls(path, remote, encoder, device)

    @classmethod
    def open_or_create(
        cls,
        path: str | Path,
        *,
        model: str | None = None,
        encoder: Encoder | None = None,
        device: str = "auto",
        **create_options: Any,
    ) -> VisualIndex:
        """Open the index at `path`, or create it there (`create_options` go to `create`).

        An explicit `model` must match an existing index's model; a new index gets `model`
        or `DEFAULT_MODEL`."""
        if cls.exists(path):
            return cls.open(path, model=model, encoder=encoder, device=device)
        return cls.create(
            path, model=model or DEFAULT_MODEL, encoder=encoder, device=device, **create_options
        )

    @staticmethod
    def exists(path: str | Path) -> bool:
        """Whether `path` already holds an index (so `add` should open rather than create)."""
        path = Path(path)
        return (path / CATALOG_NAME).is_file() or read_store_pointer(path) is not None

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        model: str | None = None,
        device: str = "auto",
        encoder: Encoder | None = None,
        readonly: bool = False,
        store: str | None = None,
    ) -> VisualIndex:
        """Open an existing index; the encoder loads lazily on the first add or search.

        The vectors come from `store` when given (a URL or store folder), else from the store
        the folder points at, else from the embedded store inside the folder."""
        path = Path(path)
        if not path.exists():
            raise VisualIndexError(
                f"{path}: no index here (create one with `vrag index ... --index {path}`)"
            )
        target = store or read_store_pointer(path) or path
        store = open_store(target, readonly=readonly)
        recorded = store.config["model_id"]
        asked = model or (encoder and _model_config_name(encoder))
        if asked and asked != recorded:
            store.close()
            raise ModelMismatchError(
                f"{path} was indexed with model {recorded!r}, not {asked!r}: query vectors of "
                "different models are not comparable. Open it without a model, or re-index."
            )
        return cls(path, store, encoder, device)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> VisualIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def encoder(self) -> Encoder:
        """The Col* encoder recorded in the index, loaded on first use."""
        if self._encoder is None:
            from vrag_compress.encoders import load_encoder

            self._encoder = load_encoder(
                self.model_id, device=self._device, batch_size=self.batch_size
            )
        return self._encoder

    # ----------------------------------------------------------------- reading
    def search(
        self,
        query: str | np.ndarray,
        k: int = 5,
        *,
        filter: dict[str, Any] | None = None,
        mode: str = "auto",
    ) -> list[Hit]:
        """Top-k pages by exact MaxSim of the query against the compressed page vectors."""
        vectors = self.encoder.encode_queries([query])[0] if isinstance(query, str) else query
        results = self.store.search(vectors, k, filter=filter, mode=mode)
        hits = [self._hit(r) for r in results]
        labels = query_token_labels(self.encoder, query, len(vectors)) if hits else None
        records = {r.page_id: r for r in self.store.get([h.page_id for h in hits], missing="skip")}
        for hit in hits:
            if hit.page_id in records:
                hit._explanation = self._explain_record(vectors, records[hit.page_id], labels)
                hit.regions = hit._explanation.regions
        return hits

    def explain(self, query: str | np.ndarray, doc_id: str, page_no: int) -> Explanation:
        """How `query` scores against one stored page, token by token, placed on the page."""
        vectors = self.encoder.encode_queries([query])[0] if isinstance(query, str) else query
        records = self.store.get([default_page_id(doc_id, page_no)], missing="skip")
        if not records:
            raise KeyError(f"no page {page_no} of document {doc_id!r} in {self.path}")
        labels = query_token_labels(self.encoder, query, len(vectors))
        return self._explain_record(vectors, records[0], labels)

    def _explain_record(
        self, query: np.ndarray, record: PageRecord, labels: list[str] | None
    ) -> Explanation:
        layout = self.assets.load_layout(record.doc_id, record.page_no, record.page_id)
        return explain_vectors(
            query,
            record.vectors,
            layout,
            labels=labels,
            page_id=record.page_id,
            doc_id=record.doc_id,
            page_no=record.page_no,
        )

    def get(self, page_ids: Sequence[str]) -> list[Hit]:
        """Stored pages by id, in the order asked; unknown ids are left out. Scores are NaN."""
        records = self.store.get(list(page_ids), missing="skip")
        return [self._hit(r, score=float("nan")) for r in records]

    def _hit(self, result: Any, score: float | None = None) -> Hit:
        """A `Hit` from a search result, or from a stored `PageRecord` with the given score."""
        metadata = dict(result.metadata or {})
        return Hit(
            doc_id=result.doc_id,
            page_no=result.page_no,
            score=float(result.score) if score is None else score,
            source=metadata.get("source"),
            metadata=metadata,
            text=result.text,
            page_id=result.page_id,
            _assets=self.assets,
            _image_ref=result.image_ref,
        )

    def documents(self) -> list[DocumentRecord]:
        return self.store.documents()

    def page_image(self, doc_id: str, page_no: int) -> Image.Image:
        """One page's image: stored, or re-rendered from the source (reference-only indexes)."""
        records = self.store.get([default_page_id(doc_id, page_no)], missing="skip")
        if not records:
            raise KeyError(f"no page {page_no} of document {doc_id!r} in {self.path}")
        record = records[0]
        return self.assets.load(record.image_ref, record.metadata.get("source"), page_no)

    def page_layout(self, doc_id: str, page_no: int) -> dict[str, Any] | None:
        """Which source patches a stored page kept (or merged), for `vrag show`."""
        return self.assets.load_layout(doc_id, page_no)

    def verify(self) -> VerifyReport:
        return self.store.verify()

    def info(self, *, measure_recall: bool = False) -> dict[str, Any]:
        """Model, compressor, counts, size and the candidate index's parameters; with
        ``measure_recall`` also its recall@10 against exact search on sampled stored pages."""
        config = self.store.config
        docs = self.documents()
        index_info = getattr(self.store, "index_info", None)
        return {
            "path": str(self.path),
            "model_id": self.model_id,
            "dim": config["dim"],
            "compressor": self.compressor.name,
            "compressor_params": self.compressor.params,
            "documents": len(docs),
            "incomplete_documents": sum(not d.complete for d in docs),
            "pages": self.store.count(),
            "images": config.get("images", {}),
            "size_mb": round(_folder_size(self.path) / 2**20, 3),
            "vrag_version": config.get("vrag_version"),
            "candidate_index": (
                None if index_info is None else index_info(measure_recall=measure_recall)
            ),
        }

    def optimize(self, *, codes: str | None = None) -> dict[str, Any]:
        """Compact the store and (re)train its candidate index; returns the index's parameters."""
        optimize = getattr(self.store, "optimize", None)
        if optimize is None:
            raise VisualIndexError(
                f"{self.path}: this store backend keeps no candidate index to optimize"
            )
        return optimize(codes=codes)

    # ----------------------------------------------------------------- writing
    def delete(self, doc_id: str) -> int:
        """Delete a document's pages (and stored images); returns how many pages went."""
        removed = self.store.delete(doc_id=doc_id)
        self.assets.remove_document(doc_id)
        return removed

    def delete_pages(self, page_ids: Sequence[str]) -> int:
        """Delete pages by id with their stored files; a document left without pages goes too.

        Unknown ids are ignored. Returns how many pages were deleted."""
        records = self.store.get(list(page_ids), missing="skip")
        if not records:
            return 0
        removed = self.store.delete(page_ids=[r.page_id for r in records])
        for record in records:
            self.assets.remove_page(record.doc_id, record.page_no, record.image_ref, record.page_id)
        for doc_id in {r.doc_id for r in records}:
            if not self.store.page_ids(doc_id):
                self.delete(doc_id)
        return removed

    def clear(self) -> int:
        """Delete every document and page; returns how many pages were deleted."""
        removed = sum(self.delete(d.doc_id) for d in self.documents())
        leftover = self.store.page_ids()
        return removed + (self.store.delete(page_ids=leftover) if leftover else 0)

    def upsert_pages(
        self,
        pages: Sequence[Page],
        *,
        page_ids: Sequence[str] | None = None,
        metadata: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        """Encode, compress and store rendered pages under the given ids, replacing existing ones.

        For adapters (LlamaIndex nodes, LangChain documents) whose entries carry their own ids and
        metadata; files go through `add`, which also skips unchanged documents and resumes.
        Default ids are ``<doc_id>:<page_no>``. Commits one atomic batch per `batch_size` pages.
        """
        pages = list(pages)
        ids = list(page_ids) if page_ids is not None else [p.page_id for p in pages]
        metas = list(metadata) if metadata is not None else [{} for _ in pages]
        if not len(ids) == len(metas) == len(pages):
            raise ValueError(
                f"upsert_pages: {len(pages)} pages, {len(ids)} ids, {len(metas)} metadata dicts"
            )
        for start in range(0, len(pages), self.batch_size):
            chunk = slice(start, start + self.batch_size)
            encodings, compressed = self._encode(pages[chunk])
            empty = [i for i, e in zip(ids[chunk], encodings, strict=True) if e.n_tokens == 0]
            if empty:
                raise VisualIndexError(f"the encoder produced no visual tokens for pages {empty}")
            records = [
                self._page_record(page, encoding, packed, metadata=meta, page_id=page_id)
                for page, encoding, packed, meta, page_id in zip(
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
            self.store.upsert(records, documents=list(documents.values()))
        return ids

    def upsert_vectors(
        self,
        vectors: Sequence[np.ndarray],
        *,
        page_ids: Sequence[str],
        doc_ids: Sequence[str],
        metadata: Sequence[dict[str, Any]] | None = None,
        texts: Sequence[str | None] | None = None,
    ) -> list[str]:
        """Store ready-made multi-vectors ``[n, dim]`` as one-page entries, replacing existing ids.

        For adapters that embed texts with their own model (a LangChain `Embeddings`): nothing is
        encoded or compressed here, and each entry is page 1 of its own complete document."""
        n = len(vectors)
        metas = list(metadata) if metadata is not None else [{} for _ in range(n)]
        bodies = list(texts) if texts is not None else [None] * n
        if not len(page_ids) == len(doc_ids) == len(metas) == len(bodies) == n:
            raise ValueError(
                f"upsert_vectors: {n} vectors, {len(page_ids)} ids, {len(doc_ids)} doc ids, "
                f"{len(metas)} metadata dicts, {len(bodies)} texts"
            )
        records = [
            PageRecord(page_id=i, doc_id=d, page_no=1, vectors=v, metadata=m, text=t)
            for i, d, v, m, t in zip(page_ids, doc_ids, vectors, metas, bodies, strict=True)
        ]
        documents = [DocumentRecord(doc_id=d, n_pages=1, complete=True) for d in doc_ids]
        self.store.upsert(records, documents)
        return list(page_ids)

    def _encode(
        self, pages: Sequence[Page], texts: Sequence[str | None] | None = None
    ) -> tuple[list[PageEncoding], list[CompressedPage]]:
        """Encode a batch of pages and compress those that have visual tokens (same order;
        pages without tokens get an encoding with 0 tokens and no compressed entry).

        Text encoders (MiniLM) read `texts` (OCR'd text where given, else the text layer)."""
        stats = self.compressor.requires_stats
        if isinstance(self.encoder, ReadsPageText):
            if texts is None:
                texts = [p.text for p in pages]
            encodings = self.encoder.encode_page_texts(list(texts), with_stats=stats)
        else:
            encodings = self.encoder.encode_pages([p.image for p in pages], with_stats=stats)
        compressed = self.compressor.compress_many([e for e in encodings if e.n_tokens > 0])
        return encodings, compressed

    def add(
        self,
        items: str | Path | Iterable[str | Path] | Sequence[Page],
        metadata: dict[str, Any] | None = None,
        *,
        progress: bool = True,
        ocr: str | PageOcr = "auto",
    ) -> AddReport:
        """Index files, folders or already-rendered `Page`s; unchanged documents are skipped.

        Returns a report of what was indexed, skipped and failed (with reasons); one bad file
        never stops the rest. `ocr` ("auto", "always", "never" or a `PageOcr`) gives pages
        without a text layer their OCR'd text (see `vrag_compress.ocr`).
        """
        page_ocr = ocr if isinstance(ocr, PageOcr) else PageOcr(ocr)
        page_ocr.prepare()  # `always` without an OCR engine fails here, before any work
        report = AddReport(ocr_mode=page_ocr.mode)
        started = time.perf_counter()
        states = self._plan(items, metadata or {}, report)
        total = sum(s.record.n_pages - s.last_page for s in states)
        with IndexProgress(total, enabled=progress) as bar:
            batch: list[tuple[_DocState, Page]] = []
            for state, page in self._stream(states, report):
                batch.append((state, page))
                if len(batch) >= self.batch_size:
                    self._commit(batch, report, bar, page_ocr)
                    batch = []
            self._commit(batch, report, bar, page_ocr)
        self._finish(states, report)
        report.seconds = time.perf_counter() - started
        return report

    def _plan(self, items: Any, metadata: dict[str, Any], report: AddReport) -> list[_DocState]:
        """Open every document, skip unchanged ones, and find where interrupted ones resume."""
        if isinstance(items, (str, Path)):
            items = [items]
        items = list(items)
        if items and all(isinstance(i, Page) for i in items):
            return self._plan_pages(items, metadata, report)
        paths, errors = find_documents(items)
        for error in errors:
            report.fail(error.path, error.reason)
        states: list[_DocState] = []
        seen: dict[str, Path] = {}
        for path in paths:
            try:
                with open_document(path, dpi=self.dpi, renderer=self.renderer) as document:
                    opener = partial(
                        open_document,
                        path,
                        doc_id=document.doc_id,
                        dpi=self.dpi,
                        renderer=self.renderer,
                    )
                    state = self._resume_state(document, opener, metadata, report, seen)
            except IngestError as error:
                report.fail(error.path, error.reason)
                continue
            seen.setdefault(document.doc_id, path)
            if state is not None:
                states.append(state)
        return states

    def _plan_pages(
        self, pages: list[Page], metadata: dict[str, Any], report: AddReport
    ) -> list[_DocState]:
        states: dict[str, _DocState] = {}
        for doc_id in dict.fromkeys(p.doc_id for p in pages):
            doc_pages = [p for p in pages if p.doc_id == doc_id]
            document = _PagesDocument(doc_id, doc_pages)
            state = self._resume_state(document, lambda d=document: d, metadata, report)
            if state is not None:
                states[doc_id] = state
        return list(states.values())

    def _resume_state(
        self,
        document: Document | _PagesDocument,
        opener: Callable[[], Any],
        metadata: dict[str, Any],
        report: AddReport,
        seen: dict[str, Path] | None = None,
    ) -> _DocState | None:
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
        existing = self.store.document(document.doc_id)
        if existing is not None and existing.complete:
            report.documents_skipped.append(document.doc_id)
            report.pages_skipped += existing.n_pages or 0
            return None
        stored = [r.page_no for r in self.store.get(self.store.page_ids(document.doc_id))]
        record = DocumentRecord(
            doc_id=document.doc_id,
            source=str(Path(document.source).resolve()) if document.source else None,
            content_hash=document.content_hash,
            n_pages=document.n_pages,
            complete=False,
            metadata=dict(metadata),
        )
        return _DocState(opener, record, last_page=max(stored, default=0))

    def _stream(
        self, states: list[_DocState], report: AddReport
    ) -> Iterator[tuple[_DocState, Page]]:
        """Pages of every planned document, rendered lazily, from each one's resume point.

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

    def _commit(
        self,
        batch: list[tuple[_DocState, Page]],
        report: AddReport,
        bar: IndexProgress,
        page_ocr: PageOcr | None = None,
    ) -> None:
        """OCR where needed, encode, compress, save images, and commit one batch atomically."""
        if not batch:
            return
        pages = [page for _, page in batch]
        texts = self._page_texts(pages, page_ocr or PageOcr("never"), report)
        encodings, compressed = self._encode(pages, [t.text for t in texts])
        usable = [i for i, e in enumerate(encodings) if e.n_tokens > 0]
        reason = "the encoder produced no visual tokens"
        if isinstance(self.encoder, ReadsPageText):
            reason = "no text on this page (text layer or OCR)"
            reason += f" for the text encoder {self.model_id}"
        for i in sorted(set(range(len(pages))) - set(usable)):
            report.fail(pages[i].source, reason, pages[i].page_no)
        records = [
            self._page_record(
                pages[i], encodings[i], c, metadata=batch[i][0].record.metadata, text=texts[i]
            )
            for i, c in zip(usable, compressed, strict=True)
        ]
        touched: dict[str, _DocState] = {}
        for state, page in batch:
            state.last_page = page.page_no
            touched[state.record.doc_id] = state
        for state in touched.values():
            state.record.complete = state.last_page >= (state.record.n_pages or 0)
        self.store.add(records, documents=[s.record for s in touched.values()])
        report.pages_indexed += len(records)
        bar.advance(len(batch))

    @staticmethod
    def _page_texts(pages: list[Page], page_ocr: PageOcr, report: AddReport) -> list[PageText]:
        """Each page's text layer, or its OCR'd text; OCR failures are reported, not raised."""
        texts = page_ocr.page_texts([p.image for p in pages], [p.text for p in pages])
        for page, text in zip(pages, texts, strict=True):
            report.record_ocr(page, text)
        return texts

    def _page_record(
        self,
        page: Page,
        encoding: PageEncoding,
        compressed: CompressedPage,
        *,
        metadata: dict[str, Any],
        text: PageText | None = None,
        page_id: str | None = None,
    ) -> PageRecord:
        """Save the page's image and layout, and build its catalog record."""
        image_ref = self.assets.save(page.doc_id, page.page_no, page.image, page_id)
        self.assets.save_layout(
            page.doc_id, page.page_no, encoding, compressed, page.image.size, page_id
        )
        metadata = {**metadata, "n_tokens": encoding.n_tokens}
        if page.source:
            metadata["source"] = str(Path(page.source).resolve())
            metadata["filename"] = Path(page.source).name
        if text is None:
            text = PageText(page.text or None, "layer" if page.text else "none")
        metadata["text_source"] = text.source
        return PageRecord(
            page_id=page_id or page.page_id,
            doc_id=page.doc_id,
            page_no=page.page_no,
            vectors=compressed.vectors,
            metadata=metadata,
            image_ref=image_ref,
            text=text.text,
        )

    def _finish(self, states: list[_DocState], report: AddReport) -> None:
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
            for old in self.store.documents():
                if old.source == record.source and old.doc_id != record.doc_id:
                    self.delete(old.doc_id)
                    report.documents_replaced.append(old.doc_id)


class _PagesDocument:
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


def _resolve_compressor(
    compressor: Compressor | str | None, ratio: float, encoder: Encoder
) -> Compressor:
    """A compressor object as given, or one by name; SAP gets the model's built-in window
    when the profile matches the model's depth, else the SPEC §4 fallback window."""
    if compressor is not None and not isinstance(compressor, str):
        return compressor
    name = compressor or "sap"
    if name == "sap":
        from vrag_compress.compress.profiles import builtin_profile, fallback_window

        profile = builtin_profile(_model_config_name(encoder))
        if profile is not None and profile.n_layers == encoder.n_layers:
            return get_compressor("sap", ratio=ratio, layers=list(profile.window))
        window = list(fallback_window(encoder.n_layers))
        log.warning(
            "no calibrated SAP window for %s; using the fallback layers %s. "
            "Run `vrag calibrate` for a better one.",
            _model_config_name(encoder),
            window,
        )
        return get_compressor("sap", ratio=ratio, layers=window, n_layers=encoder.n_layers)
    if name == "identity":
        return get_compressor("identity")
    if name == "adaptive-eos":
        raise ValueError(
            "adaptive-eos keeps a per-page number of tokens set by kappa; pass "
            "get_compressor('adaptive-eos', ratio=..., kappa=...) (or one fitted on pages) "
            "as `compressor`"
        )
    return get_compressor(name, ratio=ratio)


def _encoder_info(encoder: Encoder) -> dict[str, Any]:
    info = getattr(encoder, "info", None)
    if callable(info):
        return info()
    return {
        "model_id": _model_config_name(encoder),
        "dim": encoder.dim,
        "n_layers": encoder.n_layers,
    }


def _folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
