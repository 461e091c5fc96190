"""Neighbouring pages: a table that runs over a page break reaches the answer whole, and the
answer cites both pages it came from (Python, `vrag ask`, the server's ask)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from vrag_compress import VisualIndex, answering, hit_pages
from vrag_compress.answering import ChatMessage
from vrag_compress.cli import app
from vrag_compress.serve import ServeConfig, create_app

REPORT = [  # one list of lines per page; the revenue table starts at the foot of page 2
    ["Regional sales report 2024", "Prepared by the finance office", "Summary of the year"],
    [
        "Highlights of the year: growth in every region",
        "Table 3: Quarterly revenue by region, in thousands",
        "Region Q1 Q2",
        "Atlantic 120 98",
        "Pacific 87 110",
    ],
    ["Table 3, continued", "Mountain 64 71", "Prairie 55 60", "Total 326 339"],
    ["Methodology: figures are unaudited", "Currency conversions use yearly averages"],
    ["Appendix: office addresses and contacts"],
]
QUESTION = "What is the quarterly revenue by region in table 3?"
ROW = re.compile(r"^[A-Z][a-z]+ \d+ \d+$")


def write_pdf(path: Path, pages: Sequence[Sequence[str]]) -> Path:
    """A small valid PDF (exact xref offsets) with lines of Helvetica text on each page."""
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for i, lines in enumerate(pages):
        shown = " ".join(f"({line}) Tj 0 -28 Td" for line in lines)
        stream = f"BT /F1 14 Tf 72 720 Td {shown} ET".encode()
        objects[4 + 2 * i] = (
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>"
        ).encode()
        objects[5 + 2 * i] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    xref, total = len(out), len(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % total
    out += b"".join(b"%010d 00000 n \n" % offsets[n] for n in range(1, total))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (total, xref)
    path.write_bytes(bytes(out))
    return path


class TableReader:
    """An offline answer model that reads the pages shown to it as the test printed them
    (by their ``[n] file, page N`` labels) and answers with every table row it finds, citing
    the page each row is on."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def stream(self, messages: Sequence[ChatMessage]) -> Iterator[str]:
        self.shown = []
        for block in messages[-1]["content"]:
            label = re.match(r"\[(\d+)\] (.+), page (\d+)$", block.get("text", ""))
            if label is None:
                continue
            self.shown.append(f"{label[2]}:{label[3]}")
            if label[2] != "report.pdf":
                continue
            for line in REPORT[int(label[3]) - 1]:
                if ROW.match(line):
                    yield f"{line} [{label[1]}]. "


@pytest.fixture(scope="module")
def report_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    pdf = write_pdf(folder / "report.pdf", REPORT)
    other = write_pdf(folder / "minutes.pdf", [["Board minutes", "The board met twice"]])
    path = folder / "report.vrag"
    with VisualIndex.create(path, model="minilm") as index:
        assert index.add([pdf, other], progress=False, ocr="never").ok
    return path


def cited_pages(citations: list[dict]) -> list[int]:
    return sorted(c["page_no"] for c in citations)


def test_each_hit_comes_with_the_pages_around_it_in_page_order(report_index: Path):
    with VisualIndex.open(report_index, readonly=True) as index:
        (alone,) = index.search(QUESTION, k=1)
        assert alone.page_no in (2, 3) and alone.context == []
        (hit,) = index.search(QUESTION, k=1, neighbours=1)
        assert [p.page_no for p in hit.context] == [hit.page_no - 1, hit.page_no + 1]
        assert [p.page_no for p in hit.pages] == [hit.page_no - 1, hit.page_no, hit.page_no + 1]
        assert all(p.doc_id == hit.doc_id for p in hit.context)
        first = index.search("Regional sales report prepared by the finance office", k=1)
        (edge,) = index.search("Regional sales report finance office", k=1, neighbours=2)
        assert first[0].page_no == 1 and [p.page_no for p in edge.context] == [2, 3]
        with pytest.raises(ValueError, match="neighbours must be a whole number"):
            index.search(QUESTION, neighbours=-1)


def test_pages_shared_by_two_hits_go_to_the_model_once(report_index: Path):
    with VisualIndex.open(report_index, readonly=True) as index:
        hits = index.search(QUESTION, k=2, neighbours=1)
        pages = hit_pages(hits)
    ids = [p.id for p in pages]
    assert len(ids) == len(set(ids))
    neighbours = [p for p in pages if p.metadata.get("neighbour_of")]
    assert neighbours and all("score" not in p.metadata for p in neighbours)
    assert {p.metadata["neighbour_of"] for p in neighbours} <= {h.page_id for h in hits}


def test_the_answer_cites_both_pages_of_a_table_over_a_page_break(report_index: Path):
    reader = TableReader()
    with VisualIndex.open(report_index, readonly=True) as index:
        (hit,) = index.search(QUESTION, k=1, neighbours=1)
        with_context = answering.answer_pages(QUESTION, hit_pages([hit]), reader)
        assert cited_pages(with_context["citations"]) == [2, 3]
        alone = answering.answer_pages(QUESTION, hit_pages(index.search(QUESTION, k=1)), reader)
    assert len(alone["citations"]) == 1  # one page sent: half the table


def test_vrag_ask_neighbours_sends_and_cites_both_pages(report_index, monkeypatch):
    reader = TableReader()
    monkeypatch.setattr(answering, "load_chat_model", lambda spec: reader)
    runner = CliRunner()
    args = ["ask", str(report_index), QUESTION, "--llm", "offline:reader", "-k", "1", "--json"]
    alone = json.loads(runner.invoke(app, args).stdout)
    result = runner.invoke(app, [*args, "--neighbours", "1"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert len(alone["citations"]) == 1
    assert cited_pages(answer["citations"]) == [2, 3]
    assert "Mountain 64 71" in answer["answer"] and "Atlantic 120 98" in answer["answer"]
    assert [p["page_no"] for p in answer["pages"]] == sorted(p["page_no"] for p in answer["pages"])
    assert sum(p["neighbour_of"] is None for p in answer["pages"]) == 1  # the one hit
    shown = runner.invoke(app, args[:-1] + ["--neighbours", "1"])
    assert "report.pdf, page 2" in shown.output and "report.pdf, page 3" in shown.output


def test_the_server_ask_sends_the_neighbours_and_lists_them(report_index: Path):
    reader = TableReader()
    application = create_app(ServeConfig(report_index, ocr="never"), chat_model=reader)
    body = {"question": QUESTION, "k": 1, "neighbours": 1}
    with TestClient(application, base_url="http://127.0.0.1:8000") as client:
        with client.stream("POST", "/api/ask", json=body) as response:
            events = [json.loads(line) for line in response.iter_lines() if line]
        found = client.get("/api/search", params={"q": QUESTION, "k": 1, "neighbours": 1}).json()
        too_many = client.post("/api/ask", json={**body, "neighbours": 50})
    sent = events[0]["citations"]
    assert len(sent) == 3 and sum(c["neighbour_of"] is not None for c in sent) == 2
    answer = events[-1]["answer"]
    assert "Atlantic 120 98 [" in answer and "Mountain 64 71 [" in answer
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", answer)}
    assert sorted(sent[n - 1]["page_no"] for n in cited) == [2, 3]
    (hit,) = found["hits"]
    assert len(hit["context"]) == 2 and not Path(hit["context"][0]["source"]).is_absolute()
    assert too_many.status_code == 422
