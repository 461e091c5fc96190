"""The page model: a rendered `Page`, its id and title, and the `Document` every file type opens
as (its pages rendered lazily, one at a time)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from PIL import Image

from vrag_compress.ingest.errors import PageShapeError
from vrag_compress.ingest.render import MAX_ASPECT_RATIO


@dataclass(eq=False)
class Page:
    """One rendered page; ``page_no`` is 1-based, ``dpi`` the effective render DPI (PDFs only)."""

    doc_id: str
    page_no: int
    image: Image.Image
    text: str | None
    source: Path
    dpi: float | None = None
    title: str | None = None
    """The document's name (`document_title`). Text encoders read it ahead of the page text, so
    table pages and pages without a heading are found by what their document is called."""

    @property
    def width(self) -> int:
        """Image width in pixels."""
        return self.image.width

    @property
    def height(self) -> int:
        """Image height in pixels."""
        return self.image.height

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` in pixels."""
        return self.image.size

    @property
    def key(self) -> tuple[str, int]:
        """The page's identity in an index: ``(doc_id, page_no)``."""
        return (self.doc_id, self.page_no)

    @property
    def page_id(self) -> str:
        """The page's default id in an index (and in the framework adapters)."""
        return page_id(self.doc_id, self.page_no)


def page_id(doc_id: str, page_no: int) -> str:
    """The default id of page ``page_no`` of document ``doc_id``: ``<doc_id>:<page_no>``."""
    return f"{doc_id}:{page_no}"


def document_title(source: Path, metadata_title: str | None = None) -> str:
    """What a document is called: its PDF Title when that reads as words (not an empty field or
    a file name such as ``10811.exe``), then its file name with separators as spaces
    (``nics-background-checks-2015-11.pdf`` -> ``nics background checks 2015 11``)."""
    name = " ".join(part for part in re.split(r"[-_.\s]+", source.stem) if part)
    title = " ".join((metadata_title or "").split())
    reads_as_words = len(re.findall(r"[^\W\d_]{2,}", title)) >= 2
    file_like = re.search(r"\.[A-Za-z0-9]{2,4}$", title) is not None
    if reads_as_words and not file_like and title.lower() != name.lower():
        return f"{title}. {name}"
    return name


def with_title(title: str | None, text: str | None) -> str | None:
    """``text`` behind ``title`` on its own line; None or blank text stays as it is."""
    if not text or not text.strip() or not title:
        return text
    return f"{title}\n{text}"


class Document:
    """An opened, validated file whose pages render lazily, one at a time.

    Not thread-safe (PDFium is not): use one Document per thread.
    """

    kind: ClassVar[Literal["pdf", "image"]]

    def __init__(self, source: Path, doc_id: str, content_hash: str, n_pages: int) -> None:
        self.source = source
        self.doc_id = doc_id
        self.content_hash = content_hash
        self.n_pages = n_pages
        self.closed = False
        self.title = document_title(source)

    def page(self, page_no: int) -> Page:
        """Render one page (1-based)."""
        if not 1 <= page_no <= self.n_pages:
            raise IndexError(f"{self.source}: page {page_no} out of range 1..{self.n_pages}")
        if self.closed:
            raise ValueError(f"{self.source}: document is closed")
        return self._render(page_no)

    def iter_pages(self, start: int = 1) -> Iterator[Page]:
        """Yield pages ``start..n_pages`` one at a time; ``start`` resumes an interrupted run."""
        if not 1 <= start <= self.n_pages + 1:
            raise ValueError(f"{self.source}: start={start} out of range 1..{self.n_pages + 1}")
        for page_no in range(start, self.n_pages + 1):
            yield self.page(page_no)

    def close(self) -> None:
        """Release the file (further page reads raise); closing twice is a no-op."""
        if not self.closed:
            self.closed = True
            self._close()

    def __len__(self) -> int:
        return self.n_pages

    def __enter__(self) -> Document:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(doc_id={self.doc_id!r}, kind={self.kind!r}, "
            f"n_pages={self.n_pages}, source={str(self.source)!r})"
        )

    def _render(self, page_no: int) -> Page:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError


def check_aspect(path: Path, page_no: int, width: float, height: float, unit: str) -> None:
    """Refuse a page shape no page encoder takes (`MAX_ASPECT_RATIO`), before it is rendered;
    ``unit`` names the size's unit in the message ("pt" or "px")."""
    ratio = max(width, height) / max(min(width, height), 1e-9)
    if ratio > MAX_ASPECT_RATIO:
        reason = (
            f"page {page_no} is {width:g}x{height:g} {unit}, an aspect ratio of {ratio:,.0f}:1"
            f" (over {MAX_ASPECT_RATIO}:1)"
        )
        raise PageShapeError(path, reason)
