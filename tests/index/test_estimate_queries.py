"""`vrag estimate --queries-file / --judged`, the label-free range, and `vrag bench estimate`'s
options for them (tiny model on images and PDFs here; MiniLM on Cranfield slices)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vrag_compress.beir import load_beir, write_slice
from vrag_compress.cli import app
from vrag_compress.estimate import (
    EstimateError,
    EstimateRow,
    RetentionEstimate,
    point_range,
    row_range,
)
from vrag_compress.estimate.questions import (
    agreement,
    judged_gains,
    measure,
    read_judged,
    read_questions,
)

runner = CliRunner()


def test_questions_are_lines_or_json_lines_and_a_bad_line_is_named(tmp_path: Path):
    plain = tmp_path / "q.txt"
    plain.write_text("what is a wing?\n\n  lift at mach 2  \n")
    assert read_questions(plain) == [("1", "what is a wing?"), ("3", "lift at mach 2")]
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text('{"_id": "a", "text": "wing"}\n{"text": "lift"}\n')
    assert read_questions(jsonl) == [("a", "wing"), ("2", "lift")]
    jsonl.write_text('{"_id": "a", "text": "wing"}\n{"_id": "b"}\n')
    with pytest.raises(EstimateError, match=r"q.jsonl:2: a JSON line needs a non-empty \"text\""):
        read_questions(jsonl)
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(EstimateError, match="no question in it"):
        read_questions(tmp_path / "empty.txt")


def test_judgments_are_read_from_a_qrels_file_or_a_beir_folder(tmp_path: Path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "queries.jsonl").write_text(
        '{"_id": "1", "text": "wing"}\n{"_id": "2", "text": "lift"}\n{"_id": "3", "text": "x"}\n'
    )
    (tmp_path / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n1\td1\t2\n1\td2\t0\n2\td3\t1\n"
    )
    for given in (tmp_path, tmp_path / "qrels" / "test.tsv"):
        questions, qrels = read_judged(given)
        assert questions == [("1", "wing"), ("2", "lift")]  # 3 has no judgment: left out
        assert qrels == {"1": {"d1": 2.0}, "2": {"d3": 1.0}}  # score 0: not relevant
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\n")
    with pytest.raises(EstimateError, match=r"test.tsv:2: expected query-id<TAB>corpus-id"):
        read_judged(tmp_path)
    with pytest.raises(EstimateError, match="no qrels.tsv"):
        read_judged(tmp_path / "qrels")


def test_agreement_is_one_for_the_same_ranking_and_drops_as_the_top_changes():
    rng = np.random.default_rng(0)
    full = rng.random((5, 40))
    overlap, ndcg = agreement(full, full.copy())
    assert overlap == pytest.approx(np.ones(5)) and ndcg == pytest.approx(np.ones(5))
    swapped = full.copy()
    top = np.argsort(-full[0])[:2]
    swapped[0, top] = swapped[0, top[::-1]]  # the first two swap: same pages, worse order
    overlap, ndcg = agreement(full, swapped)
    assert overlap[0] == 1.0 and 0.9 < ndcg[0] < 1.0 and ndcg[1:] == pytest.approx(1.0)
    gone = full.copy()
    gone[0, np.argsort(-full[0])[:10]] = -1.0  # the whole top 10 falls out
    overlap, ndcg = agreement(full, gone)
    assert overlap[0] == 0.0 and ndcg[0] == 0.0


def test_pages_answer_to_any_of_their_ids():
    gains = judged_gains(
        [("doc:1", "doc", "a.pdf"), ("doc:2", "doc"), ("b.pdf:1",)],
        ["q"],
        {"q": {"a.pdf": 2.0, "b.pdf:1": 1.0}},
    )
    assert gains.tolist() == [[2.0, 0.0, 1.0]]


def _pages(n_pages: int = 40, d: int = 16, seed: int = 0):
    from vrag_compress.encoders.base import PageEncoding

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_pages):
        n = int(rng.integers(30, 60))
        x = rng.standard_normal((n, d)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out.append(PageEncoding(x, centrality=rng.random((4, n)).astype(np.float32)))
    return out


def test_identity_keeps_every_answer_and_random_at_a_small_ratio_does_not():
    pages = _pages()
    rng = np.random.default_rng(1)
    queries = [p.vectors[rng.choice(len(p.vectors), 5, replace=False)] for p in pages[:20]]
    gains = np.zeros((20, len(pages)))
    gains[np.arange(20), np.arange(20)] = 1.0  # each question's own page is judged relevant
    rows = measure(
        pages,
        queries,
        ["identity", "random"],
        [0.05],
        gains=gains,
        judged_rows=range(20),
        n_layers=4,
    )
    identity, rand = rows
    assert identity.overlap == identity.ndcg == identity.judged == 1.0
    assert rand.ndcg < 0.9 and rand.judged < 1.0
    assert rand.ndcg_low <= rand.ndcg <= rand.ndcg_high
    assert rand.judged_low <= rand.judged <= rand.judged_high
    assert rand.tokens_per_page < identity.tokens_per_page
    from vrag_compress.estimate.questions import QueryEstimate

    few = QueryEstimate(rows, 40, 40, 5, 0, "m")
    assert "no recommendation from 5 question(s)" in few.recommend(0.5)
    enough = QueryEstimate(rows, 40, 40, 20, 20, "m")
    assert "use random at 0.05 (judged retention@10" in enough.recommend(0.0)


def test_the_judged_interval_is_the_95_percent_one_and_agreement_stays_at_90():
    """The judged interval is what a user chooses by over many cells (JUDGED_LEVEL); the
    agreement intervals keep the issue's 90%."""
    from vrag_compress.estimate import maxsim_matrix, retention_interval
    from vrag_compress.estimate.questions import JUDGED_LEVEL, mean_bootstrap

    pages = _pages()
    rng = np.random.default_rng(1)
    queries = [p.vectors[rng.choice(len(p.vectors), 5, replace=False)] for p in pages[:20]]
    gains = np.zeros((20, len(pages)))
    gains[np.arange(20), np.arange(20)] = 1.0
    (row,) = measure(
        pages, queries, ["random"], [0.05], gains=gains, judged_rows=range(20), n_layers=4
    )
    from vrag_compress.compress import compressor_for
    from vrag_compress.compress.budget_check import ndcg_at

    kept = compressor_for("random", n_layers=4, ratio=0.05).compress_many(list(pages))
    full = maxsim_matrix(queries, [p.vectors for p in pages])
    scores = maxsim_matrix(queries, [c.vectors for c in kept])
    per_full, per_kept = ndcg_at(full, gains, 10), ndcg_at(scores, gains, 10)
    assert JUDGED_LEVEL == 0.95
    assert (row.judged_low, row.judged_high) == pytest.approx(
        retention_interval(per_kept, per_full, 0, 0.95)
    )
    narrower = retention_interval(per_kept, per_full, 0, 0.9)
    assert row.judged_low < narrower[0] and narrower[1] < row.judged_high
    _, ndcg = agreement(full, scores)
    assert (row.ndcg_low, row.ndcg_high) == pytest.approx(mean_bootstrap(ndcg, 0, 0.9))


