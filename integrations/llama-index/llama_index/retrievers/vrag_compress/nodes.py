"""Conversions between vrag pages / search hits and LlamaIndex `ImageNode`s.

One page is one `ImageNode`: the page image (a file path, or base64 PNG when no file exists),
the page text as its text (a rendered page's PDF text layer; for a page indexed by
`VisualIndex.add`, its text layer or OCR text, see `vrag_compress.ocr`), and citation metadata
(`doc_id`, `page_no`, `source`, `filename`).
The node id is the page id `<doc_id>:<page_no>`, so a node and its stored page share one identity.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from llama_index.core.schema import BaseNode, ImageNode, NodeRelationship, RelatedNodeInfo
from llama_index.core.vector_stores.utils import metadata_dict_to_node
from PIL import Image
from vrag_compress import Hit, Page, image_base64, page_id

log = logging.getLogger(__name__)

ImageMode = Literal["path", "base64", "none"]
IMAGE_MODES = ("path", "base64", "none")
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


def check_image_mode(mode: str) -> ImageMode:
    if mode not in IMAGE_MODES:
        raise ValueError(f"image_mode must be one of {IMAGE_MODES}, got {mode!r}")
    return mode  # type: ignore[return-value]


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


def hit_to_node(hit: Hit, image_mode: ImageMode = "path") -> ImageNode:
    """A search hit as an `ImageNode` with its page image attached.

    Pages written by `VragVectorStore` carry the original LlamaIndex node (`_node_content`), which
    is restored as it was given; pages indexed by `VisualIndex.add` get a fresh page node.
    """
    if "_node_content" in hit.metadata:
        node = metadata_dict_to_node(dict(hit.metadata), text=hit.text or "")
        if not isinstance(node, ImageNode):
            raise TypeError(f"page {hit.page_id!r} holds a {type(node).__name__}, not an ImageNode")
    else:
        extra = {k: v for k, v in hit.metadata.items() if k not in ("source", "filename")}
        node = new_page_node(
            hit.doc_id, hit.page_no, text=hit.text, source=hit.source, metadata=extra
        )
    if hit.components is not None:  # text / hybrid search: where each side ranked the page
        set_search_components(node, hit.components)
    attach_image(node, hit, image_mode)
    return node


def set_search_components(node: BaseNode, components: dict[str, Any]) -> None:
    """Where each side of a text / hybrid search ranked the page; hidden from the LLM."""
    node.metadata["search_components"] = components
    for keys in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
        if "search_components" not in keys:
            keys.append("search_components")


def keep_query_fields(
    found: Sequence[BaseNode], replacements: Sequence[BaseNode], *, images: bool
) -> list[BaseNode]:
    """`replacements` with the query-time fields of the `found` node of the same id put back.

    The replacements are the docstore copies `VectorStoreIndex` made when the nodes were added;
    the query-time fields are `search_components` and, when the store attaches images
    (`images`), the stored page image.
    """
    by_id = {node.node_id: node for node in found}
    for node in replacements:
        source = by_id.get(node.node_id)
        if source is None or node is source:
            continue
        if "search_components" in source.metadata:
            set_search_components(node, source.metadata["search_components"])
        if images and isinstance(node, ImageNode) and isinstance(source, ImageNode):
            node.image = source.image
            node.image_path = source.image_path
            node.image_mimetype = source.image_mimetype
    return list(replacements)


def attach_image(node: ImageNode, hit: Hit, mode: ImageMode) -> None:
    """Point the node at the stored page image, or inline it when no stored file exists."""
    if mode == "none":
        return
    path = hit.image_path
    if mode == "path" and path is not None and path.is_file():
        set_image_path(node, path)
        return
    try:
        set_inline_image(node, hit.image)
    except (FileNotFoundError, OSError, RuntimeError) as error:
        if node.image is None and node.image_path is None:
            log.warning("page %s: no image to attach (%s)", hit.page_id, error)


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
