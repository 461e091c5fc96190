"""`vrag bench store` on a store that keeps only codes: its answers are also measured against
exact MaxSim over the fp16 vectors it was given (`recall@10_vs_fp16`), for 1-bit codes too."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.cli.app import app
from vrag_compress.scoring import maxsim
from vrag_compress_bench.store import _fp16_top10


def test_the_fp16_reference_is_the_exact_top10_over_every_batch():
    rng = np.random.default_rng(0)
    pages = rng.normal(size=(50, 6, 16)).astype(np.float16)
    qs = [rng.normal(size=(3, 16)).astype(np.float32) for _ in range(4)]
    got = _fp16_top10(pages, qs, batch=7)  # several batches, the last one short
    for q, ids in zip(qs, got, strict=True):
        scores = [maxsim(q, p.astype(np.float32)) for p in pages]
        want = [f"page-{i:07d}" for i in np.argsort(scores)[::-1][:10]]
        assert ids == want


def test_a_codes_only_run_reports_recall_against_the_fp16_vectors(tmp_path: Path):
    args = ["bench", "store", "--pages", "200", "--tokens-full", "60", "--queries", "8"]
    args += ["--bruteforce-queries", "0", "--no-full-store", "--dim", "32"]
    args += ["--codes", "1bit", "--no-fp16", "--json", str(tmp_path / "r.json")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    coded = json.loads((tmp_path / "r.json").read_text())
    assert coded["params"]["codes"] == "1bit" and coded["config"]["fp16"] is False
    vs = coded["recall@10_vs_fp16"]
    assert 0 < vs["two_stage"] <= 1 and 0 < vs["exact"] <= 1
    assert vs["exact"] < 1  # one bit a dimension does change some answers
