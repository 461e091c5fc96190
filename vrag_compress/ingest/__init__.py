"""The first pipeline stage: files on disk -> pages (image + text layer), and what a page keeps.

`documents` opens files and streams their pages one at a time, from the parts below it: `files`
(which suffixes are read, printable file names), `discovery` (walking folders), `errors` (one
type per reason a file is refused), `render` (render options, page memory limits), `pages` (the
page and document model), `pdf` and `images` (one document type each). The names below come
from them, the render defaults from `defaults`. `pdf_guard` refuses decompression bombs before a
PDF page loads; `office` converts Word, slide and spreadsheet files to PDF with LibreOffice;
`ocr` reads the text of pages without a text layer; `page_assets` stores page images and patch
layouts in the index.
"""

from vrag_compress.defaults import DEFAULT_DPI, DEFAULT_RENDERER, RENDERERS
from vrag_compress.ingest.discovery import (
    find_documents,
    iter_documents,
)
from vrag_compress.ingest.documents import (
    DOC_ID_LENGTH,
    content_hash,
    iter_pages,
    open_document,
)
from vrag_compress.ingest.errors import (
    CorruptImageError,
    CorruptPDFError,
    EmptyDocumentError,
    EncryptedPDFError,
    ImageTooLargeError,
    IngestError,
    OfficeConversionError,
    OfficeUnavailableError,
    PageMemoryError,
    PageShapeError,
    RendererUnavailableError,
    UnreadablePathError,
    UnsupportedFileError,
)
from vrag_compress.ingest.files import (
    IMAGE_SUFFIXES,
    OFFICE_SUFFIXES,
    PDF_SUFFIXES,
    SUPPORTED_SUFFIXES,
    display_path,
    source_path,
)
from vrag_compress.ingest.images import (
    ImageDocument,
    to_rgb,
)
from vrag_compress.ingest.pages import (
    Document,
    Page,
    document_title,
    page_id,
    with_title,
)
from vrag_compress.ingest.pdf import (
    PdfDocument,
    normalise_text,
)
from vrag_compress.ingest.render import (
    BYTES_PER_RENDERED_PIXEL,
    DEFAULT_MAX_PIXELS,
    DEFAULT_MEMORY_LIMIT,
    MAX_ASPECT_RATIO,
    MEMORY_LIMIT_ENV,
    STREAM_SHARE,
    RenderOptions,
    default_memory_limit,
    fit_scale,
    render_pixel_cap,
)

__all__ = [
    "BYTES_PER_RENDERED_PIXEL",
    "DEFAULT_DPI",
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_RENDERER",
    "DOC_ID_LENGTH",
    "IMAGE_SUFFIXES",
    "MAX_ASPECT_RATIO",
    "MEMORY_LIMIT_ENV",
    "OFFICE_SUFFIXES",
    "PDF_SUFFIXES",
    "RENDERERS",
    "STREAM_SHARE",
    "SUPPORTED_SUFFIXES",
    "CorruptImageError",
    "CorruptPDFError",
    "Document",
    "EmptyDocumentError",
    "EncryptedPDFError",
    "ImageDocument",
    "ImageTooLargeError",
    "IngestError",
    "OfficeConversionError",
    "OfficeUnavailableError",
    "Page",
    "PageMemoryError",
    "PageShapeError",
    "PdfDocument",
    "RenderOptions",
    "RendererUnavailableError",
    "UnreadablePathError",
    "UnsupportedFileError",
    "content_hash",
    "default_memory_limit",
    "display_path",
    "document_title",
    "find_documents",
    "fit_scale",
    "iter_documents",
    "iter_pages",
    "normalise_text",
    "open_document",
    "page_id",
    "render_pixel_cap",
    "source_path",
    "to_rgb",
    "with_title",
]
