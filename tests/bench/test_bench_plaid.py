"""`vrag bench plaid`: what we hand fast-plaid's process, what we read back, and (when a
fast-plaid virtual environment is present) the whole run."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.cli.app import app
from vrag_compress_bench.plaid_exchange import (
    RUNNER,
    read_results,
    recall_at_10,
    write_exchange,
)
from vrag_compress_bench.store import PageStream

FAST_PLAID_PYTHON = Path(os.environ.get("VRAG_FAST_PLAID_PYTHON", "/tmp/fastplaid/bin/python"))


def _pages(n: int, k: int, dim: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, k, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=2, keepdims=True)).astype(np.float16)


def test_exchange_holds_the_same_vectors(tmp_path: Path) -> None:
    """Batches from a stream land in one fp16 matrix whose bounds give every page back."""
    pages = _pages(23, 5, 8)
    stream = PageStream(lambda: iter([pages[:10], pages[10:20], pages[20:]]), 23, 5)
    queries = [np.ones((3, 8), np.float32), np.zeros((2, 8), np.float32)]
    write_exchange(tmp_path, stream, queries, threads=2, nbits=4)
    tokens = np.load(tmp_path / "pages.npy")
    bounds = np.load(tmp_path / "bounds.npy")
    assert tokens.dtype == np.float16 and bounds.tolist() == list(range(0, 24 * 5, 5))
    for i in (0, 9, 10, 22):
        assert np.array_equal(tokens[bounds[i] : bounds[i + 1]], pages[i])
    q, qb = np.load(tmp_path / "queries.npy"), np.load(tmp_path / "query_bounds.npy")
    assert qb.tolist() == [0, 3, 5] and np.array_equal(q[3:5], queries[1])
    settings = json.loads((tmp_path / "settings.json").read_text())
    assert settings == {"threads": 2, "nbits": 4, "top_k": 10}
    short = PageStream(lambda: iter([pages[:10]]), 23, 5)  # fewer pages than announced
    with pytest.raises(ValueError, match="23 pages announced, 10 given"):
        write_exchange(tmp_path / "short", short, queries, threads=1, nbits=4)


def test_results_are_checked_and_scored(tmp_path: Path) -> None:
    good = {
        "build_s": 1.5,
        "latency_ms": [3.0, 5.0],
        "top": [[0, 1, 2], [4, 3]],
        "index_bytes": 100,
        "versions": {},
        "settings": {},
    }
    (tmp_path / "results.json").write_text(json.dumps(good))
    assert read_results(tmp_path, 2, 5)["top"] == [[0, 1, 2], [4, 3]]
    with pytest.raises(ValueError, match="2 result lists and 2 latencies for 3 queries"):
        read_results(tmp_path, 3, 5)
    with pytest.raises(ValueError, match="page position 4 outside the 4 pages"):
        read_results(tmp_path, 2, 4)
    del good["build_s"]
    (tmp_path / "results.json").write_text(json.dumps(good))
    with pytest.raises(ValueError, match="no 'build_s'"):
        read_results(tmp_path, 2, 5)
    (tmp_path / "results.json").write_text("{")
    with pytest.raises(ValueError, match="unreadable fast-plaid results"):
        read_results(tmp_path, 2, 5)
    assert recall_at_10([[1, 2], [3, 4]], [[2, 1], [4, 9]]) == 0.75


def test_runner_imports_only_what_fast_plaids_python_has() -> None:
    """fast-plaid's side runs under another Python: it may import numpy, torch, fast_plaid and
    the standard library, never vrag_compress (which that environment lacks)."""
    tree = ast.parse(RUNNER.read_text())
    names = {
        (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for a in node.names
    }
    assert names <= {
        "__future__",
        "json",
        "sys",
        "time",
        "pathlib",
        "importlib",
        "numpy",
        "torch",
        "fast_plaid",
    }, names
    assert "fast_plaid" in names


@pytest.mark.skipif(
    not FAST_PLAID_PYTHON.is_file(),
    reason=f"no fast-plaid virtual environment at {FAST_PLAID_PYTHON} "
    "(python -m venv /tmp/fastplaid && /tmp/fastplaid/bin/pip install torch==2.11.0 "
    "fast-plaid==1.7.0.2110; or set VRAG_FAST_PLAID_PYTHON)",
)
def test_side_by_side_run(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    args = ["bench", "plaid", "--python", str(FAST_PLAID_PYTHON), "--pages", "200"]
    args += ["--queries", "8", "--data", "synthetic", "--dir", str(tmp_path), "--json", str(out)]
    args += ["--tokens-full", "200"]  # small pages: both engines' path, not the scale
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    for engine in ("ours", "fast_plaid"):
        r = report[engine]
        assert 0.0 <= r["recall@10"] <= 1.0 and r["p50_ms"] > 0 and r["build_s"] > 0
        assert r["bytes_per_page"] > 0
    assert report["fast_plaid"]["versions"]["fast_plaid"] == "1.7.0.2110"
    assert set(report["ours"]) == {"build_s", "p50_ms", "bytes_per_page", "params", "recall@10"}
    assert not list(tmp_path.glob("vrag-bench-plaid-*"))  # the exchange is removed
    bad = CliRunner().invoke(app, ["bench", "plaid", "--python", str(tmp_path / "nope")])
    assert bad.exit_code == 2 and "--python" in bad.output
