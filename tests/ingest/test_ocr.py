"""OCR at index time: reading order, when pages get OCR'd, the real scanned page, and failures."""

from __future__ import annotations

import json
import logging
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from typer.testing import CliRunner

from vrag_compress import VisualIndex, get_compressor
from vrag_compress.cli import app
from vrag_compress.ingest import ocr as ocr_module
from vrag_compress.ingest import open_document
from vrag_compress.ingest.ocr import (
    OcrUnavailableError,
    PageOcr,
    RapidOcrEngine,
    TextBox,
    has_text_layer,
    reading_order,
)
from vrag_compress.threads import thread_budget

SCAN_WORDS = ("docling", "bundles", "json", "markdown", "contained", "package")


def box(text: str, x: float, y: float, w: float = 40, h: float = 20) -> TextBox:
    return TextBox(text, x, y, x + w, y + h)


class FakeEngine:
    """Returns one text line per page (`page-<n>`) and raises on the pages listed in `broken`."""

    name = "fake"

    def __init__(self, broken: tuple[int, ...] = ()) -> None:
        self.calls = 0
        self.broken = broken

    def recognize(self, image: Image.Image) -> list[TextBox]:
        self.calls += 1
        if self.calls in self.broken:
            raise RuntimeError("onnxruntime: bad input tensor")
        return [box(f"page-{self.calls}", 10, 10)]


def new_index(path: Path) -> VisualIndex:
    return VisualIndex.create(
        path,
        model="tiny-colqwen2",
        compressor=get_compressor("sap", ratio=0.25, layers=[0, 1]),
        batch_size=2,
    )


@pytest.fixture
def no_rapidocr(monkeypatch: pytest.MonkeyPatch):
    """Simulate an install without the [ocr] extra."""
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    monkeypatch.setattr(ocr_module, "_warned_unavailable", False)
    ocr_module._load_rapidocr.cache_clear()
    yield
    ocr_module._load_rapidocr.cache_clear()


# ----------------------------------------------------------------- reading order
def test_reading_order_groups_skewed_words_into_lines():
    boxes = [
        box("world", 60, 12),  # 2 px lower than "hello": same line
        box("hello", 10, 10),
        box("second", 10, 40),
        box("line", 60, 38),
        box("third", 10, 70, h=22),
    ]
    assert reading_order(boxes) == "hello world\nsecond line\nthird"


def test_reading_order_keeps_close_but_distinct_lines_apart():
    boxes = [box("below", 10, 21), box("above", 50, 0)]
    assert reading_order(boxes) == "above\nbelow"


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=6),
    seed=st.integers(0, 10_000),
)
def test_reading_order_ignores_detector_order_and_small_jitter(rows: list[int], seed: int):
    rng = random.Random(seed)
    boxes, expected = [], []
    for r, n_words in enumerate(rows):
        words = [f"w{r}_{c}" for c in range(n_words)]
        expected.append(" ".join(words))
        for c, word in enumerate(words):
            boxes.append(box(word, 10 + 60 * c, 30 * r + rng.uniform(-4, 4)))
    rng.shuffle(boxes)
    assert reading_order(boxes) == "\n".join(expected)


def test_from_quad_takes_the_bounding_box_of_a_rotated_quad():
    got = TextBox.from_quad([[10, 5], [50, 7], [49, 27], [9, 25]], "x", 0.9)
    assert (got.x0, got.y0, got.x1, got.y1) == (9, 5, 50, 27)


# ----------------------------------------------------------------- which pages get OCR
def test_text_layer_threshold():
    assert not has_text_layer(None)
    assert not has_text_layer("  \n 3 ")
    assert has_text_layer("A born-digital page with a real text layer")


@pytest.mark.parametrize(
    ("mode", "layer", "ocr_expected"),
    [
        ("auto", None, True),
        ("auto", "- 7 -", True),
        ("auto", "A born-digital page with a real text layer", False),
        ("always", "A born-digital page with a real text layer", True),
        ("never", None, False),
    ],
)
def test_modes_decide_which_pages_are_ocrd(mode: str, layer: str | None, ocr_expected: bool):
    engine = FakeEngine()
    result = PageOcr(mode, engine).page_text(Image.new("RGB", (32, 32), "white"), layer)
    assert (engine.calls == 1) == ocr_expected
    assert result.source == ("ocr" if ocr_expected else ("layer" if layer else "none"))
    assert result.text == ("page-1" if ocr_expected else layer)


