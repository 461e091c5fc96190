"""Text and hybrid search through `VisualIndex` and `vrag search`, on real PDFs with the tiny
offline model: JSON components, --alpha, filters, hostile queries, an old index, both backends."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrag_compress import VisualIndex
from vrag_compress.cli import app
from vrag_compress.store.local import catalog as cat

pytestmark = pytest.mark.slow  # end to end with a real (tiny) model and real PDFs

runner = CliRunner()


def run(*args: object) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def index_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs")
    gov = shared_data / "pdfs" / "gov"
    shutil.copy(gov / "scotus-transcript-p1.pdf", folder / "scotus.pdf")
    shutil.copy(gov / "senate-expenditures.pdf", folder / "senate.pdf")
    shutil.copy(shared_data / "pdfs" / "icdar2013" / "eu-007.pdf", folder / "eu-007.pdf")  # 6 pages
    path = tmp_path_factory.mktemp("idx") / "idx"
    code, out = run("index", folder, "--index", path, "--model", "tiny-colqwen2", "--json")
    assert code == 0, out
    return path


def search_json(*args: object) -> list[dict]:
    result = runner.invoke(app, ["search", *map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["hits"]


def test_text_mode_finds_the_page_with_the_words(index_dir):
    hits = search_json(index_dir, "ORAL ARGUMENT of the petitioner", "--mode", "text", "-k", "3")
    assert hits and hits[0]["metadata"]["filename"] == "scotus.pdf"
    assert hits[0]["components"]["text"]["rank"] == 1
    assert set(hits[0]["components"]) == {"text"}
    assert hits[0]["score"] == hits[0]["components"]["text"]["score"]


def test_hybrid_json_carries_both_components(index_dir):
    hits = search_json(index_dir, "oral argument petitioner", "--mode", "hybrid", "-k", "5")
    assert len(hits) == 5
    sides = [set(h["components"]) for h in hits]
    assert all(s and s <= {"visual", "text"} for s in sides)
    assert any(s == {"visual", "text"} for s in sides)
    for h in hits:
        expected = sum(1 / (60 + c["rank"]) for c in h["components"].values())
        assert h["score"] == pytest.approx(expected)
    mixed = search_json(index_dir, "oral argument", "--mode", "hybrid", "--alpha", "0.5")
    assert all(0 <= h["score"] <= 1 for h in mixed)
    assert search_json(index_dir, "oral argument", "-k", "2")[0]["components"] is None


def test_filters_reach_both_sides(index_dir):
    hits = search_json(
        index_dir,
        "oral argument",
        "--mode",
        "hybrid",
        "-k",
        "50",
        "--filter",
        "filename=senate.pdf",
    )
    assert hits and {h["metadata"]["filename"] for h in hits} == {"senate.pdf"}


@pytest.mark.parametrize(
    "query", ['"unbalanced', "NEAR(a b", "argu*", "-oral", "(((", "x" * 10_000, "AND OR NOT"]
)
def test_hostile_queries_never_traceback(index_dir, query):
    for mode in ("text", "hybrid"):
        code, out = run("search", "--mode", mode, "--json", "--", index_dir, query)
        assert code == 0, out
        assert "Traceback" not in out


def test_raw_fts_syntax_flag(index_dir):
    hits = search_json(index_dir, '"oral argument"', "--mode", "text", "--fts-syntax")
    assert hits and hits[0]["metadata"]["filename"] == "scotus.pdf"
    code, out = run("search", index_dir, "(((", "--mode", "text", "--fts-syntax")
    assert code == 1 and "not valid FTS5 syntax" in out and "Traceback" not in out


def test_bad_usage_exits_2(index_dir):
    assert run("search", index_dir, "x", "--alpha", "0.5")[0] == 2  # alpha without hybrid
    assert run("search", index_dir, "x", "--mode", "hybrid", "--alpha", "2")[0] == 2
    assert run("search", index_dir, "x", "--mode", "bm25")[0] == 2
    code, out = run("search", index_dir, "x", "--mode", "exact", "--fts-syntax")
    assert code == 2 and "--fts-syntax" in out  # was silently ignored


def test_table_output_says_who_found_each_page(index_dir):
    code, out = run("search", index_dir, "oral argument", "--mode", "hybrid", "-k", "3")
    assert code == 0 and "found by" in out and ("visual #" in out or "text #" in out)


def test_python_api(index_dir):
    with VisualIndex.open(index_dir, readonly=True) as index:
        hits = index.search("oral argument", k=3, mode="hybrid", alpha=0.3)
        assert hits[0].found_by and hits[0].to_dict()["components"] == hits[0].components
        assert index.search("oral argument", k=3, mode="text")[0].found_by == ["text"]
        with pytest.raises(ValueError, match="alpha"):
            index.search("x", mode="auto", alpha=0.5)
        with pytest.raises(ValueError, match="text_k"):  # text mode has no candidates to fuse
            index.search("x", mode="text", text_k=5)
        with pytest.raises(ValueError, match="fts_syntax"):
            index.search("x", mode="exact", fts_syntax=True)
        with pytest.raises(ValueError, match="text_k must be a positive int"):
            index.search("x", mode="hybrid", text_k=0)


def test_an_old_index_searches_text_and_gains_the_index(index_dir, tmp_path, make_old):
    old = tmp_path / "old"
    shutil.copytree(index_dir, old)
    make_old(old)
    before = search_json(index_dir, "oral argument", "--mode", "text")
    # until a writer upgrades it, an old catalog is answered by SQLite alone: same pages
    old_hits = search_json(old, "oral argument", "--mode", "text")
    assert [h["page_id"] for h in old_hits] == [h["page_id"] for h in before]
    assert run("verify", old)[0] == 0
    with VisualIndex.open(old) as index:  # a writer open upgrades the catalog
        assert [h.page_id for h in index.search("oral argument", mode="text")] == [
            h["page_id"] for h in before
        ]
    conn = sqlite3.connect(old / cat.CATALOG_NAME)
    assert cat.has_text_index(conn)
    conn.close()


def test_hybrid_on_qdrant(index_dir, tmp_path):
    pytest.importorskip("qdrant_client")
    url = f"qdrant+local://{tmp_path / 'q'}?collection=idx"
    assert run("migrate", index_dir, url)[0] == 0
    local = search_json(index_dir, "oral argument", "--mode", "text", "-k", "3")
    remote = search_json(index_dir, "oral argument", "--mode", "text", "-k", "3", "--store", url)
    assert remote and remote[0]["page_id"] == local[0]["page_id"]
    hybrid = search_json(index_dir, "oral argument", "--mode", "hybrid", "--store", url)
    assert any(set(h["components"]) == {"visual", "text"} for h in hybrid)


def test_text_search_without_tantivy_is_a_one_line_error(index_dir):
    script = (
        "import runpy, sys; sys.modules['tantivy'] = None; "
        f"sys.argv = ['vrag', 'search', {str(index_dir)!r}, 'oral argument', '--mode', 'text']; "
        "runpy.run_module('vrag_compress', run_name='__main__')"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    err = run.stderr.decode().strip()
    assert run.returncode == 1, (run.stdout, err)
    assert "pip install tantivy" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1, err
