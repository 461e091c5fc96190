"""`vrag bench capture` runs end to end on a tiny model and reports every mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.cli.app import app

pytestmark = pytest.mark.slow  # four child processes load a tiny model each


def test_capture_benchmark_reports_every_mode(tmp_path: Path) -> None:
    out = tmp_path / "capture.json"
    args = ["bench", "capture", "--model", "tiny-colpali", "--image-size", "112"]
    args += ["--layers", "4", "--heads", "2", "--repeats", "1", "--json", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    for mode in ("plain", "streaming", "eager", "naive"):
        assert report[mode]["peak_mb"] > 0 and report[mode]["seconds"] > 0, mode
    assert report["layers"] == 4 and report["heads"] == 2 and report["seq_len"] > 0