class BlankEngine(FakeEngine):
    def recognize(self, image: Image.Image) -> list[TextBox]:
        return []


@pytest.mark.parametrize(
    ("layer", "source"), [(None, "none"), ("A real text layer here ok", "layer")]
)
def test_ocr_finding_nothing_keeps_the_layer_and_still_counts_as_run(
    layer: str | None, source: str
):
    result = PageOcr("always", BlankEngine()).page_text(Image.new("RGB", (32, 32)), layer)
    assert (result.text, result.source, result.ocr_ran, result.error) == (layer, source, True, None)


def test_bad_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="auto, always, never"):
        PageOcr("sometimes")


# ----------------------------------------------------------------- the real engine
@pytest.fixture(scope="module")
def scanned_page(shared_data: Path) -> Image.Image:
    document = open_document(shared_data / "pdfs" / "edge" / "ocr_test.pdf", dpi=150)
    try:
        page = next(document.iter_pages())
    finally:
        document.close()
    assert page.text is None, "ocr_test.pdf should have no text layer"
    return page.image


@pytest.mark.slow
def test_rapidocr_reads_the_scanned_page(scanned_page: Image.Image):
    text = reading_order(RapidOcrEngine().recognize(scanned_page))
    lines = text.lower().splitlines()
    for word in SCAN_WORDS:
        assert word in text.lower(), text
    assert lines[0].startswith("docling") and lines[-1].strip() == "package", text


def _onnx_sessions(engine: object) -> list:
    """The onnxruntime sessions of a RapidOCR engine's detector, classifier and recogniser."""
    parts = (engine.text_det, engine.text_cls, engine.text_rec)  # type: ignore[attr-defined]
    wrappers = [value for part in parts for value in vars(part).values()]
    return [w.session for w in wrappers if hasattr(getattr(w, "session", None), "run")]


def test_ocr_threads_follow_omp_num_threads(monkeypatch: pytest.MonkeyPatch):
    """onnxruntime ignores OMP_NUM_THREADS (the budget Ray sets in each actor): the engine
    passes it on, so OCR in N processes on N cores runs N threads, not N per process."""
    pytest.importorskip("rapidocr_onnxruntime")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert thread_budget() == 1
    sessions = _onnx_sessions(RapidOcrEngine()._engine)
    assert len(sessions) == 3
    assert [s.get_session_options().intra_op_num_threads for s in sessions] == [1, 1, 1]
    for value in ("", "0", "two", "-1"):  # not a budget: onnxruntime's own default
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        assert thread_budget() is None
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert thread_budget() is None


@pytest.mark.slow
def test_index_ocrs_scans_and_keeps_born_digital_text_layers(tmp_path: Path, shared_data: Path):
    scan = shared_data / "pdfs" / "edge" / "ocr_test.pdf"
    digital = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
    with new_index(tmp_path / "idx") as index:
        report = index.add([scan, digital], progress=False)
        assert report.ok and report.ocr_mode == "auto" and report.ocr_failures == []
        ocrd = {(p["doc_id"], p["page_no"]) for p in report.ocr_pages}
        records = {r.metadata["filename"]: r for r in _all_records(index)}
    scan_record, digital_record = records["ocr_test.pdf"], records["scotus-transcript-p1.pdf"]
    assert ocrd == {(scan_record.doc_id, 1)}, "only the scanned page is OCR'd in auto"
    assert scan_record.metadata["text_source"] == "ocr"
    assert all(w in scan_record.text.lower() for w in SCAN_WORDS)
    layer = next(open_document(digital).iter_pages()).text
    assert digital_record.metadata["text_source"] == "layer"
    assert digital_record.text == layer


def _all_records(index: VisualIndex) -> list:
    ids = [pid for d in index.documents() for pid in index.store.page_ids(d.doc_id)]
    return index.store.get(ids)


