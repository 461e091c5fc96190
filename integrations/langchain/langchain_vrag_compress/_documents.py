"""Index hits and stored pages as LangChain `Document`s, and page images as base64.

Two kinds of entries live in a `VisualIndex` reached through LangChain: *pages* (a page image
encoded by the Col* model; `page_content` is the page text, its text layer or OCR text, see
`vrag_compress.ocr`) and *texts* (added with `add_texts`/`add_documents`; their metadata must
round-trip exactly, so a reserved key marks them and is stripped again on the way out).
"""

from __future__ import annotations

import base64
import hashlib
import io
from typing import Any

from langchain_core.documents import Document
from PIL import Image
from vrag_compress import Hit, image_base64

KIND_KEY = "_vrag_kind"
TEXT_KIND = "text"


def entry_doc_id(entry_id: str) -> str:
    """A file-system-safe document id for a LangChain id (page images are stored under it)."""
    return "lc-" + hashlib.sha256(entry_id.encode()).hexdigest()[:16]


def encode_image(
    image: Image.Image, image_format: str = "jpeg", max_side: int | None = 1024
) -> tuple[str, str]:
    """``(base64, mime_type)`` of a page image, downsized so its longer side is ``max_side``."""
    return image_base64(image, image_format, max_side)


def hit_to_document(
    hit: Hit,
    *,
    with_score: bool = True,
    image_base64: bool = False,
    image_format: str = "jpeg",
    image_max_side: int | None = 1024,
) -> Document:
    """A `Document` for one hit: texts come back as added; pages carry page, source and image."""
    metadata = dict(hit.metadata)
    if hit.components is not None:  # text / hybrid search: each side's rank and score
        metadata["search_components"] = hit.components
    if metadata.pop(KIND_KEY, None) == TEXT_KIND:
        if with_score:
            metadata["score"] = hit.score
        return Document(id=hit.page_id, page_content=hit.text or "", metadata=metadata)
    path = hit.image_path
    metadata.update(
        doc_id=hit.doc_id,
        page_no=hit.page_no,
        page=hit.page_no,  # LangChain loaders' usual key; the same number as page_no
        page_id=hit.page_id,
        source=hit.source,
        image_path=str(path) if path else None,
    )
    if hit.regions:  # where on the page the query matched (fractions of width and height)
        metadata["regions"] = [r.to_dict() for r in hit.regions]
    if with_score:
        metadata["score"] = hit.score
    if image_base64:
        data, mime = encode_image(hit.image, image_format, image_max_side)
        metadata.update(image_base64=data, image_mime_type=mime)
    return Document(id=hit.page_id, page_content=hit.text or "", metadata=metadata)


def page_image_base64(
    document: Document, image_format: str = "jpeg", max_side: int | None = 1024
) -> tuple[str, str] | None:
    """The page image of a retrieved or loaded `Document` as base64, or None for text entries."""
    metadata: dict[str, Any] = document.metadata
    if metadata.get("image_base64"):
        return metadata["image_base64"], metadata.get("image_mime_type", "image/jpeg")
    path = metadata.get("image_path")
    if not path:
        return None
    with Image.open(path) as image:
        return encode_image(image, image_format, max_side)


def region_crop_base64(
    document: Document, image_format: str = "jpeg", max_side: int | None = 1024
) -> tuple[str, str] | None:
    """The page's top matched region (``regions[0]`` in the metadata) cropped, as base64."""
    regions = document.metadata.get("regions") or []
    if not regions:
        return None
    metadata: dict[str, Any] = document.metadata
    if metadata.get("image_base64"):
        image = Image.open(io.BytesIO(base64.b64decode(metadata["image_base64"])))
    elif metadata.get("image_path"):
        image = Image.open(metadata["image_path"])
    else:
        return None
    with image:
        width, height = image.size
        box = regions[0]
        crop = image.crop(
            (
                int(box["x0"] * width),
                int(box["y0"] * height),
                max(int(box["x0"] * width) + 1, round(box["x1"] * width)),
                max(int(box["y0"] * height) + 1, round(box["y1"] * height)),
            )
        )
    return encode_image(crop, image_format, max_side)
