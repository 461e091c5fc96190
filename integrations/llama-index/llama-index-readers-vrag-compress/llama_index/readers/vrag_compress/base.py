"""Files to LlamaIndex documents, and documents to one `ImageNode` per page.

`PDFPageReader` only opens and validates files (one `Document` per file, no rendering), so
loading is cheap and each file's id is its content hash, as in `VisualIndex`. Pages are rendered
once, by `PageImageNodeParser`, which makes it a regular transformation for `IngestionPipeline`
and `VectorStoreIndex.from_documents(..., transformations=[PageImageNodeParser()])`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.bridge.pydantic import Field
from llama_index.core.node_parser import NodeParser
from llama_index.core.readers.base import BaseReader
from llama_index.core.schema import BaseNode, Document, ImageDocument, ImageNode
from llama_index.core.utils import get_tqdm_iterable
from vrag_compress import DEFAULT_DPI, find_documents, open_document

from llama_index.readers.vrag_compress.nodes import (
    new_page_node,
    node_image,
    page_to_node,
    set_image_path,
    set_inline_image,
)

PATH_KEYS = ("file_path", "source")


class PDFPageReader(BaseReader):
    """PDFs, Office files (LibreOffice converts them) and page images to one `Document` per
    file, keyed by content hash.

    Bad files raise `vrag_compress.ingest.IngestError` subclasses that name the file and the fix.
    Use with `SimpleDirectoryReader(file_extractor={".pdf": PDFPageReader()})` or directly.
    """

    def __init__(self, *, password: str | None = None) -> None:
        self.password = password

    def load_data(
        self,
        file: str | Path | Sequence[str | Path],
        extra_info: dict[str, Any] | None = None,
        **_: Any,
    ) -> list[Document]:
        """Documents for a file, a folder (recursively) or a list of them."""
        paths, errors = find_documents(file)
        if errors:
            raise errors[0]
        return [self._load_one(path, extra_info or {}) for path in paths]

    def _load_one(self, path: Path, extra_info: dict[str, Any]) -> Document:
        with open_document(path, password=self.password) as document:
            metadata = {
                **extra_info,
                "file_path": str(path),
                "file_name": path.name,
                "doc_id": document.doc_id,
                "content_hash": document.content_hash,
                "n_pages": document.n_pages,
            }
        return Document(
            id_=document.doc_id,
            text="",
            metadata=metadata,
            excluded_llm_metadata_keys=["content_hash", "file_path"],
            excluded_embed_metadata_keys=["content_hash", "file_path"],
        )


class PageImageNodeParser(NodeParser):
    """Documents to one `ImageNode` per page: page image, `page_no`, `source`, text layer as text.

    A document that points at a PDF or image file (`file_path` or `source` metadata) is rendered
    page by page; a document that already holds an image (`ImageDocument`) becomes one page node.
    Node ids are `<document id>:<page_no>` and each node's source is its document, so deleting a
    ref doc id removes every page of that file. Images go to `image_dir` as PNG files, or inline
    (base64) when no folder is given.
    """

    image_dir: str | None = Field(
        default=None, description="Folder for rendered page PNGs; None keeps images inline."
    )
    dpi: float = Field(default=DEFAULT_DPI, description="PDF render resolution.")
    renderer: str = Field(default="pypdfium2", description="pypdfium2 or pdf2image.")
    password: str | None = Field(default=None, exclude=True)

    @classmethod
    def class_name(cls) -> str:
        return "PageImageNodeParser"

    def _parse_nodes(
        self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any
    ) -> list[BaseNode]:
        parsed: list[BaseNode] = []
        for node in get_tqdm_iterable(nodes, show_progress, "Rendering pages"):
            parsed.extend(self._pages(node))
        return parsed

    def _pages(self, node: BaseNode) -> list[ImageNode]:
        if _has_image(node):
            return [self._image_page(node)]
        path = next((node.metadata[k] for k in PATH_KEYS if node.metadata.get(k)), None)
        if path is None:
            raise ValueError(
                f"document {node.node_id!r} has neither an image nor a file path "
                f"(metadata {list(PATH_KEYS)}); load files with PDFPageReader"
            )
        return self._render(node, Path(path))

    def _render(self, node: BaseNode, path: Path) -> list[ImageNode]:
        image_dir = Path(self.image_dir) if self.image_dir else None
        document = open_document(
            path, doc_id=node.node_id, dpi=self.dpi, renderer=self.renderer, password=self.password
        )
        with document:
            return [
                page_to_node(page, ref_doc_id=node.node_id, image_dir=image_dir)
                for page in document.iter_pages()
            ]

    def _image_page(self, node: Any) -> ImageNode:
        """A document that already is one page image (e.g. an `ImageDocument`)."""
        page_no = int(node.metadata.get("page_no", 1))
        source = node.metadata.get("file_path") or node.metadata.get("source") or node.image_path
        page = new_page_node(
            node.node_id, page_no, text=node.text, source=source, ref_doc_id=node.node_id
        )
        if node.image_path and Path(node.image_path).is_file():
            set_image_path(page, node.image_path)
        else:
            set_inline_image(page, node_image(node))
        return page


def _has_image(node: BaseNode) -> bool:
    if not isinstance(node, (ImageNode, ImageDocument)):
        return False
    return bool(node.image or node.image_path or node.image_url)