def test_the_judged_sample_summary_counts_draws_that_cover_nine_in_ten_cells():
    from vrag_compress.estimate import retention_interval
    from vrag_compress_bench.estimate import add_judged_sample

    rng = np.random.default_rng(0)
    full = rng.random(60) + 0.2
    judged = {"uncompressed": full, "uot@0.1": full * 0.95, "sap@0.1": full * rng.random(60)}
    rows = [
        {"method": m, "ratio": 0.1, "measured": float(judged[f"{m}@0.1"].mean() / full.mean())}
        for m in ("uot", "sap")
    ]
    summary = add_judged_sample(rows, judged, 20, 0, repeats=30)
    assert summary["level"] == 0.95 and summary["draws"] == 30
    first = np.random.default_rng(0).choice(60, 20, replace=False)
    want = retention_interval(judged["sap@0.1"][first], full[first], 0, 0.95)
    assert (rows[1]["judged_low"], rows[1]["judged_high"]) == pytest.approx(want)
    # with two cells, "9 in 10" means both: the share of draws covering both cells
    assert summary["draws_covering_nine_in_ten"] <= summary["coverage_over_draws"]
    at_90 = add_judged_sample([dict(r) for r in rows], judged, 20, 0, repeats=30, level=0.9)
    assert at_90["coverage_over_draws"] <= summary["coverage_over_draws"]
    assert at_90["mean_width"] < summary["mean_width"]


def _ranged(lead: float, keyword: float) -> RetentionEstimate:
    row = EstimateRow(
        "uot",
        0.05,
        lead,
        lead - 0.02,
        lead + 0.02,
        0.9,
        0.9,
        8.0,
        keyword,
        keyword - 0.05,
        keyword + 0.05,
    )
    return RetentionEstimate([row], 300, 300, "lead", "m", 160.0)


