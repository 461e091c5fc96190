"""Stored page images: WebP at the documented effort (`defaults.WEBP_METHOD`), cut to the
index's longest side, close to the rendered page; other formats keep their own encoders."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pypdfium2
from PIL import Image

from vrag_compress.defaults import DEFAULT_IMAGE_MAX_SIDE, WEBP_METHOD
from vrag_compress.ingest.page_assets import PageAssets


def _rendered_page(shared_data: Path) -> Image.Image:
    pdf = pypdfium2.PdfDocument(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf")
    try:
        return pdf[0].render(scale=150 / 72).to_pil()
    finally:
        pdf.close()


def _psnr(a: Image.Image, b: Image.Image) -> float:
    error = np.asarray(a, dtype=np.float64) - np.asarray(b.convert("RGB"), dtype=np.float64)
    return float(10 * np.log10(255**2 / np.mean(error**2)))


def test_a_stored_webp_is_encoded_at_the_documented_effort(shared_data: Path, tmp_path: Path):
    page = _rendered_page(shared_data)
    stored = PageAssets(tmp_path).prepare(page)
    assert stored.size == page.size and stored.data is not None

    expected = page.convert("RGB")
    expected.thumbnail((DEFAULT_IMAGE_MAX_SIDE, DEFAULT_IMAGE_MAX_SIDE))
    buffer = io.BytesIO()
    expected.save(buffer, "WEBP", quality=80, method=WEBP_METHOD)
    assert stored.data == buffer.getvalue()  # libwebp is deterministic for one setting

    decoded = Image.open(io.BytesIO(stored.data))
    assert decoded.format == "WEBP" and max(decoded.size) == DEFAULT_IMAGE_MAX_SIDE
    assert _psnr(expected, decoded) > 38  # a readable page, not a smudge


def test_jpeg_and_png_pages_are_stored_without_the_webp_setting(shared_data: Path, tmp_path: Path):
    page = _rendered_page(shared_data)
    for image_format, pil_format in (("jpeg", "JPEG"), ("png", "PNG")):
        stored = PageAssets(tmp_path, format=image_format, max_side=400).prepare(page)
        assert stored.data is not None
        decoded = Image.open(io.BytesIO(stored.data))
        assert decoded.format == pil_format and max(decoded.size) == 400
