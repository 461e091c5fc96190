"""Ingestion on the real PDFs in the shared data folder (ICDAR 2013, gov, edge cases)."""

from __future__ import annotations

import math
from pathlib import Path

import pypdfium2 as pdfium
import pytest

from vrag_compress.ingest import (
    CorruptPDFError,
    IngestError,
    find_documents,
    iter_pages,
    open_document,
)

LOW_DPI = 30
# Damaged upstream: the page-tree root (object 172) is missing and the last object is cut off.
# PDFium, pypdf and qpdf all fail to find a page; poppler "renders" four 1x1 blank pages.
BROKEN = "unreadablemetadata.pdf"


def pdfium_page_sizes(path: Path) -> list[tuple[float, float]]:
    pdf = pdfium.PdfDocument(path)
    try:
        return [pdf[i].get_size() for i in range(len(pdf))]
    finally:
        pdf.close()


def assert_ingests_like_pdfium(path: Path) -> int:
    sizes = pdfium_page_sizes(path)
    with open_document(path, dpi=LOW_DPI) as doc:
        assert doc.n_pages == len(sizes), path
        for page, (width, height) in zip(doc.iter_pages(), sizes, strict=True):
            expected = (math.ceil(width * LOW_DPI / 72), math.ceil(height * LOW_DPI / 72))
            assert page.size == expected and page.image.mode == "RGB", (path, page.page_no)
    return len(sizes)


@pytest.mark.slow
def test_all_icdar_files_ingest_with_the_right_page_counts(shared_data):
    files, errors = find_documents([shared_data / "pdfs" / "icdar2013"])
    assert errors == [] and len(files) == 67
    assert sum(assert_ingests_like_pdfium(path) for path in files) == 238


@pytest.mark.slow
def test_gov_and_edge_files_ingest(shared_data):
    files, errors = find_documents([shared_data / "pdfs" / "gov", shared_data / "pdfs" / "edge"])
    assert errors == [] and len(files) == 12
    counts = {p.name: assert_ingests_like_pdfium(p) for p in files if p.name != BROKEN}
    assert counts["multi_page.pdf"] == 5 and counts["federal-register-2020-17221.pdf"] == 15
    assert counts["WARN-Report-for-7-1-2015-to-03-25-2016.pdf"] == 16


def test_the_damaged_edge_file_is_a_typed_error(shared_data):
    path = shared_data / "pdfs" / "edge" / BROKEN
    with pytest.raises(pdfium.PdfiumError):
        pdfium.PdfDocument(path)  # the reference reader cannot open it either
    with pytest.raises(CorruptPDFError) as info:
        open_document(path)
    assert info.value.path == path and BROKEN in str(info.value)


def test_batch_over_edge_folder_yields_good_pages_and_reports_the_damaged_file(shared_data):
    errors: list[IngestError] = []
    pages = list(iter_pages([shared_data / "pdfs" / "edge"], dpi=LOW_DPI, errors=errors))
    assert len(pages) == 1 + 1 + 1 + 5 + 1
    assert [(type(e), e.path.name) for e in errors] == [(CorruptPDFError, BROKEN)]


def test_text_layer_present_only_in_born_digital_files(shared_data):
    pdfs = shared_data / "pdfs"
    with open_document(pdfs / "edge" / "ocr_test.pdf", dpi=LOW_DPI) as scanned:
        assert scanned.page(1).text is None
    with open_document(pdfs / "edge" / "google-doc-document.pdf", dpi=LOW_DPI) as digital:
        text = digital.page(1).text
    assert text is not None and "Beautiful is better than ugly." in text
    assert "\r" not in text and "  " not in text
    with open_document(pdfs / "gov" / "federal-register-2020-17221.pdf", dpi=LOW_DPI) as doc:
        assert "FEDERAL REGISTER" in doc.page(1).text


@pytest.mark.slow
def test_pdf2image_matches_pypdfium2_page_sizes(shared_data):
    pdfs = shared_data / "pdfs"
    files = sorted((pdfs / "gov").glob("*.pdf")) + [pdfs / "edge" / "multi_page.pdf"]
    files += [pdfs / "icdar2013" / "eu-001.pdf", pdfs / "icdar2013" / "us-001.pdf"]
    for path in files:  # landscape, rotated (senate-expenditures), odd sizes
        with (
            open_document(path, dpi=40) as a,
            open_document(path, dpi=40, renderer="pdf2image") as b,
        ):
            pages = min(a.n_pages, 2)
            for page_no in range(1, pages + 1):
                pa, pb = a.page(page_no), b.page(page_no)
                assert abs(pa.width - pb.width) <= 1 and abs(pa.height - pb.height) <= 1, path


def test_doc_ids_are_stable_and_distinct(shared_data, tmp_path):
    files, _ = find_documents([shared_data / "pdfs"])
    files = [f for f in files if f.name != BROKEN]
    ids = []
    for path in files:
        with open_document(path, text=False) as first, open_document(path, text=False) as second:
            assert first.doc_id == second.doc_id
            ids.append(first.doc_id)
    assert len(set(ids)) == len(files)
    copy = tmp_path / "copy.pdf"
    copy.write_bytes(files[0].read_bytes())
    with open_document(copy) as doc:
        assert doc.doc_id == ids[0]


def test_truncated_real_pdf_that_pdfium_would_still_open(shared_data, tmp_path):
    whole = (shared_data / "pdfs" / "gov" / "federal-register-2020-17221.pdf").read_bytes()
    path = tmp_path / "cut.pdf"
    path.write_bytes(whole[: int(len(whole) * 0.9)])
    assert len(pdfium.PdfDocument(path)) == 15  # PDFium silently repairs what is left
    with pytest.raises(CorruptPDFError, match="looks truncated"):
        open_document(path)
