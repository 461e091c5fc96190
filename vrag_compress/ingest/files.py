"""Which files become pages and how they are named: the supported suffixes, file names as text
that is safe to print and store, and what a file's first bytes look like (for error messages)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from vrag_compress.ingest import office

PDF_SUFFIXES = frozenset({".pdf"})
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp"})
# Word, slide and spreadsheet files: LibreOffice converts them to PDF first (`office`).
OFFICE_SUFFIXES = office.OFFICE_SUFFIXES
SUPPORTED_SUFFIXES = PDF_SUFFIXES | IMAGE_SUFFIXES | OFFICE_SUFFIXES
# Readers such as Acrobat accept the PDF header and the %%EOF marker within 1 KiB of the file ends.
_MARKER_WINDOW = 1024
SUPPORTED_TEXT = " ".join(sorted(SUPPORTED_SUFFIXES))
_SIGNATURES = (
    (b"%PDF-", "a PDF"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"PK\x03\x04", "a ZIP archive (e.g. .docx/.xlsx/.pptx)"),
    (b"GIF8", "a GIF image"),
    (b"\xd0\xcf\x11\xe0", "an old Office file (.doc/.xls)"),
)


def display_path(path: str | Path) -> str:
    r"""``path`` as text that is safe to print, log and store in a database: bytes of a file name
    that are not valid UTF-8 (an old Latin-1 name, say) appear as ``\xNN`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def source_path(text: str) -> Path:
    r"""The file a :func:`display_path` text names: the text itself when such a file exists, else
    with its ``\xNN`` escapes turned back into the raw bytes of the file name."""
    path = Path(text)
    if path.exists() or "\\x" not in text:
        return path
    raw = re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m[1], 16)]), text.encode("utf-8"))
    return Path(os.fsdecode(raw))


def read_head(path: Path, size: int = _MARKER_WINDOW) -> bytes:
    """The file's first ``size`` bytes (empty when it cannot be read): what `sniff` looks at."""
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


def read_tail(path: Path, size: int = _MARKER_WINDOW) -> bytes:
    """The file's last ``size`` bytes, where a complete PDF has its %%EOF marker."""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        return handle.read()


def sniff(head: bytes) -> str:
    """A hint for error messages: what the bytes look like."""
    for signature, name in _SIGNATURES:
        if head.startswith(signature):
            return f"; the content looks like {name}"
    if head[:8] == b"RIFF" or head[8:12] == b"WEBP":
        return "; the content looks like a WebP image"
    if not head:
        return "; the file is empty"
    if b"\x00" not in head[:512]:
        return "; the content looks like plain text"
    return ""
