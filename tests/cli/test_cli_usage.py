"""What a new `vrag` user hits: method parameters, bad-usage exit codes, --version, help text,
finding documents by file name, refusing missing paths, Ctrl-C, rendering options, legends."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from vrag_compress.cli import app
from vrag_compress.cli.options import resolve_document
from vrag_compress.index import VisualIndex
from vrag_compress.snippets import snippet
from vrag_compress.store import DocumentRecord
from vrag_compress.version import __version__

runner = CliRunner()
TINY = ("--model", "tiny-colqwen2")


def run(*args: object):  # noqa: ANN201
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def docs(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs")
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder / "scotus.pdf")
    shutil.copy(shared_data / "pdfs" / "gov" / "amt_handbook_sample.pdf", folder / "amt.pdf")
    return folder


@pytest.fixture(scope="module")
def uot_index(docs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "idx"
    result = run(
        "index", docs, "--index", path, *TINY, "--method", "uot:epsilon=0.01",
        "--param", "rho=3", "--ratio", "0.25", "--dpi", "72", "--image-max-side", "300", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return path


# ----------------------------------------------------------------------- method parameters
def test_method_parameters_reach_the_index_config(uot_index: Path) -> None:
    info = json.loads(run("info", uot_index, "--json").stdout)
    assert info["compressor"] == "uot"
    assert info["compressor_params"]["epsilon"] == 0.01
    assert info["compressor_params"]["rho"] == 3
    assert info["compressor_params"]["ratio"] == 0.25


def test_rendering_options_are_recorded_and_used(uot_index: Path) -> None:
    with VisualIndex.open(uot_index, readonly=True) as index:
        assert index.dpi == 72
        assert index.store.config["images"]["max_side"] == 300
        doc = index.documents()[0]
        assert max(index.page_image(doc.doc_id, 1).size) <= 300


def test_adaptive_eos_runs_with_kappa_and_asks_for_it_without(docs: Path, tmp_path: Path) -> None:
    result = run("index", docs / "amt.pdf", "--index", tmp_path / "a", *TINY,
                 "--method", "adaptive-eos", "--param", "kappa=1.0", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    result = run("index", docs, "--index", tmp_path / "b", *TINY, "--method", "adaptive-eos")
    assert result.exit_code == 2
    assert "kappa" in result.output
    assert not (tmp_path / "b").exists()


# ----------------------------------------------------------------------- bad usage exits 2
@pytest.mark.parametrize(
    "args",
    [
        ("--method", "nope"),
        ("--ratio", "2"),
        ("--ratio", "0"),
        ("--method", "uot:epsilon"),
        ("--method", "uot", "--param", "no_such_param=1"),
        ("--renderer", "magic"),
        ("--dpi", "5"),
    ],
)
def test_bad_index_options_exit_2_before_creating(docs: Path, tmp_path: Path, args) -> None:  # noqa: ANN001
    result = run("index", docs, "--index", tmp_path / "idx", *TINY, *args)
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("search", "{index}", "q", "-k", "0"),
        ("search", "{index}", "q", "--mode", "fast"),
        ("search", "{index}", "  "),
        ("ask", "{index}", "q", "-k", "0"),
        ("show", "{index}", "scotus.pdf", "0"),
    ],
)
def test_bad_values_exit_2(uot_index: Path, args) -> None:  # noqa: ANN001
    result = run(*[str(uot_index) if a == "{index}" else a for a in args])
    assert result.exit_code == 2, result.output


def test_search_takes_every_mode_the_store_has(uot_index: Path) -> None:
    from vrag_compress.store.validate import SEARCH_MODES

    for mode in SEARCH_MODES:
        result = run("search", uot_index, "oral argument", "--mode", mode, "-k", "2", "--json")
        assert result.exit_code == 0, (mode, result.output)
        assert 1 <= len(json.loads(result.stdout)["hits"]) <= 2  # text: only pages with the words


def test_a_missing_input_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    result = run("index", tmp_path / "nonexistent", "--index", tmp_path / "idx", *TINY)
    assert result.exit_code == 2
    assert "nonexistent" in result.output
    assert not (tmp_path / "idx").exists()


def test_error_messages_are_not_wrapped_whatever_the_path_length(tmp_path: Path) -> None:
    # the console used to break lines at 80 columns, inside paths and phrases, depending on how
    # long the temporary folder's name was
    for depth in range(1, 6):
        missing = tmp_path.joinpath(*["a-folder-name"] * depth, "idx")
        result = run("info", missing)
        assert result.exit_code == 1
        hint = f"(create one with `vrag index ... --index {missing}`)"
        assert result.output == f"error: {missing}: no index here {hint}\n"


def test_reports_and_paths_stay_on_one_line(docs: Path, uot_index: Path, tmp_path: Path) -> None:
    rerun = run("index", docs, "--index", uot_index)  # skips both files: a report over 80 chars
    assert rerun.exit_code == 0, rerun.output
    assert re.search(r"^indexed 0 pages .* unchanged documents \(\d+ pages\) in [\d.]+s$",
                     rerun.stdout, re.M), rerun.stdout  # fmt: skip
    out = tmp_path.joinpath(*["a-folder-name"] * 5, "page.png")
    shown = run("show", uot_index, "scotus.pdf", "1", "-o", out)
    assert shown.exit_code == 0 and shown.stdout == f"wrote {out}\n"


# ----------------------------------------------------------------------- version and help
def test_version() -> None:
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"vrag {__version__}"


def test_help_is_plain_and_complete() -> None:
    text = run("index", "--help").stdout
    assert "[ocr] extra" in text
    assert "--no-no-images" not in text and "--no-images" in text
    assert "<bool>" not in text
    for option in ("--param", "--dpi", "--renderer", "--image-max-side"):
        assert option in text


def test_layout_flags_are_in_the_help() -> None:
    text = " ".join(run("index", "--help").stdout.split())
    for option in ("--codes", "--fp16", "--no-fp16", "500,000"):
        assert option in text
    text = " ".join(run("optimize", "--help").stdout.split())
    for option in ("--codes", "--fp16", "--no-fp16", "crash", "cannot get them back"):
        assert option in text


# ----------------------------------------------------------------------- finding documents
def test_search_table_shows_file_page_and_snippet(uot_index: Path) -> None:
    result = runner.invoke(app, ["search", str(uot_index), "supreme court", "-k", "2"])
    assert result.exit_code == 0
    assert "scotus.pdf" in result.stdout and "amt.pdf" in result.stdout
    shown = " ".join(result.stdout.replace("│", " ").split())  # the snippet wraps by word
    assert "SUPREME COURT" in shown  # the snippet of the transcript page


def test_info_lists_documents(uot_index: Path) -> None:
    result = run("info", uot_index)
    assert result.exit_code == 0
    assert "scotus.pdf" in result.stdout and "amt.pdf" in result.stdout
    assert "complete" in result.stdout


def test_show_and_delete_accept_a_file_name(uot_index: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.png"
    result = run("show", uot_index, "scotus.pdf", "1", "--out", out, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["layout"] == "assignment"
    assert "merged vector" in summary["legend"]
    with Image.open(out) as drawn, VisualIndex.open(uot_index, readonly=True) as index:
        page = index.page_image(summary["doc_id"], 1)
        assert drawn.height == page.height + 24  # the legend strip
    copy = tmp_path / "copy"
    shutil.copytree(uot_index, copy)
    result = run("delete", copy, "amt.pdf", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["pages_deleted"] == 1
    result = run("delete", copy, "amt.pdf")
    assert result.exit_code == 1 and "vrag info" in result.output


def test_resolve_document_by_id_name_or_path_and_ambiguity(tmp_path: Path) -> None:
    a = tmp_path / "x" / "report.pdf"
    a.parent.mkdir()
    a.write_bytes(b"%PDF")
    docs = [
        DocumentRecord(doc_id="d1", source=str(a.resolve())),
        DocumentRecord(doc_id="d2", source="/elsewhere/report.pdf"),
        DocumentRecord(doc_id="d3", source="/elsewhere/other.pdf"),
    ]
    assert resolve_document(docs, "d2") == "d2"
    assert resolve_document(docs, "other.pdf") == "d3"
    assert resolve_document(docs, str(a)) == "d1"
    with pytest.raises(LookupError, match="matches 2 documents"):
        resolve_document(docs, "report.pdf")
    with pytest.raises(LookupError, match="no document"):
        resolve_document(docs, "missing.pdf")


def test_snippet_centres_on_a_query_word() -> None:
    text = "intro " * 40 + "NICS Firearm Background Checks by state " + "tail " * 40
    piece = snippet(text, "firearm background checks", width=60)
    assert "Firearm Background Checks" in piece and piece.startswith("…")
    assert snippet(None, "q") == "(no text)"


# ----------------------------------------------------------------------- Ctrl-C
@pytest.mark.slow
def test_ctrl_c_reports_committed_pages_and_exits_130(
    docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vrag_compress.indexing import Indexer

    original = Indexer.commit
    calls = {"n": 0}

    def interrupt_second_batch(self, batch, *args, **kwargs):  # noqa: ANN001, ANN202
        calls["n"] += 1
        if calls["n"] == 2 and batch:
            raise KeyboardInterrupt
        return original(self, batch, *args, **kwargs)

    monkeypatch.setattr(Indexer, "commit", interrupt_second_batch)
    path = tmp_path / "idx"
    result = run("index", docs, "--index", path, *TINY, "--batch-size", "1")
    assert result.exit_code == 130
    assert "interrupted: 1 pages committed" in result.output
    assert "run the same command again to resume" in result.output
    monkeypatch.setattr(Indexer, "commit", original)
    result = run("index", docs, "--index", path, *TINY, "--json")
    assert result.exit_code == 0
    with VisualIndex.open(path, readonly=True) as index:
        assert index.store.count() == 2
        assert all(d.complete for d in index.documents())


def test_layout_legend_counts() -> None:
    from vrag_compress.visualize import layout_legend_text

    grid = np.array([2, 3])
    assert layout_legend_text({"grid": grid, "kept": np.array([0, 4])}) == (
        "red outline: kept patch (2 of 6); pale: dropped"
    )
    assignment = {"grid": grid, "assignment": np.array([0, 0, 1, 1, 2, 2])}
    assert "3 from 6 patches" in layout_legend_text(assignment)
