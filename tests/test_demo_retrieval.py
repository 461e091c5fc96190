"""The offline demo finds each of its documents when asked plainly about its subject.

The shared gov PDFs are mostly tables and continued pages without a heading; the MiniLM page-text
encoder (what `--model auto` falls back to offline) reads each page behind its document's title
(the PDF Title when it reads as words, and the file name), so a query about what the document is
finds it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vrag_compress import VisualIndex
from vrag_compress.ingest import document_title, with_title

# One plain query per shared gov document, by its subject or by what it is called (`vrag info`
# lists the file names); the two by name missed their document before titles were read.
QUERIES = {
    "federal-register-2020-17221.pdf": "federal register proposed rules",
    "amt_handbook_sample.pdf": "AMT handbook",
    "nics-background-checks-2015-11.pdf": "firearm background checks by state",
    "scotus-transcript-p1.pdf": "scotus transcript",
    "senate-expenditures.pdf": "senate expenditure report",
}


def test_a_document_is_called_by_its_title_and_its_file_name() -> None:
    amt = Path("amt_handbook_sample.pdf")
    expected = "AMT General Handbook. amt handbook sample"
    assert document_title(amt, "AMT General Handbook") == expected
    scotus = Path("scotus-transcript-p1.pdf")
    assert document_title(scotus, "10811.exe") == "scotus transcript p1"  # a file name: skipped
    assert document_title(Path("nics-background-checks-2015-11.pdf"), "") == (
        "nics background checks 2015 11"
    )
    assert with_title("t", "page") == "t\npage"
    assert with_title("t", None) is None and with_title("t", "  ") == "  "  # no text, no title


@pytest.mark.slow
def test_each_demo_document_is_in_the_top_3_for_a_plain_query_about_it(
    shared_data: Path, tmp_path: Path
) -> None:
    docs = tmp_path / "gov"
    docs.mkdir()
    for name in QUERIES:
        shutil.copy(shared_data / "pdfs" / "gov" / name, docs / name)
    with VisualIndex.create(tmp_path / "demo.vrag", model="minilm") as index:
        index.add([docs], progress=False, ocr="never")
        for name, query in QUERIES.items():
            found = [hit.metadata["filename"] for hit in index.search(query, k=3)]
            assert name in found, f"{query!r}: {found}"
