"""Pages as LlamaIndex `ImageNode`s: the node every vrag-compress LlamaIndex package speaks.

One page is one `ImageNode`: the page image (a file path, or base64 PNG when no file exists),
the page text as its text (a rendered page's PDF text layer; for a page indexed by
`VisualIndex.add`, its text layer or OCR text, see `vrag_compress.ingest.ocr`), and citation
metadata (`doc_id`, `page_no`, `source`, `filename`).
The node id is the page id `<doc_id>:<page_no>`, so a node and its stored page share one identity.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.schema import ImageNode, NodeRelationship, RelatedNodeInfo
from PIL import Image
from vrag_compress import Page, image_base64, page_id

_MIMETYPES = {
    ".png": "image/png",
    ".webp": "image/webp",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".bmp": "image/bmp",
    ".gif": "image/gif",
}
# bookkeeping keys that help nobody answer a question
_HIDDEN_KEYS = [
    "n_tokens",
    "page_id",
    "failed_pages",
    "_node_content",
    "_node_type",
    "document_id",
    "ref_doc_id",
    "content_hash",
    "file_path",
    "file_name",
]


def mimetype(path: str | Path) -> str | None:
    return _MIMETYPES.get(Path(path).suffix.lower())


def encode_png(image: Image.Image) -> str:
    """Base64 PNG, the form `ImageNode.image` holds inline."""
    return image_base64(image, "png")[0]


def page_metadata(doc_id: str, page_no: int, source: str | None) -> dict[str, Any]:
    """Citation metadata every page node carries."""
    return {
        "doc_id": doc_id,
        "page_no": page_no,
        "page_label": str(page_no),
        "source": source,
        "filename": Path(source).name if source else None,
    }


def new_page_node(
    doc_id: str,
    page_no: int,
    *,
    text: str | None,
    source: str | None,
    ref_doc_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> ImageNode:
    """An `ImageNode` for one page, without its image yet."""
    node = ImageNode(
        id_=page_id(doc_id, page_no),
        text=text or "",
        metadata={**(metadata or {}), **page_metadata(doc_id, page_no, source)},
        excluded_llm_metadata_keys=list(_HIDDEN_KEYS),
        excluded_embed_metadata_keys=list(_HIDDEN_KEYS),
    )
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=ref_doc_id or doc_id)
    return node


def page_to_node(
    page: Page,
    *,
    ref_doc_id: str | None = None,
    image_dir: Path | None = None,
    metadata: dict[str, Any] | None = None,
) -> ImageNode:
    """A rendered page as an `ImageNode`: PNG under `image_dir`, else inline base64."""
    node = new_page_node(
        page.doc_id,
        page.page_no,
        text=page.text,
        source=str(page.source),
        ref_doc_id=ref_doc_id,
        metadata=metadata,
    )
    if image_dir is None:
        set_inline_image(node, page.image)
    else:
        path = Path(image_dir) / page.doc_id / f"{page.page_no}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        page.image.convert("RGB").save(path, format="PNG")
        set_image_path(node, path)
    return node


def set_image_path(node: ImageNode, path: str | Path) -> None:
    node.image = None
    node.image_path = str(path)
    node.image_mimetype = mimetype(path)


def set_inline_image(node: ImageNode, image: Image.Image) -> None:
    node.image = encode_png(image)
    node.image_path = None
    node.image_mimetype = "image/png"


def node_image(node: ImageNode) -> Image.Image:
    """The node's image as an RGB PIL image; a clear error when the node has none."""
    try:
        with Image.open(node.resolve_image()) as image:
            return image.convert("RGB")
    except ValueError as error:
        raise ValueError(
            f"node {node.node_id!r} has no image (set image, image_path or image_url; "
            "PageImageNodeParser makes one ImageNode per page)"
        ) from error
    except OSError as error:
        raise ValueError(f"node {node.node_id!r}: cannot read its image: {error}") from error
