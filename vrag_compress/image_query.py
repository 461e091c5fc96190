"""A picture as the query: "find pages like this one", a photo of a form, a figure.

With a Col* model the image is encoded exactly as an indexed page is (the page path of the
encoder) and its vectors score the stored pages by MaxSim. A page holds about a thousand vectors
where a text query holds about twenty, so the query page is by default compressed with the
index's own compressor: the same kept share of tokens as the stored pages (docs/image_queries.md
has the measured effect on rank and latency). A text encoder (MiniLM) reads page text, not pixels:
the image's words are read by OCR (`vrag_compress.ingest.ocr`) and searched as text, and the
result says so (`ImageQuery.read_by == "ocr"`, `Hit.query_ocr`).

The image passes the same guards as an indexed file: a file that is not an image, an empty one
or one over the pixel limit raises `ImageQueryError` saying what and how to fix it.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

from vrag_compress.compress.base import Compressor
from vrag_compress.encoders.base import Encoder, ReadsPageText
from vrag_compress.ingest import (
    DEFAULT_MAX_PIXELS,
    MAX_ASPECT_RATIO,
    PDF_SUFFIXES,
    IngestError,
    open_document,
    to_rgb,
)
from vrag_compress.ingest.ocr import OcrError, PageOcr

QueryImage = str | os.PathLike[str] | Image.Image | bytes
"""What `VisualIndex.search(image=...)` takes: a file path, a PIL image or the file's bytes."""

UPLOAD_NAME = "the uploaded image"
"""How an image given as bytes is named in error messages."""


class ImageQueryError(ValueError):
    """The query image cannot be used: not an image, empty, too large, or no words to read."""


@dataclass(frozen=True)
class ImageQuery:
    """A query image made ready to search: vectors (``read_by="page"``) or OCR'd words
    (``read_by="ocr"``); ``source_vectors`` is how many vectors the page had before compression."""

    read_by: Literal["page", "ocr"]
    vectors: np.ndarray | None = None
    text: str | None = None
    compressed: bool = False
    source_vectors: int = 0

    def to_dict(self) -> dict[str, object]:
        """What the CLI's and the server's JSON report about the query image."""
        return {
            "read_by": self.read_by,
            "ocr_text": self.text,
            "compressed": self.compressed,
            "query_vectors": None if self.vectors is None else int(self.vectors.shape[0]),
            "source_vectors": self.source_vectors,
        }


def load_query_image(image: QueryImage, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """The query image as RGB, checked like an indexed image (type, size, shape)."""
    if isinstance(image, Image.Image):
        return _checked(image, "the query image", max_pixels)
    if isinstance(image, (bytes, bytearray, memoryview)):
        return _from_bytes(bytes(image), max_pixels)
    if isinstance(image, (str, os.PathLike)):
        return _from_path(Path(image), max_pixels)
    raise ImageQueryError(
        f"image must be a file path, a PIL image or the image file's bytes, not "
        f"{type(image).__name__}"
    )


def _from_path(path: Path, max_pixels: int) -> Image.Image:
    if path.suffix.lower() in PDF_SUFFIXES:
        raise ImageQueryError(
            f"{path}: a PDF is not an image query; save the page you want to search with as an "
            "image first (e.g. `vrag show INDEX DOCUMENT PAGE -o page.png`)"
        )
    try:
        with open_document(path, max_pixels=max_pixels) as document:
            page = document.page(1)
    except IngestError as error:
        raise ImageQueryError(str(error)) from error
    return page.image


def _from_bytes(data: bytes, max_pixels: int) -> Image.Image:
    if not data:
        raise ImageQueryError(f"{UPLOAD_NAME} is empty (0 bytes): send the image file's content")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            opened = Image.open(io.BytesIO(data))
        except UnidentifiedImageError:
            raise ImageQueryError(
                f"{UPLOAD_NAME} is not an image Pillow can read ({len(data):,} bytes starting "
                f"{data[:8]!r}): send a PNG, JPEG, TIFF or WebP file"
            ) from None
        except Image.DecompressionBombError as error:
            raise ImageQueryError(f"{UPLOAD_NAME} is too large: {error}") from None
        return _checked(opened, UPLOAD_NAME, max_pixels)


def _checked(image: Image.Image, name: str, max_pixels: int) -> Image.Image:
    """Size and shape checks before any pixel is decoded, then the RGB image."""
    width, height = image.size
    if width < 1 or height < 1:
        raise ImageQueryError(f"{name} is empty ({width}x{height} pixels)")
    if width * height > max_pixels:
        raise ImageQueryError(
            f"{name} is {width}x{height} = {width * height:,} pixels, over the limit of "
            f"{max_pixels:,}: downscale it"
        )
    if max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
        raise ImageQueryError(
            f"{name} is {width}x{height} pixels, longer and thinner than the "
            f"{MAX_ASPECT_RATIO}:1 page encoders accept: crop it"
        )
    try:
        image.load()
        return to_rgb(image)
    except (OSError, SyntaxError, ValueError, EOFError) as error:
        raise ImageQueryError(f"{name} cannot be decoded ({error}): re-export it") from None


def encode_query_image(
    image: Image.Image,
    encoder: Encoder,
    compressor: Compressor,
    *,
    compress: bool = True,
    ocr: PageOcr | None = None,
) -> ImageQuery:
    """Vectors of the image encoded as a page (compressed with ``compressor`` when
    ``compress``), or, for an encoder that reads page text, the words OCR finds on it."""
    if isinstance(encoder, ReadsPageText):
        return ImageQuery("ocr", text=read_words(image, ocr or PageOcr("always")))
    stats = compress and compressor.requires_stats
    (encoding,) = encoder.encode_pages([image], with_stats=stats)
    if encoding.n_tokens == 0:
        raise ImageQueryError("the model found no visual tokens in the query image")
    if not compress:
        return ImageQuery("page", vectors=encoding.vectors, source_vectors=encoding.n_tokens)
    (kept,) = compressor.compress_many([encoding])
    return ImageQuery(
        "page", vectors=kept.vectors, compressed=True, source_vectors=encoding.n_tokens
    )


def read_words(image: Image.Image, ocr: PageOcr) -> str:
    """The image's words by OCR; an error names what to install or why nothing was read."""
    try:
        engine = ocr.engine()
    except OcrError as error:
        raise ImageQueryError(
            f"the index's text encoder searches words, so an image query is read by OCR: {error}"
        ) from None
    if engine is None:  # "auto" without an engine installed
        raise ImageQueryError(
            "the index's text encoder searches words, so an image query is read by OCR, which "
            "is not installed: pip install 'vrag-compress[ocr]'"
        )
    found = ocr.page_text(image, None)
    if found.error:
        raise ImageQueryError(f"reading the query image's words failed: {found.error}")
    if not found.text or not found.text.strip():
        raise ImageQueryError(
            "OCR found no words in the query image; the index's text encoder searches words "
            "(a Col* index searches the image itself): give a text query instead"
        )
    return found.text
