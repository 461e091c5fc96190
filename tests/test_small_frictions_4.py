"""Issue 48: what a new user meets first (an existing index, a typo in a model name, reports)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrag_compress import VisualIndex
from vrag_compress.cli import app
from vrag_compress.store import StoreExistsError

TINY = ["--model", "tiny-colqwen2"]


def run(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def _no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded")

    import vrag_compress.encoders.colpali as colpali
    import vrag_compress.encoders.select as select

    monkeypatch.setattr(colpali, "load_encoder", refuse)
    monkeypatch.setattr(select, "load_encoder", refuse)


@pytest.fixture
def one_pdf(tmp_path: Path, shared_data: Path) -> Path:
    pdf = tmp_path / "one.pdf"
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", pdf)
    return pdf


@pytest.fixture
def indexed(tmp_path: Path, one_pdf: Path) -> Path:
    result = run("index", one_pdf, "--index", tmp_path / "idx", *TINY)
    assert result.exit_code == 0, result.output
    return tmp_path / "idx"


def test_create_on_an_existing_index_refuses_before_loading_a_model(
    indexed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_model_loads(monkeypatch)
    with pytest.raises(StoreExistsError) as raised:
        VisualIndex.create(indexed, model="tiny-colqwen2")
    message = str(raised.value)
    assert "VisualIndex.open(" in message and "VisualIndex.open_or_create(" in message


@pytest.mark.parametrize(
    ("typo", "meant"), [("minlm", "minilm"), ("tiny-colqwn2", "tiny-colqwen2")]
)
def test_a_typo_in_the_model_name_suggests_the_known_name_without_loading(
    tmp_path: Path, one_pdf: Path, monkeypatch: pytest.MonkeyPatch, typo: str, meant: str
) -> None:
    _no_model_loads(monkeypatch)
    result = run("index", one_pdf, "--index", tmp_path / "idx", "--model", typo)
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert f"did you mean '{meant}'" in output and "huggingface-cli download" not in output
    assert not (tmp_path / "idx").exists()


def test_a_typo_in_the_model_name_from_python_suggests_the_known_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vrag_compress.encoders.colpali as colpali
    from vrag_compress.encoders import ModelNotFoundError, load_encoder

    monkeypatch.setattr(colpali, "load_encoder", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(ModelNotFoundError, match="did you mean 'minilm'"):
        load_encoder("minlm")


def test_hub_ids_and_folders_are_not_taken_for_typos(tmp_path: Path) -> None:
    from vrag_compress.encoders.select import unknown_model_hint

    assert unknown_model_hint("vidore/colqwen2-v1.0") is None
    assert unknown_model_hint("someone/minlm") is None  # a hub id: may be in the HF cache
    assert unknown_model_hint(str(tmp_path)) is None
    assert unknown_model_hint("minilm") is None and unknown_model_hint("auto") is None
    assert unknown_model_hint("st:someone/model") is None
    assert "did you mean 'minilm'" in (unknown_model_hint("minlm") or "")
    assert "did you mean 'minilm'" in (unknown_model_hint("MiniLM") or "")


@pytest.mark.slow
def test_json_says_the_index_was_not_created_when_it_existed(indexed: Path, one_pdf: Path) -> None:
    result = run("index", one_pdf, "--index", indexed, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["index_created"] is False


@pytest.mark.slow
def test_json_says_a_new_index_was_created(tmp_path: Path, one_pdf: Path) -> None:
    result = run("index", one_pdf, "--index", tmp_path / "new", *TINY, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["index_created"] is True


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
def test_delete_names_the_file_and_counts_in_the_singular(indexed: Path) -> None:
    result = run("delete", indexed, "one.pdf")
    assert result.exit_code == 0, result.output
    assert "deleted 1 page of one.pdf [" in _words(result.stdout)
    assert "1 pages" not in result.output


@pytest.mark.slow
def test_delete_by_doc_id_still_names_the_file(indexed: Path) -> None:
    doc_id = json.loads(run("info", indexed, "--json").stdout)["document_list"][0]["doc_id"]
    result = run("delete", indexed, doc_id)
    assert result.exit_code == 0, result.output
    assert f"deleted 1 page of one.pdf [{doc_id}]" in _words(result.stdout)


@pytest.mark.slow
def test_show_of_a_missing_page_names_the_file_typed(indexed: Path, tmp_path: Path) -> None:
    result = run("show", indexed, "one.pdf", 99, "--out", tmp_path / "p.png")
    assert result.exit_code == 1
    output = _words(result.output)
    assert "no page 99 of one.pdf [" in output and "(it has 1 page)" in output


@pytest.mark.slow
def test_no_empty_progress_bar_when_every_file_fails(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "broken.pdf").write_bytes(b"%PDF-1.7 not really a pdf")
    result = run("index", docs, "--index", tmp_path / "idx", *TINY)
    assert result.exit_code == 3, result.output
    assert "0/0" not in result.output and "broken.pdf" in result.output


@pytest.mark.slow
def test_info_prints_readable_lines_not_python_dicts(indexed: Path) -> None:
    result = run("info", indexed)
    assert result.exit_code == 0, result.output
    assert "{'" not in result.output and "None" not in result.output
    lines = result.stdout.splitlines()
    assert "compressor_params:" in lines and "  ratio: 0.1" in lines
    assert "images:" in lines and "  store: yes" in lines and "pages: 1" in lines
    details = json.loads(run("info", indexed, "--json").stdout)  # --json keeps the structure
    assert details["compressor_params"]["ratio"] == 0.1 and details["images"]["store"] is True


@pytest.mark.slow
def test_unsupported_files_in_a_folder_are_counted_by_kind(tmp_path: Path, one_pdf: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(one_pdf, docs / "one.pdf")
    for name in ("a.epub", "b.EPUB", "notes.txt", "README", ".hidden.txt"):
        (docs / name).write_text("not a page")
    result = run("index", docs, "--index", tmp_path / "idx", *TINY)
    assert result.exit_code == 0, result.output
    output = _words(result.stdout)
    assert "skipped 4 unsupported files in the folders (2 .epub, 1 (no suffix), 1 .txt)" in output
    again = run("index", docs, "--index", tmp_path / "idx", "--json")
    report = json.loads(again.stdout)
    assert report["unsupported_files"] == {".epub": 2, ".txt": 1, "(no suffix)": 1}
    assert report["documents_skipped"] and "failures" in report  # the existing keys stay
