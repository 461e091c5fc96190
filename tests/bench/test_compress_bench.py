"""`vrag bench compress` runs end to end on a small size and writes the documented JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from vrag_compress.cli import app

CORE = ["identity", "sap", "uot", "random", "eos", "adaptive-eos", "cluster", "pool"]


def test_bench_compress_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    args = [
        "bench",
        "compress",
        "--tokens",
        "80",
        "--dim",
        "16",
        "--pages",
        "6",
        "--slow-pages",
        "2",
        "--layers",
        "6",
        "--json",
        str(out),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["config"]["k"] == 8 and report["config"]["threads"] == 1
    methods = report["methods"]
    assert set(CORE) <= set(methods)
    assert {"uot-bf16", "sap selection only", "colpali-engine pooler", "uot literal loop"} <= set(
        methods
    )
    assert methods["uot"]["mean_vectors"] == methods["uot literal loop"]["mean_vectors"] == 8
    assert methods["cluster"]["pages"] == 2 and methods["sap"]["pages"] == 6
    assert all(row["ms_per_page"] > 0 for row in methods.values())
    agreement = report["uot_vs_literal"]
    assert agreement["fp32_max_abs_diff"] <= 1e-4 and agreement["fp32_pages_within_1e-4"] == 1.0
    assert agreement["literal_fp32_vs_fp64_max_abs_diff"] < 1e-3
    assert all(set(row) == {"value", "met"} for row in report["targets"].values())
    assert "targets" in result.output