def test_the_range_recommends_only_when_both_ways_of_asking_keep_the_target():
    # lead 0.99 (0.97-1.01), keyword 0.93 (0.88-0.98): the range runs from interval to interval
    assert row_range(_ranged(0.99, 0.93).rows[0]) == pytest.approx((0.88, 1.01))
    assert point_range(_ranged(0.99, 0.93).rows[0]) == (0.93, 0.99)
    unsettled = _ranged(0.99, 0.93)
    text = unsettled.recommend(0.97)
    assert "not settled" in text and "between 0.880 and 1.010" in text
    assert "0.990 for topical questions, 0.930 for name or keyword lookups" in text
    assert "--queries-file" in text and not unsettled.recommends(0.97)
    settled = _ranged(1.0, 1.03)
    assert "use uot at 0.05 (between 0.980 and 1.080 depending on how your users ask" in (
        settled.recommend(0.97)
    )
    assert settled.to_dict(0.97)["recommends"] is True
    assert "no method and ratio tried reaches it" in _ranged(0.9, 0.8).recommend(0.97)


def test_both_point_estimates_clear_the_target_but_an_interval_does_not():
    """Both figures at 0.99 and 0.98 kept 0.97 under the old range; the keyword estimate's own
    interval reaches 0.93, so another page sample could put it under the target."""
    close = _ranged(0.99, 0.98)
    assert row_range(close.rows[0])[0] == pytest.approx(0.93)
    assert not close.recommends(0.97) and "not settled" in close.recommend(0.97)


def test_a_row_without_an_interval_uses_its_estimate_at_that_end():
    row = _ranged(0.99, 0.93).rows[0]
    row.keyword_low, row.keyword_high = None, float("nan")
    assert row_range(row) == pytest.approx((0.93, 1.01))
    single = EstimateRow("uot", 0.1, 0.95, 0.9, 1.0, 0.9, 0.9, 8.0)
    assert row_range(single) == point_range(single) == (0.95, 0.95)


@pytest.fixture(scope="module")
def tiny_index(arxivqa_uot_index: Path) -> Path:
    """The session's tiny-model index of the ArxivQA sample (tests/index/conftest.py)."""
    return arxivqa_uot_index


def _judged_folder(folder: Path, ids: list[str]) -> Path:
    """Two questions, each judged relevant to one of ``ids`` (BEIR layout)."""
    folder.mkdir()
    (folder / "queries.jsonl").write_text(
        '{"_id": "q1", "text": "a chart of accuracy"}\n{"_id": "q2", "text": "the court"}\n'
    )
    (folder / "qrels.tsv").write_text(
        f"query-id\tcorpus-id\tscore\nq1\t{ids[0]}\t1\nq2\t{ids[1]}\t1\n"
    )
    return folder


def test_questions_and_judgments_on_an_index(tiny_index: Path, tmp_path: Path):
    from vrag_compress import VisualIndex

    with VisualIndex.open(tiny_index, readonly=True) as index:
        ids = sorted(index.store.page_ids())
    asked = tmp_path / "asked.txt"
    asked.write_text("which model is most accurate\nwhat does the figure show\n")
    judged = _judged_folder(tmp_path / "judged", ids[:2])
    args = ["estimate", str(tiny_index), "--ratios", "0.25", "--methods", "uot,random"]
    args += ["--queries-file", str(asked), "--judged", str(judged / "qrels.tsv")]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "on your questions" in table.stdout and "judged retention@10" in table.stdout
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert data["n_queries"] == 4 and data["n_judged"] == 2 and data["n_pages"] == 10
    row = data["rows"][0]
    assert row["overlap_low"] <= row["overlap"] <= row["overlap_high"]
    assert 0 <= row["ndcg"] <= 1 and row["judged"] is not None


