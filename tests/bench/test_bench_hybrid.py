"""`vrag bench retention --mode hybrid` and `vrag bench lexical`: BM25 through the store's text
index, fusion through the store's own fusion, on a Cranfield slice and a hand-made corpus."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.beir import BeirDataset
from vrag_compress.cli.app import app
from vrag_compress_bench.eval.hybrid import ALPHAS, bm25_rankings, fused_run, run_hybrid
from vrag_compress_bench.lexical import page_texts

DOCS = {
    "d1": "shock wave boundary layer interaction",
    "d2": "heat transfer to a blunt body",
    "d3": "buckling of cylindrical shells",
    "d4": "boundary layer on a flat plate",
}
QUERIES = {"q1": "boundary layer", "q2": "buckling shells", "q3": "heat transfer"}
QRELS = {"q1": {"d4": 2, "d1": 1}, "q2": {"d3": 1}, "q3": {"d2": 1}}
DATA = BeirDataset("toy", "text", DOCS, QUERIES, QRELS)
IDS = list(DOCS)


def test_bm25_rankings_come_from_the_store_text_index():
    ranked = bm25_rankings(DATA, IDS, list(QUERIES), depth=10)
    assert {d for d, _ in ranked["q1"]} == {"d1", "d4"}
    assert [d for d, _ in ranked["q2"]] == ["d3"]
    assert all(s > 0 for r in ranked.values() for _, s in r)


def test_fused_run_follows_rrf_and_alpha():
    visual = {"q": [("a", 3.0), ("b", 2.0), ("c", 1.0)]}
    text = {"q": [("c", 9.0), ("d", 1.0)]}
    rrf = fused_run(visual, text, None)["q"]
    assert list(rrf) == ["c", "a", "b", "d"]  # c: 1/63 + 1/61 beats a: 1/61
    assert list(fused_run(visual, text, 1.0)["q"])[:3] == ["a", "b", "c"]
    assert list(fused_run(visual, text, 0.0)["q"])[:2] == ["c", "d"]


def test_run_hybrid_reports_every_fusion_and_the_best_alpha():
    # a visual ranking that is perfect for q2 and q3 and wrong for q1
    scores = np.array([[0, 0, 1, 0], [0, 0, 1, 0], [0, 1, 0, 0]], dtype=float)
    result = run_hybrid(DATA, IDS, list(QUERIES), QRELS, {"oracle-ish": scores})
    assert 0 < result["bm25"]["ndcg@10"] <= 1
    row = result["rows"][0]
    assert [f["alpha"] for f in row["fusions"]] == [None, *ALPHAS]
    assert row["fusions"][0]["fusion"] == "rrf"
    best = max(f["ndcg@10"] for f in row["fusions"][1:])
    assert next(f for f in row["fusions"] if f["alpha"] == row["best_alpha"])["ndcg@10"] == best
    # BM25 gets q1 right and the visual side q2/q3: fusing beats the visual side alone
    assert row["fusions"][0]["ndcg@10"] > row["visual_metrics"]["ndcg@10"]


def test_page_texts_have_the_asked_length():
    pages = page_texts(list(DOCS.values()), 5, 40, seed=1)
    assert len(pages) == 5 and all(len(p.split()) == 40 for p in pages)


@pytest.mark.slow
def test_retention_cli_hybrid_mode(cranfield_slice: Path, encodings_cache: Path, tmp_path: Path):
    from tests.bench.test_eval_runner import UOT

    folder = cranfield_slice
    out, png = tmp_path / "r.json", tmp_path / "h.png"
    args = ["bench", "retention", "--dataset", str(folder), "--methods", UOT, "--ratios", "0.1"]
    args += ["--cache-dir", str(encodings_cache)]
    args += ["--window", "3", "--mode", "hybrid", "--json", str(out), "--hybrid-plot", str(png)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "BM25 (store text mode)" in res.output and "hybrid RRF" in res.output
    hybrid = json.loads(out.read_text())["hybrid"]
    assert [r["visual"] for r in hybrid["rows"]] == ["uncompressed", f"{UOT}@0.1"]
    assert png.stat().st_size > 0
    bad = CliRunner().invoke(app, [*args[:-6], "--mode", "bm25", "--json", str(out)])
    assert bad.exit_code == 2


def test_lexical_bench_cli(shared_data: Path, tmp_path: Path):
    out = tmp_path / "lex.json"
    args = ["bench", "lexical", "--pages", "50", "--words", "60", "--queries", "5"]
    res = CliRunner().invoke(app, [*args, "--repeat", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    row = json.loads(out.read_text())["rows"][0]
    assert row["pages"] == 50 and row["queries"] == 5 and row["mean_hits"] > 0
    assert row["p95_ms"] >= row["p50_ms"] > 0
    assert CliRunner().invoke(app, ["bench", "lexical", "--pages", "0"]).exit_code == 2


def test_lexical_bench_against_bm25s_and_fts5_in_one_run(shared_data: Path, tmp_path: Path):
    out = tmp_path / "lex.json"
    args = ["bench", "lexical", "--pages", "40", "--words", "50", "--queries", "6", "--repeat", "1"]
    res = CliRunner().invoke(app, [*args, "--against", "bm25s,fts5", "--json", str(out)])
    assert res.exit_code == 0, res.output
    row = json.loads(out.read_text())["rows"][0]
    assert row["open_s"] > 0
    for other in ("bm25s", "fts5"):
        assert row[other]["p95_ms"] >= row[other]["p50_ms"] > 0
    assert 0.5 <= row["overlap@10"] <= 1 and 0.5 <= row["fts5"]["overlap@10"] <= 1
    bad = CliRunner().invoke(app, [*args, "--against", "lucene"])
    assert bad.exit_code == 2 and "--against" in bad.output


def test_lexical_bench_judged_compares_the_engines_on_the_judgments(tmp_path: Path):
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in DOCS.items())
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items())
    )
    (folder / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}\t{g}\n" for q, ds in QRELS.items() for d, g in ds.items())
    )
    out = tmp_path / "j.json"
    args = ["bench", "lexical", "--dataset", str(folder), "--pages", "4", "--words", "5"]
    res = CliRunner().invoke(app, [*args, "--queries", "3", "--judged", "--json", str(out)])
    assert res.exit_code == 0, res.output
    judged = json.loads(out.read_text())["judged"]
    assert judged["documents"] == 4 and judged["queries"] == 3
    assert judged["tantivy_ndcg@10"] == judged["fts5_ndcg@10"] > 0.9  # the toy's answers are clear
    assert judged["overlap@10"] == 1.0
