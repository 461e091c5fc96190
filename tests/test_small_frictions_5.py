"""What a new user meets next: scans without OCR, REST image paths, exits, explanations, tables."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrag_compress.cli import app
from vrag_compress.ingest import ocr as ocr_module


def run(*args: object, **kwargs: object):
    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def no_rapidocr(monkeypatch: pytest.MonkeyPatch):
    """An install without the [ocr] extra (the README's wheel line)."""
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    monkeypatch.setattr(ocr_module, "_warned_unavailable", False)
    ocr_module._load_rapidocr.cache_clear()
    yield
    ocr_module._load_rapidocr.cache_clear()


def _no_text_encoder_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    from vrag_compress.encoders import text_pages

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the text encoder was loaded")

    monkeypatch.setattr(text_pages.PageTextEncoder, "__init__", refuse)


# ----------------------------------------------------------------- scans, MiniLM and no OCR
def test_scans_for_the_text_encoder_without_ocr_get_one_message_before_any_work(
    no_rapidocr, tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_text_encoder_loads(monkeypatch)
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(shared_data / "pdfs" / "edge" / "ocr_test.pdf", folder / "scan.pdf")
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder / "text.pdf")
    result = run("index", folder, "--index", tmp_path / "idx", "--model", "minilm")
    assert result.exit_code == 1, result.output
    assert result.stderr.count("vrag-compress[ocr]") == 1
    assert "scan.pdf page 1" in result.stderr and "text.pdf" not in result.stderr
    assert "indexed without text" not in result.stderr and "failed:" not in result.stderr
    assert not (tmp_path / "idx").exists()


def test_text_pdfs_for_the_text_encoder_need_no_ocr(tmp_path: Path, shared_data: Path) -> None:
    pdf = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
    assert ocr_module.textless_pages([pdf]) == []
    assert ocr_module.textless_pages([shared_data / "pdfs" / "edge" / "ocr_test.pdf"]) == [
        f"{shared_data / 'pdfs' / 'edge' / 'ocr_test.pdf'} page 1"
    ]
    assert ocr_module.page_ranges([5, 1, 2, 3, 8, 9]) == "1-3, 5, 8-9"


def test_an_existing_text_index_checks_scans_before_loading_its_encoder(
    no_rapidocr, tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vrag_compress import VisualIndex
    from vrag_compress.ingest import Page
    from vrag_compress.ingest.ocr import NeedsOcrError

    index = VisualIndex.create(tmp_path / "idx", model="tiny-colqwen2")
    index.model_id = "minilm"  # as an index built by the text encoder reads back
    index._encoder = None
    _no_text_encoder_loads(monkeypatch)
    from PIL import Image

    page = Page("d1", 1, Image.new("RGB", (64, 64), "white"), None, Path("photo.png"))
    with index:
        with pytest.raises(NeedsOcrError, match=r"photo\.png page 1.*vrag-compress\[ocr\]"):
            index.add([page], progress=False)
        assert index.store.count() == 0


# ----------------------------------------------------------------- REST image paths
def test_rest_image_path_does_not_depend_on_how_the_index_path_was_typed(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from vrag_compress import VisualIndex, get_compressor
    from vrag_compress.serve import ServeConfig, create_app

    compressor = get_compressor("sap", ratio=0.25, layers=[0, 1])
    pdf = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
    tiny = {"model": "tiny-colqwen2", "compressor": compressor}
    with VisualIndex.create(tmp_path / "my.vrag", **tiny) as ix:
        ix.add([pdf], progress=False, ocr="never")
        doc_id = ix.documents()[0].doc_id
    monkeypatch.chdir(tmp_path)
    answers = []
    for typed in (Path("my.vrag"), tmp_path / "my.vrag"):
        config = ServeConfig(typed, api_key="k", ocr="never")
        with TestClient(create_app(config), base_url="http://127.0.0.1:8000") as client:
            hit = client.get("/api/search", params={"q": "oral argument"}).json()["hits"][0]
            answers.append(hit["image_path"])
    assert answers == [f"images/{doc_id}/1.webp"] * 2


# ----------------------------------------------------------------- exit with a local Qdrant
def test_an_index_on_a_local_qdrant_folder_exits_cleanly_unclosed(tmp_path: Path) -> None:
    import subprocess

    from vrag_compress import VisualIndex

    url = f"qdrant+local://{tmp_path / 'qd'}?collection=pages"
    VisualIndex.create(tmp_path / "idx", model="tiny-colqwen2", store=url).close()
    script = (
        "from vrag_compress import VisualIndex\n"
        f"index = VisualIndex.open({str(tmp_path / 'idx')!r})\n"
        "print(index.store.count())\n"  # never closed: left to the interpreter's exit
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr
    assert "Exception ignored" not in done.stderr and "Error" not in done.stderr, done.stderr


# ----------------------------------------------------------------- explanations, text encoder
@pytest.fixture(scope="module")
def text_index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vrag_compress import VisualIndex

    path = tmp_path_factory.mktemp("text") / "text.vrag"
    with VisualIndex.create(path, model="minilm") as index:
        pdf = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
        index.add([pdf], progress=False, ocr="never")
    return path


def test_special_tokens_are_flagged_not_terms() -> None:
    import numpy as np

    from vrag_compress.explain import explain_vectors

    query = np.eye(3, 4, dtype=np.float32)
    explained = explain_vectors(
        query, np.eye(4, dtype=np.float32), labels=["[CLS]", "oral", "[SEP]"]
    )
    tokens = explained.to_dict()["tokens"]
    assert [t["special"] for t in tokens] == [True, False, True]


def test_show_query_on_a_text_index_fails_before_the_model_loads(
    text_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_text_encoder_loads(monkeypatch)
    result = run("show", text_index, "scotus-transcript-p1.pdf", 1, "--query", "oral argument")
    assert result.exit_code == 1, result.output
    assert "reads page text" in result.stderr and "--mode text" in result.stderr


def test_rest_explain_on_a_text_index_names_the_matched_words(text_index: Path) -> None:
    from fastapi.testclient import TestClient

    from vrag_compress.serve import ServeConfig, create_app

    config = ServeConfig(text_index, api_key="k", ocr="never")
    with TestClient(create_app(config), base_url="http://127.0.0.1:8000") as client:
        hit = client.get("/api/search", params={"q": "oral argument zebra"}).json()["hits"][0]
        url = f"/api/pages/{hit['page_id']}/explain"
        body = client.get(url, params={"q": "oral argument zebra"}).json()
    assert body["reads"] == "text" and body["grid"] is None
    assert body["matched_words"] == ["oral", "argument"]
    specials = [t["label"] for t in body["tokens"] if t["special"]]
    assert specials == ["[CLS]", "[SEP]"]