def test_questions_and_judgments_on_a_folder_of_pdfs(shared_data: Path, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder)
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", folder)
    judged = _judged_folder(tmp_path / "judged", ["multi_page.pdf:2", "scotus-transcript-p1.pdf"])
    args = ["estimate", str(folder), "--ratios", "0.25", "--methods", "random"]
    args += ["--model", "tiny-colqwen2", "--device", "cpu", "--judged", str(judged), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["n_judged"] == 2 and data["rows"][0]["judged"] is not None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": ""}\n')
    failed = runner.invoke(app, [*args[:-3], "--queries-file", str(bad)])
    assert failed.exit_code == 1 and "bad.jsonl:1" in failed.output


def test_the_default_is_the_range_with_advice_to_pass_questions(shared_data, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder)
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", folder)
    args = ["estimate", str(folder), "--ratios", "0.25", "--methods", "random"]
    result = runner.invoke(app, [*args, "--model", "tiny-colqwen2", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "--queries-file FILE" in " ".join(result.stdout.split())
    data = json.loads(runner.invoke(app, [*args, "--model", "tiny-colqwen2", "--json"]).stdout)
    assert data["rows"][0]["keyword"] is not None  # lead and keyword: the range
    assert any(note.startswith("range: ") for note in data["notes"])


def _cranfield_slice(shared_data: Path, out: Path, n_queries: int = 8) -> Path:
    """The first judged queries with at most 5 judged documents each, those documents and 10
    others (about 40 documents to encode, not the 80 of the first queries: the run checks the
    report's figures and how they relate, which no larger corpus changes)."""
    return write_slice(load_beir(shared_data / "cranfield"), out, n_queries, n_extra=10)


def test_bench_estimate_gives_the_range_the_sampled_judgments_and_the_questions(
    shared_data: Path, tmp_path: Path
):
    folder = _cranfield_slice(shared_data, tmp_path / "cran")
    asked = tmp_path / "asked.txt"
    asked.write_text("boundary layer transition\nheat transfer at hypersonic speed\n")
    out = tmp_path / "e.json"
    args = ["bench", "estimate", "--dataset", str(folder), "--encoder", "minilm"]
    # UOT with 4 EM steps (default 20): the same code path at a fraction of the cost
    args += ["--methods", "identity,uot:iters=4", "--ratios", "0.1", "--window", "3"]
    args += ["--sample", "20"]
    args += ["--queries", "both", "--judged-sample", "5", "--queries-file", str(asked)]
    res = runner.invoke(app, [*args, "--judged", str(folder), "--json", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    rows = {r["method"]: r for r in result["rows"]}
    uot = rows["uot:iters=4"]
    assert {"method", "ratio", "estimated", "measured", "range_low", "range_high"} <= set(uot)
    assert uot["estimated"] == uot["lead"]
    # the range runs from the lower end of the two estimates' intervals to the upper end
    assert uot["range_low"] == min(uot["lead_low"], uot["keyword_low"])
    assert uot["range_high"] == max(uot["lead_high"], uot["keyword_high"])
    assert uot["point_low"] == min(uot["lead"], uot["keyword"])
    assert uot["point_high"] == max(uot["lead"], uot["keyword"])
    assert uot["range_low"] <= uot["point_low"] <= uot["point_high"] <= uot["range_high"]
    assert uot["judged_low"] <= uot["judged_high"] and "judged_sample_covers" in uot
    summary = result["judged_sample"]
    assert summary["n_questions"] == 5 and summary["cells"] == 2 and summary["level"] == 0.95
    assert 0.0 <= summary["draws_covering_nine_in_ten"] <= 1.0
    assert rows["identity"]["agreement_ndcg"] == rows["identity"]["sampled_judged"] == 1.0
    assert uot["agreement_overlap_low"] <= uot["agreement_overlap"] <= uot["agreement_overlap_high"]
    # every judged page is in the sample, so the sampled judged figure is close to all pages'
    assert abs(uot["sampled_judged"] - uot["measured"]) < 0.1
    too_many = runner.invoke(app, [*args[:-6], "--judged-sample", "500", "--json", str(out)])
    assert too_many.exit_code == 2 and "--judged-sample" in too_many.output


def test_the_tail_collection_keeps_the_judgments_and_drops_title_and_lead(
    shared_data: Path, tmp_path: Path
):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "judged_collections", Path(__file__).parents[2] / "tools" / "judged_collections.py"
    )
    assert spec is not None and spec.loader is not None
    tools = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tools)
    out = tools.cranfield_tail(shared_data / "cranfield", tmp_path / "tail")
    source = load_beir(shared_data / "cranfield")
    tail = load_beir(out)
    assert tail.qrels == source.qrels and tail.queries == source.queries
    first = source.doc_ids[0]
    assert tail.docs[first] and tail.docs[first][-60:] in source.docs[first]
    assert len(tail.docs[first]) < len(source.docs[first]) - 40  # title and first sentence gone
    assert not tail.docs[first].startswith(source.docs[first][:30])
