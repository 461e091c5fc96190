"""The example end to end with the tiny ColQwen2 model: PDF -> VragVectorStore -> cited answer."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llamaindex_query_engine.py"


@pytest.mark.slow
def test_example_answers_with_page_citations(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    """The script runs as ``python examples/llamaindex_query_engine.py ...`` runs it (as
    ``__main__``), in this process: the interpreter and its imports are not paid again. (The
    conftest's guard also fails it here if LlamaIndex falls back to a default OpenAI model.)"""
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    out = tmp_path / "answer.json"
    args = [str(pdf), "--index", str(tmp_path / "index"), "--device", "cpu", "--top-k", "2"]
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), *args, "--json", str(out)])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    stdout = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert [c["file"] for c in result["citations"]] == [pdf.name, pdf.name]
    assert all(
        1 <= c["page_no"] <= 5 and Path(c["image_path"]).is_file() for c in result["citations"]
    )
    assert "page_no:" in result["answer"]  # the mock LLM echoes the cited pages back
    assert "5 pages (1 new documents)" in stdout