# ----------------------------------------------------------------- failures
@pytest.mark.slow
def test_an_ocr_error_on_one_page_is_reported_and_the_rest_indexed(
    tmp_path: Path, shared_data: Path
):
    document = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    engine = FakeEngine(broken=(2,))
    with new_index(tmp_path / "idx") as index:
        report = index.add(document, progress=False, ocr=PageOcr("always", engine))
        records = sorted(_all_records(index), key=lambda r: r.page_no)
    assert report.ok and report.pages_indexed == 5 == len(records)
    assert [f["page_no"] for f in report.ocr_failures] == ["2"]
    assert "RuntimeError: onnxruntime: bad input tensor" in report.ocr_failures[0]["reason"]
    assert [p["page_no"] for p in report.ocr_pages] == [1, 3, 4, 5]
    assert records[0].text == "page-1" and records[2].text == "page-3"
    assert records[1].metadata["text_source"] == "layer", "page 2 falls back to its text layer"
    assert records[1].text and "page-" not in records[1].text
    summary = report.to_dict()["ocr"]
    assert summary["pages"] == 4 and len(summary["failures"]) == 1


@pytest.mark.slow
def test_auto_without_the_extra_warns_once_and_indexes(
    no_rapidocr, tmp_path: Path, shared_data: Path, caplog: pytest.LogCaptureFixture
):
    images = sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())[:2]
    with caplog.at_level(logging.WARNING, logger="vrag_compress.ingest.ocr"):
        with new_index(tmp_path / "idx") as index:
            report = index.add(images, progress=False)
    warnings = [r for r in caplog.records if "rapidocr-onnxruntime" in r.getMessage()]
    assert len(warnings) == 1 and "pip install 'vrag-compress[ocr]'" in warnings[0].getMessage()
    assert report.ok and report.pages_indexed == 2 and report.ocr_pages == []


def test_always_without_the_extra_fails_before_indexing(no_rapidocr, tmp_path: Path):
    with new_index(tmp_path / "idx") as index:
        with pytest.raises(OcrUnavailableError, match=r"vrag-compress\[ocr\]"):
            index.add([tmp_path / "nothing.pdf"], progress=False, ocr="always")
        assert index.store.count() == 0


@pytest.mark.slow
def test_cli_ocr_option(no_rapidocr, tmp_path: Path, shared_data: Path):
    runner = CliRunner()
    scan = shared_data / "pdfs" / "edge" / "ocr_test.pdf"
    base = ["index", str(scan), "--model", "tiny-colqwen2", "--json"]
    result = runner.invoke(app, [*base, "--index", str(tmp_path / "a"), "--ocr", "always"])
    assert result.exit_code == 1 and "vrag-compress[ocr]" in result.stderr
    assert not (tmp_path / "a").exists(), "no index is created when OCR cannot run"
    result = runner.invoke(app, [*base, "--index", str(tmp_path / "b"), "--ocr", "maybe"])
    assert result.exit_code == 2
    result = runner.invoke(app, [*base, "--index", str(tmp_path / "c"), "--ocr", "never"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ocr"]["mode"] == "never" and report["pages_indexed"] == 1


@pytest.mark.slow
def test_bench_ocr_reports_time_per_page_and_share(tmp_path: Path, shared_data: Path):
    import vrag_compress.cli  # noqa: F401  (registers `vrag bench ocr`)

    out = tmp_path / "ocr.json"
    scan = shared_data / "pdfs" / "edge" / "ocr_test.pdf"
    args = ["bench", "ocr", str(scan), "--dpi", "72", "--threads", "1", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    assert payload["pages_indexed"] == payload["pages_ocrd"] == 1
    assert 0 < payload["ocr_s"] <= payload["index_s"] and 0 < payload["ocr_share"] <= 1
    assert payload["per_page"][0]["chars"] > 50 and payload["dpi"] == 72


@pytest.mark.slow
def test_a_blank_page_skips_the_detector_but_not_its_shape_checks(monkeypatch):
    from rapidocr_onnxruntime.utils.process_img import ResizeImgError

    engine = RapidOcrEngine()

    def no_detector(*args: object) -> None:
        raise AssertionError("the detector ran on a page with nothing on it")

    monkeypatch.setattr(engine._engine, "text_det", no_detector)
    assert engine.recognize(Image.new("RGB", (224, 300), "navy")) == []
    assert engine.recognize(Image.new("L", (850, 1100), 255)) == []
    with pytest.raises(ResizeImgError):  # as RapidOCR refuses this shape with ink on it
        engine.recognize(Image.new("RGB", (3, 3000), "white"))
