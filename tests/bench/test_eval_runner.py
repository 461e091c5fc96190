"""End to end: `vrag bench retention` on a slice of Cranfield with MiniLM, and the visual smoke
run on the ViDoRe ArxivQA sample with tiny-colqwen2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.beir import load_beir, write_slice
from vrag_compress.cli.app import app
from vrag_compress_bench.eval.runner import (
    BenchmarkError,
    MethodSpec,
    encode_corpus,
    load_benchmark_encoder,
    run_retention,
)

pytestmark = pytest.mark.slow  # end to end with real models and data

UOT = "uot:iters=4"
"""UOT with 4 EM steps (default 20) where a run only needs its rows: the same code path, at a
fraction of the cost."""

ROW_KEYS = {
    "method": str,
    "ratio": float,
    "ndcg@10": float,
    "ndcg@5": float,
    "recall@1": float,
    "retention@10": float,
    "sr": float,
    "tokens_per_doc": float,
}


def _cranfield_slice(shared_data: Path, out: Path, n_queries: int = 6, n_extra: int = 12) -> Path:
    """A small BEIR folder: the first judged queries with at most 5 judged docs each, those docs,
    some other docs and "471" (no text). About 36 docs, not the 66 of the first 6 queries: the
    runs on it check the reports' rows and how their figures relate, not their size."""
    return write_slice(load_beir(shared_data / "cranfield"), out, n_queries, n_extra, also=("471",))


def _check_schema(result: dict) -> None:
    for key, kind in {
        "dataset": str,
        "encoder": str,
        "n_queries": int,
        "n_docs": int,
        "window": list,
        "full": dict,
        "results": list,
    }.items():
        assert isinstance(result[key], kind), key
    assert all(isinstance(layer, int) for layer in result["window"])
    assert {"ndcg@10", "ndcg@5", "ndcg@1", "recall@1"} <= set(result["full"])
    for row in result["results"]:
        for key, kind in ROW_KEYS.items():
            assert isinstance(row[key], kind), (row["method"], key)


