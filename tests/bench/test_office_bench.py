"""tools/office_bench.py, the script behind the Office numbers in docs/ingest.md, on a small run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.ingest.test_office import needs_soffice

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "office_bench.py"


def _bench():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("office_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["office_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_the_generated_words_name_their_page() -> None:
    pages = _bench().page_words(5, 12)
    words = [word for page in pages for word in page]
    assert len(pages) == 5 and all(len(page) == 12 for page in pages)
    assert len(set(words)) == len(words)  # a word is on one page only


def test_unknown_kinds_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _bench().main(["--kinds", "docx,key"])
    assert "unknown kinds key" in capsys.readouterr().err


@pytest.mark.slow
@needs_soffice
def test_a_small_run_measures_each_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VRAG_OFFICE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "bench.json"
    assert _bench().main(["--kinds", "pptx,odp", "--pages", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for kind in ("pptx", "odp"):
        row = report["kinds"][kind]
        assert row["pages_converted"] == row["pages_written"] == 2
        assert row["recall"] > 0.9 and row["s_per_page"] > 0
    assert "| .odp | 2/2 |" in capsys.readouterr().out
