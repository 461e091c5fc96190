"""Ingestion on files the tests build: page streaming, conversions, and every bad-input case."""

from __future__ import annotations

import builtins
import errno
import hashlib
import logging
import math
import os
import pickle
import shutil
import struct
import warnings
import weakref
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image

from vrag_compress import ingest
from vrag_compress.ingest import (
    DEFAULT_MAX_PIXELS,
    SUPPORTED_SUFFIXES,
    CorruptImageError,
    CorruptPDFError,
    EmptyDocumentError,
    EncryptedPDFError,
    ImageTooLargeError,
    IngestError,
    RendererUnavailableError,
    RenderOptions,
    UnreadablePathError,
    UnsupportedFileError,
    content_hash,
    find_documents,
    iter_pages,
    open_document,
)

LETTER = (612, 792)


# --- file builders ------------------------------------------------------------------------------


def write_pdf(path: Path, pages: int | list[str], size: tuple[int, int] = LETTER) -> Path:
    """A minimal valid PDF (exact xref offsets) with one Helvetica line of text per page."""
    texts = pages if isinstance(pages, list) else [f"Page {n}" for n in range(1, pages + 1)]
    width, height = size
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(texts)))
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: f"<< /Type /Pages /Kids [{kids}] /Count {len(texts)} >>".encode(),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for i, text in enumerate(texts):
        stream = f"BT /F1 12 Tf 72 {height - 72} Td ({text}) Tj ET".encode()
        objects[4 + 2 * i] = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width} {height}] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>"
        ).encode()
        objects[5 + 2 * i] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    xref, total = len(out), len(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % total
    out += b"".join(b"%010d 00000 n \n" % offsets[n] for n in range(1, total))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (total, xref)
    path.write_bytes(bytes(out))
    return path


def write_encrypted_pdf(path: Path, source: Path, password: str) -> Path:
    import pypdf  # dev extra: a missing install must fail, not skip

    writer = pypdf.PdfWriter(clone_from=str(source))
    writer.encrypt(user_password=password, algorithm="RC4-128")  # RC4 needs no crypto library
    writer.write(str(path))
    return path


def write_png_header(path: Path, width: int, height: int) -> Path:
    """A PNG that claims a huge size in its header but carries almost no data (a bomb's shape)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = (
        chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")
    )
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body)
    return path


def write_image(path: Path, size=(40, 30), color=(200, 30, 30), **save) -> Path:
    Image.new("RGB", size, color).save(path, **save)
    return path


def rendered_size(points: tuple[float, float], dpi: float) -> tuple[int, int]:
    return tuple(math.ceil(p * dpi / 72) for p in points)


# --- PDFs ---------------------------------------------------------------------------------------


def test_pdf_pages_are_numbered_from_one_with_text_and_rgb_images(tmp_path):
    path = write_pdf(tmp_path / "a.pdf", ["First   page", "Second\tpage", "Third"])
    with open_document(path, dpi=36) as doc:
        assert (doc.kind, doc.n_pages, len(doc)) == ("pdf", 3, 3)
        pages = list(doc.iter_pages())
    assert [p.page_no for p in pages] == [1, 2, 3]
    assert [p.text for p in pages] == ["First page", "Second page", "Third"]
    for page in pages:
        assert page.image.mode == "RGB"
        assert page.size == (page.width, page.height) == rendered_size(LETTER, 36)
        assert page.source == path and page.doc_id == doc.doc_id and page.dpi == pytest.approx(36)
        assert page.key == (doc.doc_id, page.page_no)
    # the text line is drawn: the page is not blank
    assert np.asarray(pages[0].image).min() < 128


def test_text_layer_can_be_skipped(tmp_path):
    path = write_pdf(tmp_path / "a.pdf", ["Hello"])
    with open_document(path, dpi=20, text=False) as doc:
        assert doc.page(1).text is None


def test_render_options_pass_whole_and_equal_their_keyword_arguments(tmp_path):
    path = write_pdf(tmp_path / "a.pdf", ["Hello", "World"])
    render = RenderOptions(dpi=30, text=False)
    with open_document(path, render=render) as whole, open_document(path, dpi=30, text=False) as kw:
        assert whole.page(1).size == kw.page(1).size == rendered_size(LETTER, 30)
        assert whole.page(1).text is kw.page(1).text is None
    with open_document(path, render=render, dpi=20) as doc:  # a keyword overrides the object
        assert doc.page(2).size == rendered_size(LETTER, 20)
    pages = list(iter_pages([path], render=render))
    assert [(p.page_no, p.size, p.text) for p in pages] == [
        (n, rendered_size(LETTER, 30), None) for n in (1, 2)
    ]


def test_bad_render_options_fail_at_the_call_naming_the_option(tmp_path):
    path = write_pdf(tmp_path / "a.pdf", 1)
    with pytest.raises(TypeError, match="open_document.*unknown render option dpii: dpi, "):
        open_document(path, dpii=30)
    with pytest.raises(ValueError, match="dpi must be positive"):
        iter_pages([path], render=RenderOptions(dpi=0))  # before any file is opened
    with pytest.raises(ValueError, match="memory_limit must be positive"):
        open_document(path, memory_limit=0)


def test_normalise_text_is_light():
    raw = "  Title\r\n\r\n\r\n\r\nbody\u00a0 text\x00 here  \r\nnext  "
    assert ingest.normalise_text(raw) == "Title\n\nbody text here\nnext"
    assert ingest.normalise_text(" \r\n \t ") is None


def test_a_thousand_page_pdf_streams_one_page_at_a_time(tmp_path, monkeypatch):
    path = write_pdf(tmp_path / "long.pdf", 1000, size=(144, 144))
    renders = []
    real_render = pdfium.PdfPage.render

    def counting_render(self, *args, **kwargs):
        renders.append(1)
        return real_render(self, *args, **kwargs)

    monkeypatch.setattr(pdfium.PdfPage, "render", counting_render)
    with open_document(path, dpi=18) as doc:
        pages = doc.iter_pages()
        first = next(pages)
        assert first.page_no == 1 and len(renders) == 1  # nothing rendered ahead
        refs = [weakref.ref(first.image)]
        del first
        most_alive = 0
        for page in pages:
            assert page.text == f"Page {page.page_no}"
            refs.append(weakref.ref(page.image))
            most_alive = max(most_alive, sum(ref() is not None for ref in refs))
    assert len(refs) == 1000 and len(renders) == 1000
    assert most_alive <= 2  # earlier pages were freed as soon as the caller let go


def test_iter_pages_start_resumes_and_page_gives_random_access(tmp_path):
    path = write_pdf(tmp_path / "a.pdf", 5)
    with open_document(path, dpi=10) as doc:
        assert [p.page_no for p in doc.iter_pages(start=4)] == [4, 5]
        assert list(doc.iter_pages(start=6)) == []
        assert doc.page(3).text == "Page 3"
        with pytest.raises(ValueError, match="start=0"):
            list(doc.iter_pages(start=0))
        with pytest.raises(IndexError):
            doc.page(6)
    with pytest.raises(ValueError, match="closed"):
        doc.page(1)


def test_doc_id_comes_from_the_bytes_unless_given(tmp_path):
    path = write_pdf(tmp_path / "a.pdf", 2)
    copy = tmp_path / "sub" / "renamed.pdf"
    copy.parent.mkdir()
    shutil.copy(path, copy)
    other = write_pdf(tmp_path / "b.pdf", 3)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert content_hash(path) == digest
    with open_document(path) as a, open_document(copy) as b, open_document(other) as c:
        assert a.doc_id == b.doc_id == digest[:16] and a.content_hash == digest
        assert c.doc_id != a.doc_id
    with open_document(path, doc_id="report-2024") as doc:
        assert doc.page(1).doc_id == "report-2024"
    with pytest.raises(ValueError, match="doc_id"):
        open_document(path, doc_id="  ")


def test_poster_page_is_scaled_down_to_the_pixel_limit(tmp_path, caplog):
    path = write_pdf(tmp_path / "poster.pdf", ["Poster"], size=(5000, 3000))
    limit = 200_000
    with caplog.at_level(logging.WARNING, logger="vrag_compress.ingest"):
        with open_document(path, dpi=150, max_pixels=limit) as doc:
            page = doc.page(1)
    assert page.width * page.height <= limit
    assert page.dpi < 150 and page.width * page.height > 0.95 * limit
    assert page.width / page.height == pytest.approx(5000 / 3000, rel=0.01)
    assert "exceeds max_pixels" in caplog.text and "poster.pdf" in caplog.text


def test_pdf2image_renders_the_same_size_as_pypdfium2(tmp_path):
    path = write_pdf(tmp_path / "a.pdf", ["One", "Two"], size=(595, 842))
    poster = write_pdf(tmp_path / "poster.pdf", ["P"], size=(4000, 4000))
    for file, kwargs in ((path, {"dpi": 50}), (poster, {"dpi": 150, "max_pixels": 90_000})):
        with (
            open_document(file, **kwargs) as a,
            open_document(file, renderer="pdf2image", **kwargs) as b,
        ):
            for pa, pb in zip(a.iter_pages(), b.iter_pages(), strict=True):
                assert abs(pa.width - pb.width) <= 1 and abs(pa.height - pb.height) <= 1
                assert pb.image.mode == "RGB" and pa.text == pb.text


def test_renderer_options_are_checked(tmp_path, monkeypatch):
    path = write_pdf(tmp_path / "a.pdf", 1)
    with pytest.raises(ValueError, match="unknown renderer 'mupdf'"):
        open_document(path, renderer="mupdf")
    with pytest.raises(ValueError, match="dpi"):
        open_document(path, dpi=0)
    monkeypatch.setattr(ingest.pdf.shutil, "which", lambda _name: None)
    with pytest.raises(RendererUnavailableError, match="pdftoppm") as info:
        open_document(path, renderer="pdf2image")
    assert "poppler-utils" in str(info.value) and info.value.path == path


# --- bad PDFs -----------------------------------------------------------------------------------


def test_encrypted_pdf_needs_the_password(tmp_path):
    plain = write_pdf(tmp_path / "plain.pdf", ["Secret text"])
    path = write_encrypted_pdf(tmp_path / "locked.pdf", plain, "s3cret")
    with pytest.raises(EncryptedPDFError) as info:
        open_document(path)
    assert info.value.path == path and "password=" in str(info.value)
    with pytest.raises(EncryptedPDFError, match="does not open"):
        open_document(path, password="wrong")
    with open_document(path, password="s3cret") as doc:
        assert doc.page(1).text == "Secret text"
    with open_document(path, password="s3cret", renderer="pdf2image", dpi=20) as doc:
        assert doc.page(1).size == rendered_size(LETTER, 20)


def test_zero_page_pdf_is_empty_not_misreported(tmp_path):
    plain = write_pdf(tmp_path / "plain.pdf", ["x"])
    locked = write_encrypted_pdf(tmp_path / "locked.pdf", plain, "pw")
    with pytest.raises(EncryptedPDFError):  # leaves PDFium's last-error code at "password"
        open_document(locked)
    path = write_pdf(tmp_path / "zero.pdf", [])
    with pytest.raises(EmptyDocumentError, match="zero pages"):
        open_document(path)


def test_corrupt_pdf_body(tmp_path):
    path = tmp_path / "garbage.pdf"
    path.write_bytes(b"%PDF-1.7\n" + np.random.default_rng(0).bytes(4000) + b"\n%%EOF\n")
    with pytest.raises(CorruptPDFError, match="cannot parse"):
        open_document(path)


@pytest.mark.parametrize("fraction", [0.3, 0.9])
def test_truncated_pdf(tmp_path, fraction):
    whole = write_pdf(tmp_path / "whole.pdf", 40).read_bytes()
    path = tmp_path / "cut.pdf"
    path.write_bytes(whole[: int(len(whole) * fraction)])
    with pytest.raises(CorruptPDFError, match="looks truncated"):
        open_document(path)


def test_files_that_are_not_documents(tmp_path):
    text = tmp_path / "notes.pdf"
    text.write_text("just some notes, not a PDF\n")
    random_bytes = tmp_path / "noise.pdf"
    random_bytes.write_bytes(np.random.default_rng(1).bytes(3000))
    docx = tmp_path / "report.zip"  # (.docx itself is converted: tests/ingest/test_office.py)
    with zipfile.ZipFile(docx, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    zip_as_pdf = tmp_path / "report.pdf"
    shutil.copy(docx, zip_as_pdf)
    not_png = tmp_path / "photo.png"
    not_png.write_text("hello")
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    cases = {text: "plain text", random_bytes: "no %PDF- header", docx: "ZIP"}
    cases |= {zip_as_pdf: "ZIP", not_png: "not a readable image", empty: "empty"}
    for path, words in cases.items():
        with pytest.raises(UnsupportedFileError, match=words) as info:
            open_document(path)
        assert info.value.path == path
    files, errors = find_documents([docx])
    assert files == [] and isinstance(errors[0], UnsupportedFileError)
    assert ".pdf" in errors[0].fix


# --- paths --------------------------------------------------------------------------------------


def test_missing_path_and_directory(tmp_path):
    missing = tmp_path / "nope.pdf"
    with pytest.raises(UnreadablePathError, match="does not exist"):
        open_document(missing)
    with pytest.raises(UnreadablePathError, match="is a directory"):
        open_document(tmp_path)
    files, errors = find_documents([missing])
    assert files == [] and isinstance(errors[0], UnreadablePathError) and errors[0].path == missing
    with pytest.raises(UnreadablePathError):
        content_hash(missing)


def test_unreadable_file(tmp_path, monkeypatch):
    path = write_pdf(tmp_path / "locked.pdf", 1)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            # root ignores permission bits: make open() fail the way the kernel does for users
            real_open = builtins.open

            def denying_open(file, *args, **kwargs):
                if isinstance(file, (str, Path)) and Path(file) == path:
                    raise PermissionError(errno.EACCES, "Permission denied", str(file))
                return real_open(file, *args, **kwargs)

            monkeypatch.setattr(builtins, "open", denying_open)
        with pytest.raises(UnreadablePathError, match="Permission denied"):
            open_document(path)
        files, errors = find_documents([path])
        assert files == [] and isinstance(errors[0], UnreadablePathError)
    finally:
        path.chmod(0o644)


def test_error_message_names_path_reason_and_fix_and_pickles(tmp_path):
    error = CorruptPDFError(tmp_path / "x.pdf", "broken xref")
    assert str(error) == f"{tmp_path / 'x.pdf'}: broken xref ({CorruptPDFError.fix})"
    assert isinstance(error, IngestError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is CorruptPDFError and str(copy) == str(error)


# --- images -------------------------------------------------------------------------------------


def test_image_over_the_pixel_limit(tmp_path):
    path = write_image(tmp_path / "big.png", size=(300, 200))
    with pytest.raises(ImageTooLargeError, match="300x200") as info:
        open_document(path, max_pixels=50_000)
    assert "max_pixels" in info.value.fix
    with open_document(path, max_pixels=60_000) as doc:
        assert doc.page(1).size == (300, 200)


def test_decompression_bombs_are_refused_without_warnings(tmp_path):
    bomb = write_png_header(tmp_path / "bomb.png", 100_000, 100_000)  # over Pillow's hard stop
    big = write_png_header(tmp_path / "big.png", 12_000, 12_000)  # Pillow only warns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ImageTooLargeError, match="decompression bomb"):
            open_document(bomb)
        with pytest.raises(ImageTooLargeError, match="144,000,000 pixels"):
            open_document(big)
    assert DEFAULT_MAX_PIXELS < 144_000_000


def test_truncated_image(tmp_path):
    whole = tmp_path / "whole.png"
    noise = np.random.default_rng(2).integers(0, 255, (120, 160, 3), dtype=np.uint8)
    Image.fromarray(noise).save(whole)
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(CorruptImageError, match="cannot be decoded"):
        with open_document(cut) as doc:
            doc.page(1)


def test_image_modes_become_rgb(tmp_path):
    rgba = Image.new("RGBA", (8, 8), (255, 0, 0, 0))
    rgba.save(tmp_path / "alpha.png")
    palette = Image.new("P", (8, 8), 0)
    palette.putpalette([0, 0, 0] * 256)
    palette.save(tmp_path / "palette.png", transparency=0)
    Image.new("CMYK", (8, 8), (0, 255, 255, 0)).save(tmp_path / "cmyk.jpg")
    Image.fromarray(np.full((8, 8), 32896, dtype=np.uint16)).save(tmp_path / "grey16.png")
    write_image(tmp_path / "page.webp", color=(10, 200, 10))
    expected = {
        "alpha.png": (255, 255, 255),  # transparent over white, not black
        "palette.png": (255, 255, 255),
        "cmyk.jpg": (255, 0, 0),
        "grey16.png": (128, 128, 128),  # scaled from 16 bits, not clipped to 255
        "page.webp": (10, 200, 10),
    }
    for name, color in expected.items():
        with open_document(tmp_path / name) as doc:
            page = doc.page(1)
        assert doc.kind == "image" and page.image.mode == "RGB" and page.text is None
        assert np.abs(np.asarray(page.image)[4, 4].astype(int) - color).max() <= 6, name


def test_multi_frame_tiff_gives_one_page_per_frame(tmp_path):
    frames = [
        Image.new("RGB", (30, 20), (255, 0, 0)),
        Image.new("L", (25, 35), 90),
        Image.new("CMYK", (10, 10), (0, 0, 0, 255)),
    ]
    path = tmp_path / "scan.tiff"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    with open_document(path) as doc:
        pages = list(doc.iter_pages())
    assert [p.page_no for p in pages] == [1, 2, 3]
    assert [p.size for p in pages] == [(30, 20), (25, 35), (10, 10)]
    assert all(p.image.mode == "RGB" for p in pages)
    assert tuple(np.asarray(pages[1].image)[0, 0]) == (90, 90, 90)
    with open_document(path, max_pixels=700) as doc:  # the second frame alone is over the limit
        assert doc.page(1).size == (30, 20)
        with pytest.raises(ImageTooLargeError, match="frame 2"):
            doc.page(2)


def test_exif_orientation_is_applied(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    path = write_image(tmp_path / "phone.jpg", size=(40, 20), exif=exif)
    with open_document(path) as doc:
        assert doc.page(1).size == (20, 40)


# --- folders and batches ------------------------------------------------------------------------


def test_find_documents_is_sorted_recursive_and_skips_noise(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / ".cache").mkdir()
    write_pdf(tmp_path / "b" / "z.pdf", 1)
    write_pdf(tmp_path / "a" / "y.PDF", 1)
    write_image(tmp_path / "x.png")
    write_pdf(tmp_path / ".hidden.pdf", 1)
    write_pdf(tmp_path / ".cache" / "c.pdf", 1)
    (tmp_path / "readme.txt").write_text("skip me")
    files, errors = find_documents([tmp_path, tmp_path / "x.png"])
    assert errors == []
    assert [f.relative_to(tmp_path).as_posix() for f in files] == ["x.png", "a/y.PDF", "b/z.pdf"]
    flat, _ = find_documents(tmp_path, recursive=False)
    assert flat == [tmp_path / "x.png"]
    assert find_documents([tmp_path])[0] == files  # deterministic
    assert ".pdf" in SUPPORTED_SUFFIXES and ".webp" in SUPPORTED_SUFFIXES


def test_batch_reports_bad_files_and_yields_the_good_pages(tmp_path, caplog):
    folder = tmp_path / "inbox"
    (folder / "scans").mkdir(parents=True)
    good = write_pdf(folder / "01-good.pdf", ["alpha", "beta"])
    write_encrypted_pdf(folder / "02-locked.pdf", good, "pw")
    (folder / "03-broken.pdf").write_bytes(b"%PDF-1.5\nnot really\n%%EOF\n")
    write_pdf(folder / "04-empty.pdf", [])
    write_png_header(folder / "05-bomb.png", 100_000, 100_000)
    write_image(folder / "06-photo.jpg")
    (folder / "notes.txt").write_text("ignored inside a folder")
    Image.new("RGB", (20, 20)).save(
        folder / "scans" / "two.tif", save_all=True, append_images=[Image.new("RGB", (20, 20))]
    )
    missing = tmp_path / "missing.pdf"
    errors: list[IngestError] = []
    pages = list(iter_pages([folder, missing], dpi=20, errors=errors))
    got = [(p.source.name, p.page_no) for p in pages]
    assert got == [
        ("01-good.pdf", 1),
        ("01-good.pdf", 2),
        ("06-photo.jpg", 1),
        ("two.tif", 1),
        ("two.tif", 2),
    ]
    kinds = {e.path.name: type(e) for e in errors}
    assert kinds == {
        "missing.pdf": UnreadablePathError,
        "02-locked.pdf": EncryptedPDFError,
        "03-broken.pdf": CorruptPDFError,
        "04-empty.pdf": EmptyDocumentError,
        "05-bomb.png": ImageTooLargeError,
    }
    with caplog.at_level(logging.WARNING, logger="vrag_compress.ingest"):
        assert len(list(iter_pages([folder], dpi=20))) == 5
    assert "02-locked.pdf" in caplog.text and "04-empty.pdf" in caplog.text
