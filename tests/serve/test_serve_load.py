"""`vrag bench serve`: the bounded loopback load test runs end to end and reports, in one run,
one client, N clients and (``--during-upload``) one client while uploads are being indexed."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vrag_compress.cli import app

pytestmark = pytest.mark.e2e  # a real server under load

RUN_KEYS = {"p50_ms", "p99_ms", "rps", "requests", "errors"}


def check_run(run: dict, requests: int) -> None:
    assert RUN_KEYS <= set(run)
    assert run["requests"] == requests and run["errors"] == 0
    assert 0 < run["p50_ms"] <= run["p90_ms"] <= run["p99_ms"] <= run["max_ms"]
    assert run["rps"] > 0


@pytest.mark.slow
def test_bench_serve_reports_one_and_n_clients(tmp_path):
    args = ["bench", "serve", "--pages", "40", "--clients", "2", "--searches", "4", "-k", "3"]
    result = CliRunner().invoke(app, [*args, "--dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    check_run(report, 8)
    check_run(report["one_client"], 4)
    assert report["clients"] == 2 and report["one_client"]["clients"] == 1
    assert report["throughput_ratio"] == pytest.approx(
        report["rps"] / report["one_client"]["rps"], abs=0.01
    )
    assert report["pages"] == 40 and "during_upload" not in report
    assert list(tmp_path.iterdir()) == []  # the synthetic index is removed afterwards


@pytest.mark.slow
def test_bench_serve_times_searches_during_an_upload(tmp_path, shared_data):
    """Uploads of a PDF with a text layer: the default image-only pages would be OCRed by the
    server (tens of seconds a page on a busy machine); they are checked on their own below."""
    pdf = shared_data / "pdfs" / "icdar2013" / "eu-006.pdf"  # 3 pages
    args = ["bench", "serve", "--pages", "30", "--clients", "2", "--searches", "6", "-k", "3"]
    args += ["--during-upload", "--upload-pages", "3", "--upload-pdf", str(pdf)]
    args += ["--dir", str(tmp_path), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    busy = report["during_upload"]
    check_run(busy, 6)
    assert busy["pages_indexed"] >= 3  # at least one upload was indexed while timing
    assert busy["searches_while_indexing"] >= 1
    assert busy["p50_ratio_to_idle"] == pytest.approx(
        busy["p50_ms"] / report["one_client"]["p50_ms"], abs=0.01
    )


def test_the_default_uploads_are_new_image_only_pages(tmp_path):
    """What `--during-upload` sends without `--upload-pdf`: generated pages without a text
    layer (the server OCRs them, as it would scans), each upload a new file."""
    from pypdf import PdfReader

    from vrag_compress_bench.serve import generated_pdf, upload_copy

    source = generated_pdf(tmp_path / "generated.pdf", 2, seed=0)
    first = upload_copy(source, tmp_path / "upload-0.pdf", 3, 0)
    second = upload_copy(source, tmp_path / "upload-1.pdf", 3, 1)
    pages = PdfReader(first).pages
    assert len(pages) == 3 and all(not page.extract_text().strip() for page in pages)
    assert first.read_bytes() != second.read_bytes()
