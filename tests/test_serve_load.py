"""`vrag bench serve`: the bounded loopback load test runs end to end and reports its numbers."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vrag_compress.cli import app


@pytest.mark.slow
def test_bench_serve_reports_percentiles_and_no_errors(tmp_path):
    args = ["bench", "serve", "--pages", "40", "--clients", "2", "--searches", "4", "-k", "3"]
    result = CliRunner().invoke(app, [*args, "--dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    assert report["requests"] == 8 and report["errors"] == 0 and report["error_examples"] == []
    assert 0 < report["p50_ms"] <= report["p90_ms"] <= report["p99_ms"] <= report["max_ms"]
    assert report["pages"] == 40 and report["clients"] == 2
    assert list(tmp_path.iterdir()) == []  # the synthetic index is removed afterwards
