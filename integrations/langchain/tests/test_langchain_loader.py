"""PDFPageLoader on the real government PDFs."""

from __future__ import annotations

from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image
from vrag_compress.ingest import CorruptPDFError

from langchain_vrag_compress import PDFPageLoader


def _n_pages(path: Path) -> int:
    pdf = pdfium.PdfDocument(path)
    try:
        return len(pdf)
    finally:
        pdf.close()


def test_one_document_per_page_of_every_gov_pdf(shared_data: Path) -> None:
    folder = shared_data / "pdfs" / "gov"
    pdfs = sorted(folder.glob("*.pdf"))
    docs = PDFPageLoader(folder, dpi=20).load()
    assert len(docs) == sum(_n_pages(p) for p in pdfs)
    for pdf in pdfs:
        pages = [d for d in docs if d.metadata["source"] == str(pdf)]
        assert [d.metadata["page"] for d in pages] == list(range(1, _n_pages(pdf) + 1))
        assert all(d.metadata["total_pages"] == len(pages) for d in pages)
        assert all(d.id == f"{d.metadata['doc_id']}:{d.metadata['page']}" for d in pages)


def test_text_layer_is_the_page_content(shared_data: Path) -> None:
    pdf = shared_data / "pdfs" / "gov" / "federal-register-2020-17221.pdf"
    first = next(PDFPageLoader(pdf, dpi=20).lazy_load())
    assert "Federal Register" in first.page_content
    assert first.metadata["filename"] == pdf.name and "image_path" not in first.metadata


def test_image_dir_saves_page_images(shared_data: Path, tmp_path: Path) -> None:
    pdf = shared_data / "pdfs" / "gov" / "nics-background-checks-2015-11.pdf"
    docs = PDFPageLoader(pdf, image_dir=tmp_path, dpi=30).load()
    for doc in docs:
        with Image.open(doc.metadata["image_path"]) as image:
            assert image.width > 100 and image.height > 100


def test_bad_file_raises_or_is_skipped(shared_data: Path, tmp_path: Path) -> None:
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(b"%PDF-1.4\nnot really a pdf\n")
    good = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
    with pytest.raises(CorruptPDFError, match="broken.pdf"):
        PDFPageLoader([bad, good], dpi=20).load()
    docs = PDFPageLoader([bad, good], dpi=20, on_error="skip").load()
    assert {d.metadata["filename"] for d in docs} == {good.name}


async def test_async_load(shared_data: Path) -> None:
    pdf = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
    docs = [d async for d in PDFPageLoader(pdf, dpi=20).alazy_load()]
    assert [d.metadata["page"] for d in docs] == list(range(1, _n_pages(pdf) + 1))