def test_cli_on_a_cranfield_slice(cranfield_slice: Path, encodings_cache: Path, tmp_path: Path):
    folder = cranfield_slice
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    args = [
        "bench",
        "retention",
        "--dataset",
        str(folder),
        "--encoder",
        "minilm",
        "--methods",
        f"identity sap {UOT} random sap-sink adaptive-eos",
        "--ratios",
        "0.25,0.1",
        "--window",
        "auto",
        "--calibration-queries",
        "2",
        "--json",
        str(out),
        "--plot",
        str(png),
        "--kept-tokens",
        "--cache-dir",
        str(encodings_cache),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "uncompressed" in res.output
    result = json.loads(out.read_text())
    _check_schema(result)
    assert result["n_queries"] == 4  # 6 judged queries minus 2 held out for calibration
    assert result["calibration"]["held_out"] and len(result["calibration"]["sr_curve"]) == 6
    assert result["skipped_docs"] == ["471"]
    assert result["n_docs"] == len(load_beir(folder).docs) - 1
    rows = {(r["method"], r["ratio"]): r for r in result["results"]}
    assert len(rows) == 12
    for ratio in (0.25, 0.1):
        identity = rows[("identity", ratio)]
        assert identity["retention@10"] == 1.0 and identity["sr"] == 1.0
        assert identity["tokens_per_doc"] == result["tokens_per_doc_full"]
        # pruning keeps original vectors: SR <= 1; budgets follow ceil(ratio * N)
        assert rows[("sap", ratio)]["sr"] <= 1.0 + 1e-9
        assert rows[("sap", ratio)]["tokens_per_doc"] == rows[(UOT, ratio)]["tokens_per_doc"]
    assert rows[("sap", 0.1)]["tokens_per_doc"] < rows[("sap", 0.25)]["tokens_per_doc"]
    assert "sap@0.1" in result["kept_tokens"] and f"{UOT}@0.1" not in result["kept_tokens"]
    assert png.stat().st_size > 0


def test_codes_score_the_vectors_as_a_code_store_keeps_them(
    cranfield_slice: Path, encodings_cache: Path, tmp_path: Path
):
    folder = cranfield_slice
    out = tmp_path / "r.json"
    args = ["bench", "retention", "--dataset", str(folder), "--methods", f"identity {UOT}"]
    args += ["--cache-dir", str(encodings_cache)]
    args += ["--ratios", "0.1", "--window", "3", "--codes", "fp16,4bit,2bit", "--json", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    _check_schema(result)
    rows = {(r["method"], r["codes"]): r for r in result["results"]}
    assert len(rows) == 6
    assert rows[("identity", "fp16")]["retention@10"] == pytest.approx(1.0, abs=1e-6)
    for method in ("identity", UOT):
        sizes = [rows[(method, c)]["size_vs_fp16_full"] for c in ("fp16", "4bit", "2bit")]
        assert sizes == sorted(sizes, reverse=True)
        assert rows[(method, "2bit")]["bytes_per_token"] < rows[(method, "fp16")]["bytes_per_token"]
    bad = CliRunner().invoke(app, [*args[:-4], "--codes", "3bit", "--json", str(out)])
    assert bad.exit_code == 2 and "--codes" in bad.output


def test_visual_smoke_on_arxivqa_with_tiny_colqwen2(shared_data: Path) -> None:
    ds = load_beir(shared_data / "vidore_arxivqa_sample")
    encoder = load_benchmark_encoder("tiny-colqwen2", ds.kind, device="cpu")
    corpus = encode_corpus(ds, encoder)
    assert len(corpus.pages) == 10 and corpus.pages[0].centrality.shape[0] == encoder.n_layers
    result = run_retention(ds, corpus, ["identity", "sap", "uot", "random"], [0.25], window="auto")
    _check_schema(result)
    assert result["n_queries"] == 2 and result["calibration"]["held_out"] is False
    identity = next(r for r in result["results"] if r["method"] == "identity")
    assert identity["retention@10"] == 1.0


def test_bad_benchmark_inputs(shared_data: Path) -> None:
    assert MethodSpec.parse("sap-sink:dedup=0.8:sink_z=null").params == {
        "dedup": 0.8,
        "sink_z": None,
    }
    with pytest.raises(BenchmarkError, match="key=value"):
        MethodSpec.parse("sap:oops")
    ds = load_beir(shared_data / "vidore_arxivqa_sample")
    with pytest.raises(BenchmarkError, match="outside"):
        run_retention(ds, None, ["identity"], [1.5])  # type: ignore[arg-type]


def test_bench_estimate_puts_the_estimate_beside_the_judged_retention(
    cranfield_slice: Path, encodings_cache: Path, tmp_path: Path
):
    folder = cranfield_slice
    out = tmp_path / "e.json"
    args = ["bench", "estimate", "--dataset", str(folder), "--encoder", "minilm"]
    args += ["--cache-dir", str(encodings_cache)]
    args += ["--methods", f"identity,{UOT},random", "--ratios", "0.25,0.1", "--window", "3"]
    res = CliRunner().invoke(app, [*args, "--sample", "30", "--draws", "2", "--json", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    rows = {(r["method"], r["ratio"]): r for r in result["rows"]}
    assert len(rows) == 6 and {"method", "ratio", "estimated", "measured"} <= set(rows[(UOT, 0.1)])
    assert rows[("identity", 0.1)]["estimated"] == rows[("identity", 0.1)]["measured"] == 1.0
    assert rows[(UOT, 0.1)]["error"] == pytest.approx(
        rows[(UOT, 0.1)]["estimated"] - rows[(UOT, 0.1)]["measured"]
    )
    assert set(result["same_order"]) == set(result["same_order_settled"]) == {"0.25", "0.1"}
    assert result["estimate"]["query_kind"] == "lead" and result["estimate"]["n_pages"] > 20
    corpus_size = sum(1 for _ in (folder / "corpus.jsonl").open())
    # scaled to the encoded corpus (documents with no text are not encoded)
    assert 30 < result["estimate"]["collection_pages"] <= corpus_size
    uot = rows[(UOT, 0.1)]
    assert len(uot["draws"]) == 2 and uot["estimated"] == pytest.approx(np.mean(uot["draws"]))
    assert uot["measured_low"] <= uot["measured"] <= uot["measured_high"]
    assert uot["within_measured_interval"] == (
        uot["measured_low"] <= uot["estimated"] <= uot["measured_high"]
    )
    identity = rows[("identity", 0.1)]
    assert identity["measured_low"] == identity["measured_high"] == 1.0
    pairs = [p for p in result["order_pairs"] if p["ratio"] == 0.1]
    assert len(pairs) == 3  # identity-uot, identity-random, uot-random
    identity_uot = next(p for p in pairs if {p["a"], p["b"]} == {"identity", UOT})
    assert identity_uot["p_judged_a_better"] + identity_uot["p_judged_b_better"] <= 1.0
    assert result["estimate"]["n_queries_per_draw"][0] == result["estimate"]["n_queries"]
    assert len(result["estimate"]["fallback_queries_per_draw"]) == 2


def _row(method: str, estimated: float, measured: float) -> dict:
    return {"method": method, "ratio": 0.5, "estimated": estimated, "measured": measured}


def test_order_pairs_settle_clear_winners_and_never_ties():
    from vrag_compress_bench.estimate import order_pairs, settled_order

    full = np.random.default_rng(0).random(120) + 0.1
    judged = {"uncompressed": full, "a@0.5": full, "b@0.5": 0.8 * full, "c@0.5": full.copy()}
    rows = [_row("a", 0.99, 1.0), _row("b", 0.85, 0.8), _row("c", 0.98, 1.0)]
    pairs = {(p["a"], p["b"]): p for p in order_pairs(rows, judged)}
    clear = pairs[("a", "b")]
    assert clear["p_judged_a_better"] == 1.0 and clear["settled"] and clear["agrees"]
    tie = pairs[("a", "c")]  # identical per-query values: no resample prefers either
    assert tie["p_judged_a_better"] == tie["p_judged_b_better"] == 0.0 and not tie["settled"]
    assert settled_order(list(pairs.values())) == {"0.5": True}
    rows[1] = _row("b", 1.2, 0.8)  # the estimate reverses a settled pair
    assert settled_order(order_pairs(rows, judged)) == {"0.5": False}
