"""`vrag bench ingest` runs end to end and writes the JSON it documents."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.cli.app import app


def test_bench_ingest_writes_json(shared_data, tmp_path):
    out = tmp_path / "ingest.json"
    args = ["bench", "ingest", str(shared_data / "pdfs" / "edge"), "--dpi", "20"]
    args += ["--renderer", "pypdfium2", "--long-pages", "20", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["files"] == 6 and list(data["renderers"]) == ["pypdfium2"]
    assert data["renderers"]["pypdfium2"]["pages"] == 9
    assert len(data["errors"]) == 1 and "unreadablemetadata.pdf" in data["errors"][0]
    streaming = data["streaming"]
    assert streaming["pages"] == 20 and streaming["rss_peak_mb"] >= streaming["rss_start_mb"]
    assert "pypdfium2" in result.output
