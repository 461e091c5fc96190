"""Page images and patch layouts kept in the index folder, beside the vector store.

Images are written before the catalog commit that references them (write to a temporary file,
then rename), so a crash can leave an unreferenced image behind but never a dangling reference.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vrag_compress.compress.base import CompressedPage
from vrag_compress.defaults import (
    DEFAULT_DPI,
    DEFAULT_IMAGE_FORMAT,
    DEFAULT_IMAGE_MAX_SIDE,
    DEFAULT_RENDERER,
    WEBP_METHOD,
)
from vrag_compress.durable import atomic_write, fsync_folder
from vrag_compress.encoders.base import PageEncoding
from vrag_compress.ingest.pages import page_id as default_page_id

log = logging.getLogger(__name__)

IMAGE_FORMATS = {"webp": "WEBP", "jpeg": "JPEG", "jpg": "JPEG", "png": "PNG"}
MIME_TYPES = {"WEBP": "image/webp", "JPEG": "image/jpeg", "PNG": "image/png"}
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class StoredImage:
    """A page image made ready to store: the encoded file (None when the index keeps no images)
    and the size of the rendered page it came from (the layouts' coordinates)."""

    data: bytes | None
    size: tuple[int, int]


class AssetPathError(ValueError):
    """A stored image reference that would lead outside the index folder's ``images/``."""


def safe_name(name: str) -> str:
    """A file-name-safe stand-in for an id: the id itself when harmless, else a short hash.

    Ids from adapters can be paths or URLs; they must never escape the index folder."""
    if _SAFE_NAME.fullmatch(name):
        return name
    return "h-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:20]


def page_stem(doc_id: str, page_no: int, page_id: str | None = None) -> str:
    """File stem of a page's image/layout: its number, or its own id when it has a custom one."""
    if page_id is None or page_id == default_page_id(doc_id, page_no):
        return str(page_no)
    return "id-" + safe_name(page_id)


def image_base64(
    image: Image.Image, image_format: str = "png", max_side: int | None = None
) -> tuple[str, str]:
    """``(base64 data, MIME type)`` of a page image, its longer side cut to ``max_side``.

    Chat models and framework nodes take page images inline in this form."""
    pil_format = IMAGE_FORMATS.get(image_format.lower())
    if pil_format is None:
        raise ValueError(
            f"image_format {image_format!r} is not supported; use one of {sorted(IMAGE_FORMATS)}"
        )
    copy = image.convert("RGB")
    if max_side:
        copy.thumbnail((max_side, max_side))
    buffer = io.BytesIO()
    copy.save(buffer, pil_format)
    return base64.b64encode(buffer.getvalue()).decode("ascii"), MIME_TYPES[pil_format]


def encode_image(image: Image.Image, pil_format: str = "WEBP", quality: int = 80) -> bytes:
    """``image`` as the bytes of a ``pil_format`` file; WebP at the effort `WEBP_METHOD`."""
    effort = {"method": WEBP_METHOD} if pil_format == "WEBP" else {}
    buffer = io.BytesIO()
    image.save(buffer, pil_format, quality=quality, **effort)
    return buffer.getvalue()


class PageAssets:
    """Reads and writes per-page files under ``images/`` and ``layouts/`` of an index folder."""

    def __init__(
        self,
        root: Path,
        store: bool = True,
        format: str = DEFAULT_IMAGE_FORMAT,
        max_side: int = DEFAULT_IMAGE_MAX_SIDE,
        quality: int = 80,
        dpi: int = DEFAULT_DPI,
        renderer: str = DEFAULT_RENDERER,
    ) -> None:
        if format.lower() not in IMAGE_FORMATS:
            raise ValueError(
                f"image format {format!r} not supported; use one of {sorted(IMAGE_FORMATS)}"
            )
        self.root = Path(root)
        self.store = store
        self.format = format.lower()
        self.max_side = max_side
        self.quality = quality
        self.dpi = dpi
        self.renderer = renderer
        self._unsynced: set[Path] = set()  # folders holding files renamed since `sync`

    def sync(self) -> None:
        """Make the files saved since the last call survive a power loss: one fsync per folder
        they went to, not one per file. The writer calls it before committing the pages that
        name them, so a committed row never points at an image a crash took back."""
        for folder in sorted(self._unsynced):
            fsync_folder(folder)
        self._unsynced.clear()

    def _write(self, path: Path, write: Any) -> None:
        atomic_write(path, write, sync_folder=False)
        self._unsynced.add(path.parent)

    def prepare(self, image: Image.Image) -> StoredImage:
        """The file this index keeps for a page image (downsized, encoded) and the page's size.

        Separate from writing it because encoding is the costly part: on Ray the encoder actors
        prepare it and the driver, the one writer, only writes the bytes."""
        if not self.store:
            return StoredImage(None, image.size)
        copy = image.convert("RGB")
        copy.thumbnail((self.max_side, self.max_side))
        return StoredImage(encode_image(copy, IMAGE_FORMATS[self.format], self.quality), image.size)

    def save(
        self,
        doc_id: str,
        page_no: int,
        image: StoredImage,
        page_id: str | None = None,
    ) -> str | None:
        """Write a prepared page image (`prepare`); returns its path relative to the index."""
        if not self.store or image.data is None:
            return None
        relative = (
            Path("images")
            / safe_name(doc_id)
            / f"{page_stem(doc_id, page_no, page_id)}.{self.format}"
        )
        data = image.data
        self._write(self.root / relative, lambda f: f.write(data))
        return relative.as_posix()

    def image_path(self, ref: str | None) -> Path | None:
        """The file of a stored image reference, which must lie inside ``images/`` of the index
        folder (links resolved): a crafted catalog cannot make us read or delete other files."""
        return self._confined(ref) if ref else None

    def _confined(self, ref: str) -> Path:
        path = self.root / ref
        try:
            images = (self.root / "images").resolve()
            inside = path.resolve().is_relative_to(images) and path.resolve() != images
        except (OSError, RuntimeError):  # a symlink loop
            inside = False
        if not inside:
            raise AssetPathError(
                f"{self.root}: image reference {ref!r} points outside the index's images/ folder "
                "(the catalog was edited?); refusing to use it"
            )
        return path

    def load(self, ref: str | None, source: str | None, page_no: int) -> Image.Image:
        """The stored image, or a fresh render of the source page when only references are kept."""
        if ref:
            path = self._confined(ref)
            if not path.exists():
                raise FileNotFoundError(f"{path}: stored page image is missing (run `vrag verify`)")
            with Image.open(path) as image:
                return image.convert("RGB")
        if not source:
            raise FileNotFoundError(f"page {page_no} has neither a stored image nor a source path")
        from vrag_compress.ingest.documents import open_document
        from vrag_compress.ingest.files import source_path

        with open_document(source_path(source), dpi=self.dpi, renderer=self.renderer) as document:
            return document.page(page_no).image

    def save_layout(
        self,
        doc_id: str,
        page_no: int,
        encoding: PageEncoding,
        compressed: CompressedPage,
        image_size: tuple[int, int],
        page_id: str | None = None,
    ) -> None:
        """Remember which patches a page kept or merged, so they can be drawn later."""
        if encoding.grid is None:
            return
        arrays: dict[str, Any] = {  # np.savez types **kwds loosely
            "grid": np.asarray(encoding.grid, dtype=np.int32),
            "image_size": np.asarray(image_size, dtype=np.int32),
        }
        if compressed.kept is not None:
            arrays["kept"] = np.asarray(compressed.kept, dtype=np.int32)
        if compressed.assignment is not None:
            arrays["assignment"] = np.asarray(compressed.assignment, dtype=np.int32)
        self._write(self._layout_path(doc_id, page_no, page_id), lambda f: np.savez(f, **arrays))

    def _layout_path(self, doc_id: str, page_no: int, page_id: str | None = None) -> Path:
        stem = page_stem(doc_id, page_no, page_id)
        return self.root / "layouts" / safe_name(doc_id) / f"{stem}.npz"

    def load_layout(
        self, doc_id: str, page_no: int, page_id: str | None = None
    ) -> dict[str, Any] | None:
        """The page's stored patch layout (grid and kept/assignment), or None without one."""
        path = self._layout_path(doc_id, page_no, page_id)
        if not path.exists():
            return None
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}

    def remove_page(
        self, doc_id: str, page_no: int, image_ref: str | None, page_id: str | None = None
    ) -> None:
        """Remove one page's stored image and layout (missing files are fine; a reference that
        leads outside the index folder is left alone with a warning)."""
        try:
            image = self.image_path(image_ref)
        except AssetPathError as error:
            log.warning("not deleting: %s", error)
            image = None
        for path in (image, self._layout_path(doc_id, page_no, page_id)):
            if path is not None:
                path.unlink(missing_ok=True)

    def remove_document(self, doc_id: str) -> None:
        """Delete a document's stored images and layouts."""
        for folder in ("images", "layouts"):
            shutil.rmtree(self.root / folder / safe_name(doc_id), ignore_errors=True)
