"""`PDFPageLoader`: one LangChain `Document` per PDF (or image) page, streamed."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document
from vrag_compress import DEFAULT_DPI, IngestError, Page, find_documents, open_document

log = logging.getLogger(__name__)

PathInput = str | Path


class PDFPageLoader(BaseLoader):
    """Loads PDFs, images, Office files (LibreOffice converts them) or folders of them page by
    page.

    `page_content` is the page's text layer ("" for scans and images). Metadata: `source`,
    `filename`, `page` (1-based, like the rest of vrag_compress), `total_pages`, `doc_id` (content
    hash prefix, the same id `VisualIndex` uses) and, when `image_dir` is given, `image_path` of
    the rendered page saved there. The document id is ``"<doc_id>:<page>"``, the index's page id,
    so re-adding a loaded file to a vector store replaces rather than duplicates.

    ``on_error="raise"`` (default) stops at the first unreadable file with its typed
    `IngestError`; ``"skip"`` logs it and goes on.
    """

    def __init__(
        self,
        file_path: PathInput | Sequence[PathInput],
        *,
        image_dir: PathInput | None = None,
        dpi: float = DEFAULT_DPI,
        image_format: Literal["png", "jpeg", "webp"] = "png",
        password: str | None = None,
        recursive: bool = True,
        on_error: Literal["raise", "skip"] = "raise",
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        paths = [file_path] if isinstance(file_path, (str, Path)) else list(file_path)
        self.paths = [Path(p) for p in paths]
        self.image_dir = Path(image_dir) if image_dir is not None else None
        self.dpi = dpi
        self.image_format = image_format
        self.password = password
        self.recursive = recursive
        self.on_error = on_error

    def lazy_load(self) -> Iterator[Document]:
        """One `Document` per page, file by file; a bad file goes to ``on_error``."""
        files, errors = find_documents(self.paths, recursive=self.recursive)
        for error in errors:
            self._handle(error)
        for path in files:
            try:
                yield from self._load_file(path)
            except IngestError as error:
                self._handle(error)

    def _load_file(self, path: Path) -> Iterator[Document]:
        with open_document(path, dpi=self.dpi, password=self.password) as document:
            for page in document.iter_pages():
                yield self._document(page, document.n_pages)

    def _document(self, page: Page, total_pages: int) -> Document:
        source = Path(page.source)
        metadata: dict[str, object] = {
            "source": str(source),
            "filename": source.name,
            "page_no": page.page_no,
            "page": page.page_no,  # LangChain loaders' usual key; the same as page_no
            "total_pages": total_pages,
            "doc_id": page.doc_id,
        }
        if self.image_dir is not None:
            metadata["image_path"] = str(self._save_image(page))
        return Document(id=page.page_id, page_content=page.text or "", metadata=metadata)

    def _save_image(self, page: Page) -> Path:
        assert self.image_dir is not None
        folder = self.image_dir / page.doc_id
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{page.page_no}.{self.image_format}"
        page.image.save(path)
        return path

    def _handle(self, error: IngestError) -> None:
        if self.on_error == "raise":
            raise error
        log.warning("skipped %s", error)
