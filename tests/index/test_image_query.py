"""A picture as the query: a page finds itself, a text-encoder index reads its words by OCR,
and images that cannot be used are refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont
from typer.testing import CliRunner

from vrag_compress import ImageQueryError, VisualIndex, get_compressor
from vrag_compress.cli import app
from vrag_compress.image_query import load_query_image
from vrag_compress.ingest import Page
from vrag_compress.ingest.ocr import PageOcr, TextBox
from vrag_compress.testing import word_page_index

TEXTS = [
    "quarterly revenue by region north south",
    "safety inspection checklist ladders scaffolds",
    "court transcript oral argument justices",
    "appendix glossary of terms",
]


@pytest.fixture
def word_index(tmp_path: Path):
    index, encoder = word_page_index(tmp_path, TEXTS)
    yield index, encoder
    index.close()


def test_a_page_image_finds_itself_as_a_path_a_pil_image_or_bytes(word_index, tmp_path):
    index, encoder = word_index
    picture = encoder.page_image(TEXTS[1])
    path = tmp_path / "query.png"
    picture.save(path)
    for given in (picture, path, str(path), path.read_bytes()):
        hits = index.search(image=given, k=2)
        assert (hits[0].doc_id, hits[0].page_no) == ("doc", 2)
        assert hits[0].query_ocr is None  # a page model reads the picture, not its words


def test_the_query_page_is_compressed_with_the_index_compressor_unless_told(word_index):
    index, encoder = word_index
    picture = encoder.page_image(TEXTS[0])  # 6 words: 6 page vectors
    kept = index.read_image(picture)
    raw = index.read_image(picture, compress=False)
    assert (raw.read_by, raw.compressed, raw.vectors.shape[0]) == ("page", False, 6)
    assert (kept.compressed, kept.vectors.shape[0], kept.source_vectors) == (True, 3, 6)
    assert index.search(image=picture, k=1, compress_query=False)[0].page_no == 1


def test_query_and_image_together_or_a_text_mode_are_refused(word_index):
    index, encoder = word_index
    picture = encoder.page_image(TEXTS[0])
    with pytest.raises(ValueError, match="not both"):
        index.search("revenue", image=picture)
    with pytest.raises(ValueError, match="reads the query image as a page"):
        index.search(image=picture, mode="text")
    with pytest.raises(ValueError, match="nothing to search with"):
        index.search()


def test_images_that_cannot_be_used_say_what_is_wrong(tmp_path: Path):
    text = tmp_path / "notes.png"
    text.write_text("these are words, not pixels")
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    cases = [
        (text, "not a readable image; the content looks like plain text"),
        (empty, "not a readable image; the file is empty"),
        (tmp_path / "missing.png", "does not exist"),
        (tmp_path / "page.pdf", "a PDF is not an image query"),
        (b"", "empty \\(0 bytes\\)"),
        (b"GIF89a-not-really", "not an image Pillow can read"),
        (Image.new("1", (10_000, 9_000)), "90,000,000 pixels, over the limit"),
        (Image.new("RGB", (2_010, 10)), "longer and thinner"),
        (3.5, "file path, a PIL image or the image file's bytes"),
    ]
    for given, message in cases:
        with pytest.raises(ImageQueryError, match=message):
            load_query_image(given)


def test_a_huge_image_file_is_refused_before_its_pixels_are_decoded(tmp_path: Path):
    path = tmp_path / "huge.png"
    Image.new("1", (10_000, 9_000)).save(path)
    with pytest.raises(ImageQueryError, match="over max_pixels"):
        load_query_image(path)


class WordsOcr:
    """An OCR engine that 'reads' the words the test printed on the image."""

    name = "words"

    def __init__(self, text: str) -> None:
        self.text = text

    def recognize(self, image: Image.Image) -> list[TextBox]:
        return [TextBox(self.text, 0, 0, 100, 20)] if self.text else []


@pytest.fixture(scope="module")
def minilm_index(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("minilm") / "m.vrag"
    index = VisualIndex.create(path, model="minilm")
    blank = Image.new("RGB", (60, 80), "white")
    pages = [Page("doc", n, blank, t, path / "doc.pdf") for n, t in enumerate(TEXTS, start=1)]
    index.add(pages, progress=False, ocr="never")
    yield index
    index.close()


def test_a_text_encoder_index_reads_the_image_words_by_ocr_and_says_so(minilm_index):
    picture = Image.new("RGB", (200, 40), "white")
    ocr = PageOcr("always", engine=WordsOcr("ladders and scaffolds inspection"))
    hits = minilm_index.search(image=picture, k=2, ocr=ocr)
    assert hits[0].page_no == 2
    assert hits[0].query_ocr == "ladders and scaffolds inspection"
    assert hits[0].to_dict()["query_ocr"] == "ladders and scaffolds inspection"
    with pytest.raises(ImageQueryError, match="OCR found no words"):
        minilm_index.search(image=picture, ocr=PageOcr("always", engine=WordsOcr("")))


def test_without_an_ocr_engine_the_error_names_the_extra(minilm_index, monkeypatch):
    import sys

    from vrag_compress.ingest import ocr as ocr_module

    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    ocr_module._load_rapidocr.cache_clear()
    try:
        with pytest.raises(ImageQueryError, match=r"vrag-compress\[ocr\]"):
            minilm_index.search(image=Image.new("RGB", (50, 50), "white"))
    finally:
        ocr_module._load_rapidocr.cache_clear()


def words_image(path: Path, text: str) -> Path:
    """Large black words on white, as a phone photo of a label would show them. The picture is
    736 px tall: RapidOCR's detector scales a shorter side up to 736 px, and a 900x160 strip
    became 4140x736 pixels to detect (3.5 s of CPU per read, 0.65 s at 900x736)."""
    image = Image.new("RGB", (900, 736), "white")
    font = ImageFont.load_default(size=44)
    ImageDraw.Draw(image).text((20, 50), text, fill="black", font=font)
    image.save(path)
    return path


def test_vrag_search_image_prints_the_ocr_words_and_reports_them_in_json(minilm_index, tmp_path):
    picture = words_image(tmp_path / "label.png", "scaffolds ladders")
    runner = CliRunner()
    index = str(minilm_index.path)
    shown = runner.invoke(app, ["search", index, "--image", str(picture), "-k", "1"])
    assert shown.exit_code == 0, shown.output
    assert "read by OCR" in shown.output and "scaffolds ladders" in shown.output
    result = runner.invoke(app, ["search", index, "--image", str(picture), "-k", "1", "--json"])
    data = json.loads(result.stdout)
    assert data["image_query"]["read_by"] == "ocr"
    assert data["image_query"]["ocr_text"] == "scaffolds ladders"
    assert data["hits"][0]["page_no"] == 2


def test_vrag_search_image_refuses_a_bad_file_and_query_with_image(minilm_index, tmp_path):
    runner = CliRunner()
    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    index = str(minilm_index.path)
    result = runner.invoke(app, ["search", index, "--image", str(bad)])
    assert result.exit_code == 2 and "not a readable image" in result.output
    both = runner.invoke(app, ["search", index, "words", "--image", str(bad)])
    assert both.exit_code == 2 and "not both" in both.output
    neither = runner.invoke(app, ["search", index])
    assert neither.exit_code == 2 and "--image FILE" in neither.output


@pytest.mark.slow
def test_a_col_model_encodes_the_image_as_a_page_and_finds_it(tmp_path: Path, shared_data: Path):
    images = sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())[:4]
    compressor = get_compressor("sap", ratio=0.25, layers=[0, 1])
    path = tmp_path / "c.vrag"
    with VisualIndex.create(path, model="tiny-colqwen2", compressor=compressor) as ix:
        ix.add(images, progress=False, ocr="never")
        raw = ix.read_image(images[2], compress=False)
        kept = ix.read_image(images[2])
        assert kept.vectors.shape[0] == int(np.ceil(0.25 * raw.vectors.shape[0]))
        for read in (raw, kept):
            (hit,) = ix.search(image=read, k=1)
            assert hit.source is not None and Path(hit.source).name == images[2].name


def test_the_server_searches_with_an_uploaded_image_and_refuses_bad_ones(word_index, tmp_path):
    from fastapi.testclient import TestClient

    from vrag_compress.serve import ServeConfig, create_app

    index, encoder = word_index
    path = index.path
    index.close()  # the server opens the folder itself
    picture = tmp_path / "court.png"
    encoder.page_image(TEXTS[2]).save(picture)
    config = ServeConfig(path, ocr="never", max_upload_mb=0.01, max_k=10)
    with TestClient(create_app(config, encoder=encoder), base_url="http://127.0.0.1:8000") as c:
        found = c.post("/api/search", files={"image": picture.read_bytes()}, data={"k": "2"})
        assert found.status_code == 200, found.text
        body = found.json()
        assert body["hits"][0]["page_no"] == 3 and len(body["hits"]) == 2
        assert body["image_query"]["read_by"] == "page" and body["image_query"]["compressed"]
        near = c.post("/api/search", files={"image": picture.read_bytes()}, data={"neighbours": 1})
        assert [p["page_no"] for p in near.json()["hits"][0]["context"]] == [2, 4]
        text = c.post("/api/search", files={"image": ("a.png", b"plain words")})
        assert text.status_code == 400 and "not an image" in text.json()["error"]
        empty = c.post("/api/search", files={"image": ("a.png", b"")})
        assert empty.status_code == 400 and "empty" in empty.json()["error"]
        big = c.post("/api/search", files={"image": ("a.png", b"x" * 20_000)})
        assert big.status_code == 413
        many = c.post("/api/search", files={"image": picture.read_bytes()}, data={"k": "11"})
        assert many.status_code == 400 and "k=11" in many.json()["error"]
        words = c.get("/api/search", params={"q": "court transcript", "k": 1}).json()
        assert words["hits"][0]["page_no"] == 3 and "image_query" not in words
