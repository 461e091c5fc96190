"""The example end to end with the tiny ColQwen2 model: PDF -> VragVectorStore -> cited answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llamaindex_query_engine.py"


def run_example(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.mark.slow
def test_example_answers_with_page_citations(shared_data, tmp_path):
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    out = tmp_path / "answer.json"
    args = [str(pdf), "--index", str(tmp_path / "index"), "--device", "cpu", "--top-k", "2"]
    first = run_example(*args, "--json", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [c["file"] for c in result["citations"]] == [pdf.name, pdf.name]
    assert all(
        1 <= c["page_no"] <= 5 and Path(c["image_path"]).is_file() for c in result["citations"]
    )
    assert "page_no:" in result["answer"]  # the mock LLM echoes the cited pages back
    assert "5 pages (1 new documents)" in first.stdout
