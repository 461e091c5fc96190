"""What can go wrong with an input file: one `IngestError` type per reason, each naming the file,
the reason and the fix, so a bad file fails at the first stage with a message a user can act
on."""

from __future__ import annotations

from pathlib import Path

from vrag_compress.ingest import office
from vrag_compress.ingest.files import SUPPORTED_TEXT, display_path
from vrag_compress.ingest.render import MAX_ASPECT_RATIO, MEMORY_LIMIT_ENV


class IngestError(Exception):
    """A file that cannot become pages; ``str()`` reads ``"<path>: <reason> (<how to fix>)"``."""

    fix: str = "check the file"

    def __init__(self, path: str | Path, reason: str, fix: str | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.fix = fix or type(self).fix
        super().__init__(f"{display_path(self.path)}: {reason} ({self.fix})")

    def __reduce__(self):  # keep the error picklable across processes despite the custom __init__
        return (type(self), (self.path, self.reason, self.fix))


class EncryptedPDFError(IngestError):
    """The PDF is password-protected and no (or a wrong) password was given."""

    fix = "pass password=... to open it, or save an unencrypted copy"


class CorruptPDFError(IngestError):
    """The PDF (or one of its pages) cannot be parsed or rendered."""

    fix = "re-download or re-export the PDF; `qpdf --check FILE` shows the damage"


class CorruptImageError(IngestError):
    """The image file cannot be decoded."""

    fix = "re-download or re-export the image"


class EmptyDocumentError(IngestError):
    """The file has no pages."""

    fix = "the file has no pages; remove it from the input"


class UnsupportedFileError(IngestError):
    """Not a PDF or a supported image (by suffix and by content)."""

    fix = f"supported files: {SUPPORTED_TEXT}"


class OfficeConversionError(IngestError):
    """An Office file LibreOffice cannot turn into a PDF within the caps (damaged,
    password-protected, a zip bomb, too many pages, too slow)."""

    fix = "open it in its application and save a fresh copy, or export a PDF"


class OfficeUnavailableError(OfficeConversionError):
    """An Office file on a machine without LibreOffice."""

    fix = office.INSTALL_HINT


class ImageTooLargeError(IngestError):
    """An image with more pixels than ``max_pixels`` (a decompression bomb's shape)."""

    fix = "downscale the image, or raise max_pixels if you trust the file"


class UnreadablePathError(IngestError):
    """The path is missing, not a regular file, or not readable by this process."""

    fix = "check that the path exists, is a file and is readable by this user"


class PageMemoryError(IngestError):
    """A page whose streams would take more than its share of the page memory limit."""

    fix = (
        f"a decompression bomb? raise the page memory limit (memory_limit=, or {MEMORY_LIMIT_ENV})"
        " only if you trust the file"
    )


class PageShapeError(IngestError):
    """A page too long and thin for any encoder (aspect ratio above MAX_ASPECT_RATIO)."""

    fix = f"crop or split the page: page encoders accept aspect ratios up to {MAX_ASPECT_RATIO}:1"


class RendererUnavailableError(IngestError):
    """``renderer='pdf2image'`` without the pdf2image package or poppler's pdftoppm."""

    fix = (
        "pip install 'vrag-compress[pdf2image]' and apt-get install poppler-utils,"
        " or use renderer='pypdfium2'"
    )
