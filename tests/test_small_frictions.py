"""Small things a new user trips over: error wording, plurals, nothing created on total failure."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from vrag_compress import Page, VisualIndex, get_compressor
from vrag_compress.cli import app
from vrag_compress.compress import CompressionError

TINY = ["--model", "tiny-colqwen2"]


def run(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_an_unknown_parameter_is_named_alone() -> None:
    with pytest.raises(CompressionError) as raised:
        get_compressor("sap", ratio=0.1, nonsense=3)
    message = str(raised.value)
    assert "unknown parameter nonsense;" in message and "'ratio'" not in message


def test_an_unknown_parameter_on_the_command_line(tmp_path: Path, shared_data: Path) -> None:
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    result = run("index", pdf, "--index", tmp_path / "idx", *TINY, "--param", "nonsense=3")
    assert result.exit_code == 2
    assert "unknown parameter nonsense" in result.output and "ratio']" not in result.output
    assert not (tmp_path / "idx").exists()


def test_counts_agree_with_their_nouns() -> None:
    from vrag_compress.progress import counted

    assert counted(1, "file") == "1 file"
    assert counted(0, "file") == "0 files"
    assert counted(2500, "page") == "2,500 pages"


@pytest.mark.slow
def test_one_document_is_reported_in_the_singular(tmp_path: Path, shared_data: Path) -> None:
    pdf = tmp_path / "one.pdf"
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", pdf)
    result = run("index", pdf, "--index", tmp_path / "idx", *TINY)
    assert result.exit_code == 0, result.output
    assert "from 1 document," in result.stdout and "1 documents" not in result.output
    assert "1 files" not in result.output


@pytest.mark.slow
def test_a_first_run_where_every_file_fails_creates_no_index(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "broken.pdf").write_bytes(b"%PDF-1.7 not really a pdf")
    (docs / "empty.pdf").write_bytes(b"")
    result = run("index", docs, "--index", tmp_path / "idx", *TINY)
    assert result.exit_code == 3, result.output
    assert "broken.pdf" in result.output and "no index was created" in result.output
    assert not (tmp_path / "idx").exists()


def test_searching_a_folder_that_is_not_an_index_says_how_to_make_one(tmp_path: Path) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "a.pdf").write_bytes(b"%PDF-1.7")
    result = run("search", folder, "costs")
    assert result.exit_code == 1
    assert f"create one with `vrag index ... --index {folder}`" in result.output
    assert (folder / "a.pdf").exists() and len(list(folder.iterdir())) == 1  # nothing written


@pytest.mark.slow
def test_a_page_without_text_on_a_text_encoder_says_it_needs_page_text(tmp_path: Path) -> None:
    from vrag_compress.indexing import NoVisualTokensError

    with VisualIndex.create(tmp_path / "idx", model="minilm") as index:
        page = Page("scan", 1, Image.new("RGB", (64, 64), "white"), None, tmp_path / "scan.png")
        with pytest.raises(NoVisualTokensError) as raised:
            index.upsert_pages([page])
    message = str(raised.value)
    assert "reads page text" in message and "visual tokens" not in message
