"""Smoke test of `vrag bench ray` (a benchmark that crashes is a bug): one actor, one small PDF."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# find_spec, not importorskip: Ray runs in the `vrag` subprocess, so collecting this module (in
# every pytest-xdist worker) need not import it
if importlib.util.find_spec("ray") is None:
    pytest.skip("could not import 'ray'", allow_module_level=True)
pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_bench_ray_reports_pages_per_second(shared_data: Path, tmp_path: Path) -> None:
    pdf = shared_data / "pdfs" / "gov" / "senate-expenditures.pdf"
    report = tmp_path / "ray.json"
    short = Path(tempfile.mkdtemp(prefix="vr", dir="/tmp"))  # Ray's socket paths must stay short
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_TMPDIR": str(short)}
    args = ["bench", "ray", str(pdf), "--workers", "1", "--no-images", "--json", str(report)]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "vrag_compress", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(report.read_text())
    (run,) = result["runs"]
    assert run["actors"] == 1 and run["pages"] > 0 and run["pages_per_s"] > 0
    assert 0 < run["driver_write_s"] < run["seconds"]
    assert run["driver_cpu_s"] > 0
    assert run["ratio"] == 1.0
