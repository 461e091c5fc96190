"""Search hits as LlamaIndex `ImageNode`s, with the query-time fields a search adds.

A page written by `VragVectorStore` comes back as the node that was added; a page indexed by
`VisualIndex.add` as a fresh page node (`llama_index.readers.vrag_compress.nodes`). Text and
hybrid searches add `search_components`; every query attaches the stored page image.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from llama_index.core.schema import BaseNode, ImageNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node
from vrag_compress import Hit

from llama_index.readers.vrag_compress.nodes import (
    new_page_node,
    set_image_path,
    set_inline_image,
)

log = logging.getLogger(__name__)

ImageMode = Literal["path", "base64", "none"]
IMAGE_MODES = ("path", "base64", "none")


def check_image_mode(mode: str) -> ImageMode:
    if mode not in IMAGE_MODES:
        raise ValueError(f"image_mode must be one of {IMAGE_MODES}, got {mode!r}")
    return mode  # type: ignore[return-value]


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
