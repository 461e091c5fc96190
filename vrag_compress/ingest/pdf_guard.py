"""How many bytes a PDF page decodes to, counted before PDFium loads it.

PDFium inflates a page's content streams, forms, fonts and images in full when it loads the page,
so a 1 MB "flate bomb" can take gigabytes. Here pypdf walks the objects one page uses and counts
the bytes their streams decode to (plus the declared size of every image, inline ones included),
in small chunks and stopping at a budget, so a hostile page is refused before PDFium sees it while
the count itself takes almost no memory.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_CHUNK = 1 << 16
# Image XObjects decode to their declared width x height, at most 4 bytes per pixel.
_IMAGE_BYTES_PER_PIXEL = 4
# Keys that lead away from the page (other pages, outlines, actions, parents) or to data PDFium does
# not decode to draw the page.
_SKIP_KEYS = frozenset(
    {
        "/Parent",
        "/P",
        "/Pg",
        "/Dest",
        "/D",
        "/A",
        "/AA",
        "/Prev",
        "/Next",
        "/First",
        "/Last",
        "/Kids",
        "/Metadata",
        "/Thumb",
        "/B",
    }
)
_FLATE = frozenset({"/FlateDecode", "/Fl"})
_ASCII = frozenset({"/ASCIIHexDecode", "/AHx", "/ASCII85Decode", "/A85"})
# A page whose object graph is larger than this is counted only this far (time bound).
_MAX_OBJECTS = 200_000
# An inline image in a content stream: ``BI <header> ID <data> EI``; its header gives the size.
_INLINE_SIZE = re.compile(rb"/(W|Width|H|Height)\s+(\d+)")
_HEADER_MAX = 2048  # bytes between BI and ID
_HEADER_SPAN = _HEADER_MAX + 64  # bytes of the previous chunk kept to see a header split in two
_MAX_INLINE_CANDIDATES = 100_000  # "BI"s looked at per stream: a time bound on hostile streams


class PageBytes:
    """Decoded stream bytes per page of one PDF; None for a page pypdf cannot read."""

    def __init__(self, path: Path, password: str | None = None) -> None:
        with _quiet_pypdf():
            self._reader = _reader(path, password)
        self._sizes: dict[tuple[int, int], int] = {}

    def decoded_bytes(self, page_no: int, budget: int) -> int | None:
        """Bytes the streams of page ``page_no`` (1-based) decode to; counting stops past
        ``budget``, so the result is exact up to the budget and merely "over" beyond it."""
        if self._reader is None:
            return None
        try:
            with _quiet_pypdf():
                return self._walk(self._reader.pages[page_no - 1], budget)
        except Exception as exc:  # pypdf raises many types on damaged files; PDFium decides
            log.debug("page %d: streams cannot be counted (%s)", page_no, exc)
            return None

    def _walk(self, page: Any, budget: int) -> int:
        from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, StreamObject

        total, visited = 0, 0
        seen: set[tuple[int, int]] = set()
        stack: list[Any] = [page]
        while stack and total <= budget and visited < _MAX_OBJECTS:
            obj, key = stack.pop(), None
            visited += 1
            if isinstance(obj, IndirectObject):
                key = (obj.idnum, obj.generation)
                if key in seen:
                    continue
                seen.add(key)
                obj = obj.get_object()
            if isinstance(obj, StreamObject):
                total += self._stream_size(key, obj, budget - total)
            if isinstance(obj, DictionaryObject):
                if obj is not page and obj.get("/Type") == "/Page":
                    continue
                stack.extend(v for k, v in obj.items() if k not in _SKIP_KEYS)
            elif isinstance(obj, ArrayObject):
                stack.extend(obj)
        return total

    def _stream_size(self, key: tuple[int, int] | None, stream: Any, budget: int) -> int:
        if key is not None and key in self._sizes:
            return self._sizes[key]
        size = stream_size(stream, budget)
        if key is not None:
            self._sizes[key] = size
        return size


def stream_size(stream: Any, budget: int) -> int:
    """Bytes one pypdf stream decodes to (images: their declared pixel buffer)."""
    if stream.get("/Subtype") == "/Image":
        width, height = _int(stream.get("/Width")), _int(stream.get("/Height"))
        return width * height * _IMAGE_BYTES_PER_PIXEL
    filters = stream.get("/Filter")
    names = [str(f) for f in filters] if isinstance(filters, list) else [str(filters or "")]
    names = [n for n in names if n]
    raw = bytes(getattr(stream, "_data", b"") or b"")
    chunks: Iterable[bytes] = [raw]
    for position, name in enumerate(names):
        if name in _FLATE:
            chunks = _inflate(chunks)
        elif name in _ASCII and position == 0:
            continue  # ASCII armour decodes to less than its input
        else:  # LZW, RunLength and the rest: pypdf decodes them under its own output limits
            return _decoded_by_pypdf(stream, budget)
    total, tail, candidates = 0, b"", [_MAX_INLINE_CANDIDATES]
    for chunk in chunks:
        window = tail + chunk
        total += len(chunk) + _inline_image_bytes(window, len(tail), candidates)
        tail = window[-_HEADER_SPAN:]
        if total > budget:
            break
    return total


def _inline_image_bytes(window: bytes, seen: int, candidates: list[int]) -> int:
    """Declared pixel buffers of the inline images whose header ends past ``seen`` (the part of
    ``window`` already scanned with the previous chunk); ``candidates`` is the scan allowance
    left for this stream."""
    total, pos = 0, 0
    while candidates[0] > 0:
        start = window.find(b"BI", pos)
        if start < 0:
            break
        candidates[0] -= 1
        end = window.find(b"ID", start + 2, start + 2 + _HEADER_MAX)
        if end < 0:
            pos = start + 2
            continue
        pos = end + 2
        if end + 2 > seen:
            size = {k[:1]: int(v) for k, v in _INLINE_SIZE.findall(window[start + 2 : end])}
            total += size.get(b"W", 0) * size.get(b"H", 0) * _IMAGE_BYTES_PER_PIXEL
    return total


def _inflate(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """zlib output in chunks of at most 64 KiB, whatever the compression ratio."""
    inflater = zlib.decompressobj()
    try:
        for chunk in chunks:
            data = chunk
            while data and not inflater.eof:
                yield inflater.decompress(data, _CHUNK)
                data = inflater.unconsumed_tail
        yield inflater.flush()
    except zlib.error:  # damaged data: PDFium stops decoding there too
        return


def _decoded_by_pypdf(stream: Any, budget: int) -> int:
    from pypdf.errors import LimitReachedError

    try:
        return len(stream.get_data())
    except LimitReachedError:
        return budget + 1
    except Exception:  # undecodable: PDFium will not inflate it either
        return 0


@contextmanager
def _quiet_pypdf() -> Iterator[None]:
    """pypdf logs every repair it makes; PDFium, not pypdf, renders the file, so they are noise."""
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _reader(path: Path, password: str | None) -> Any:
    try:
        from pypdf import PdfReader

        reader = PdfReader(path, strict=False)
        if reader.is_encrypted:
            reader.decrypt(password or "")
        return reader
    except Exception as exc:  # PDFium may still open what pypdf cannot; then pages go unchecked
        log.debug("%s: pypdf cannot read it, streams are not counted (%s)", path, exc)
        return None
