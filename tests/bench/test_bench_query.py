"""`vrag bench query STORE`: times searches on an existing store (no rebuild), per thread
count, with recall against exact search; a folder that is not a store is a usage error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.cli.app import app
from vrag_compress.store import LocalStore, PageRecord


def _store(path: Path) -> Path:
    rng = np.random.default_rng(0)
    config = {"dim": 16, "model_id": "bench/query", "codes": "2bit", "fp16": False}
    with LocalStore.create(path, config, codes_min_tokens=500) as store:
        pages = rng.normal(size=(150, 8, 16)).astype(np.float32)
        store.add([PageRecord(f"p{i:03d}", "d", i + 1, v) for i, v in enumerate(pages)])
        store.optimize()
    return path


def test_timing_an_existing_store(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    out = tmp_path / "q.json"
    args = ["bench", "query", str(store), "--queries", "6", "--threads", "1,2", "--recall"]
    result = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["pages"] == 150 and report["queries"] == 6
    assert set(report["latency_ms_by_threads"]) == {"1", "2"}
    for lat in report["latency_ms_by_threads"].values():
        assert 0 < lat["p50"] <= lat["p95"]
    assert 0 < report["first_query_s"] and 0.0 <= report["recall@10"] <= 1.0


def test_a_folder_that_is_not_a_store_or_a_bad_mode_is_a_usage_error(tmp_path: Path) -> None:
    bad = CliRunner().invoke(app, ["bench", "query", str(tmp_path)])
    assert bad.exit_code == 2 and "not a store folder" in bad.output
    store = _store(tmp_path / "s")
    bad_mode = CliRunner().invoke(app, ["bench", "query", str(store), "--mode", "fast"])
    assert bad_mode.exit_code == 2
