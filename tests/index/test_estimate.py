"""`vrag estimate` and `estimate_retention`: label-free retention estimates on an index or a
folder (tiny model here; MiniLM on Cranfield in `vrag bench estimate`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vrag_compress.cli import app
from vrag_compress.encoders.base import PageEncoding
from vrag_compress.estimate import (
    MIN_PAGES_TO_RECOMMEND,
    EstimateError,
    PseudoQueries,
    cloze_split,
    estimate_pages,
    estimate_retention,
    image_queries,
    keyword_splits,
    lead_splits,
    pseudo_splits,
    retention_interval,
    token_span_queries,
)

runner = CliRunner()


def pages(seed: int = 0, n_pages: int = 30, d: int = 24) -> list[PageEncoding]:
    """Pages about a few topics each (tokens scattered around 6 page-specific directions)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_pages):
        n = int(rng.integers(40, 80))
        topics = rng.standard_normal((6, d))
        x = (topics[rng.integers(0, 6, n)] + 0.6 * rng.standard_normal((n, d))).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        stats = rng.random((4, n)).astype(np.float32)
        out.append(PageEncoding(x, centrality=stats, eos_attention=stats))
    return out


def test_cloze_split_takes_one_long_sentence_out():
    rng = np.random.default_rng(0)
    text = "Short one. The boundary layer separates at high mach numbers here. Tail."
    query, rest = cloze_split(text, rng)
    assert query == "The boundary layer separates at high mach numbers here."
    assert rest == "Short one. Tail."
    assert cloze_split("Only one sentence with enough words in it.", rng) is None
    assert cloze_split(None, rng) is None


def test_the_lead_is_the_first_heading_or_sentence_that_is_not_a_running_head():
    running_head = "Federal Register / Vol. 80, No. 4"
    texts = [
        f"{running_head}\nWing flutter at transonic speed\nBody text about flutter. More text.",
        f"{running_head}\n- 12 -\nHeat transfer in laminar boundary layers. Body text here.",
        "experimental study of a wing . the results were intended as a basis . tail text .",
        " ".join(["word"] * 40) + ". A second sentence follows here.",  # opens with body text
        "One unit only, no lead to take out of it",
    ]
    splits = lead_splits(texts)
    assert splits[0] == (
        "Wing flutter at transonic speed",
        f"{running_head} Body text about flutter. More text.",
    )
    assert splits[1][0] == "Heat transfer in laminar boundary layers."  # "- 12 -": no words
    assert splits[2][0] == "experimental study of a wing ."  # Cranfield: the title
    assert splits[3] is None and splits[4] is None


def test_pages_without_a_lead_fall_back_to_a_random_sentence():
    text = " ".join(["word"] * 40) + ". The boundary layer separates at high mach numbers here."
    lead = pseudo_splits([text], "lead", np.random.default_rng(0))[0]
    assert lead == pseudo_splits([text], "sentence", np.random.default_rng(0))[0]
    assert lead[0] == (
        "The boundary layer separates at high mach numbers here.",
        " ".join(["word"] * 40) + ".",
    )
    with pytest.raises(EstimateError, match="query kind"):
        pseudo_splits([text], "title", np.random.default_rng(0))


def test_a_lead_leaves_something_of_the_page_to_find_and_goes_out_whole():
    slides = ["ACME Corp\nQuarterly revenue overview\n- 3 -", "ACME Corp\nHiring plan 2025\n- 4 -"]
    assert lead_splits(slides) == [None, None]  # only the shared head and a page number left
    doubled = ["Wing flutter\nWing flutter\nBody text about wings.", "Other page\nMore words here"]
    assert lead_splits(doubled)[0] == ("Wing flutter", "Body text about wings.")


class _Queries:
    """An encoder stand-in for `image_queries`: one random vector per query text."""

    def encode_queries(self, texts):  # noqa: ANN001, ANN201
        rng = np.random.default_rng(len(texts))
        return [rng.standard_normal((3, 24)).astype(np.float32) for _ in texts]


def test_pages_without_a_lead_are_counted_and_reported():
    texts = [f"Heading {i} of this page\nBody sentence {i} is long enough here." for i in range(6)]
    texts[0] = " ".join(["word"] * 40) + ". The boundary layer separates at high mach numbers."
    pseudo = image_queries(pages(n_pages=6), texts, _Queries())  # type: ignore[arg-type]
    assert pseudo.kind == "lead" and len(pseudo.queries) == 6 and pseudo.fallbacks == 1
    result = estimate_pages(pseudo, ["random"], [0.5])
    assert result.fallback_queries == 1 and "1 of 6 pseudo-queries" in result.notes[0]


def test_retention_interval_brackets_the_ratio_of_means():
    rng = np.random.default_rng(3)
    full = rng.random(400)
    compressed = full * 0.9 + 0.05 * rng.standard_normal(400)
    low, high = retention_interval(compressed, full)
    assert low < compressed.mean() / full.mean() < high and high - low < 0.05
    assert retention_interval(full, full) == (1.0, 1.0)
    assert all(np.isnan(retention_interval(full[:1], full[:1])))  # one query: no interval
    assert all(np.isnan(retention_interval(full * 0, full * 0)))  # nothing found at all


def test_token_span_queries_remove_the_span_from_their_page():
    pseudo = token_span_queries(pages(), np.random.default_rng(0), span=12)
    assert pseudo.kind == "tokens" and len(pseudo.queries) == len(pseudo.sources) == 30
    for query, source in zip(pseudo.queries, pseudo.sources, strict=True):
        page = pseudo.pages[source]
        assert query.shape[0] == 12 and page.centrality.shape[1] == page.n_tokens
        assert not (page.vectors @ query.T > 0.9999).any()  # the span is no longer in the page


def test_identity_keeps_everything_and_random_at_small_ratios_loses():
    pseudo = token_span_queries(pages(), np.random.default_rng(1))
    result = estimate_pages(pseudo, ["identity", "random", "sap:layers=[1,2]"], [0.5, 0.05])
    rows = {(r.method, r.ratio): r for r in result.rows}
    assert len(result.rows) == 6
    full = rows[("identity", 0.5)]
    assert (full.estimated, full.low, full.high, full.sr, full.rank_agreement) == (1.0,) * 5
    assert all(r.low <= r.estimated <= r.high for r in result.rows)
    assert rows[("random", 0.05)].estimated < rows[("random", 0.5)].estimated
    assert rows[("random", 0.05)].tokens_per_page < rows[("random", 0.5)].tokens_per_page
    assert 0 < rows[("random", 0.05)].sr < 1


def test_the_recommendation_is_the_smallest_budget_that_keeps_the_target():
    pseudo = token_span_queries(pages(2), np.random.default_rng(2))
    result = estimate_pages(pseudo, ["identity", "random"], [0.5, 0.25])
    line = result.recommend(0.5, min_pages=2)
    assert line.startswith("keep >= 0.5: use ")
    reached = [r for r in result.rows if r.estimated >= 0.5]
    best = min(reached, key=lambda r: r.tokens_per_page)
    assert f"{best.method} at {best.ratio:g}" in line
    assert "no method and ratio tried reaches it" in result.recommend(1.01, min_pages=2)
    assert json.loads(result.to_json())["recommendation"] == result.recommend()


def test_a_small_sample_recommends_nothing_and_says_why():
    pseudo = token_span_queries(pages(4), np.random.default_rng(2))
    result = estimate_pages(pseudo, ["identity", "random"], [0.5, 0.25])
    line = result.recommend(0.5)
    assert result.n_pages < MIN_PAGES_TO_RECOMMEND
    assert "no recommendation from" in line and "use " not in line
    assert json.loads(result.to_json(0.5))["recommends"] is False


def test_too_few_pages_is_a_clear_error():
    with pytest.raises(EstimateError, match="at least 2 pages"):
        estimate_pages(PseudoQueries(pages()[:1], [], [], "tokens"), ["random"], [0.1])


@pytest.fixture(scope="module")
def tiny_index(arxivqa_uot_index: Path) -> Path:
    """The session's tiny-model index of the ArxivQA sample (tests/index/conftest.py)."""
    return arxivqa_uot_index


def test_estimate_runs_on_an_index(tiny_index: Path):
    args = ["estimate", str(tiny_index), "--ratios", "0.25,0.1", "--methods", "sap,random"]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "estimated retention" in table.stdout and "keep >= 0.97:" in table.stdout
    assert "no recommendation from 10 sampled pages" in table.stdout  # 10 pages: too few
    assert "estimate: random @ 0.1" in table.stderr  # the progress bar's last step
    code = runner.invoke(app, [*args, "--json"])  # like every other command: JSON on stdout
    assert code.exit_code == 0, code.output
    data = json.loads(code.stdout)
    assert data["recommends"] is False and "estimate:" not in code.stderr
    assert [(r["method"], r["ratio"]) for r in data["rows"]] == [
        ("sap", 0.25),
        ("sap", 0.1),
        ("random", 0.25),
        ("random", 0.1),
    ]
    assert data["n_pages"] == 10 and data["query_kind"] == "tokens"  # figures: no text layer
    assert data["collection_pages"] == 10  # the sample is the whole index


def test_the_estimate_predicts_rankings_in_the_whole_index(tiny_index: Path):
    args = ["estimate", str(tiny_index), "--ratios", "0.1", "--methods", "random", "--json"]
    args += ["--sample", "6", "--neighbours", "0"]
    scaled = json.loads(runner.invoke(app, args).stdout)
    assert scaled["n_pages"] == 6 and scaled["collection_pages"] == 10
    alone = json.loads(runner.invoke(app, [*args, "--sample-only"]).stdout)
    assert alone["collection_pages"] == 6
    assert scaled["rows"][0]["estimated"] != alone["rows"][0]["estimated"]


def test_a_larger_collection_pushes_relevant_pages_down_as_the_sample_predicts():
    from vrag_compress.compress.budget_check import ndcg_at
    from vrag_compress.estimate import collection_ndcg

    # one relevant page (gain 2) with one of its two sampled distractors above it
    scores, gains = np.array([[0.5, 0.9, 0.1]]), np.array([[2.0, 0.0, 0.0]])
    assert collection_ndcg(scores, gains, 3) == pytest.approx(ndcg_at(scores, gains))
    # two unsampled pages, each above it with chance 1/2: rank 2, 3 or 4 (1/4, 1/2, 1/4)
    expected = 0.25 / np.log2(3) + 0.5 / np.log2(4) + 0.25 / np.log2(5)
    assert collection_ndcg(scores, gains, 5) == pytest.approx([expected])
    # no sampled page above it: it stays first however large the collection
    first = np.array([[0.95, 0.9, 0.1]])
    assert collection_ndcg(first, gains, 10_000) == pytest.approx([1.0])
    # more pages never lift a ranking, and a page with all distractors above drops out of the top
    rng = np.random.default_rng(0)
    many, graded = rng.random((20, 50)), (rng.random((20, 50)) < 0.1) * 1.0
    sizes = [collection_ndcg(many, graded, n).mean() for n in (50, 100, 500, 5000)]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0]


def test_both_query_styles_put_keyword_lookups_beside_questions(shared_data, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder)
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", folder)
    args = ["estimate", str(folder), "--ratios", "0.25", "--methods", "random"]
    args += ["--model", "tiny-colqwen2", "--device", "cpu", "--queries", "both"]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "lookups" in table.stdout and "keyword column:" in table.stdout
    assert "(--draws 3)" in table.stdout  # one sample: the keyword column is told to pool
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    row = data["rows"][0]
    assert data["query_kind"] == "lead"
    assert row["keyword_low"] <= row["keyword"] <= row["keyword_high"]
    single = json.loads(runner.invoke(app, [*args[:-1], "keyword", "--json"]).stdout)
    assert single["query_kind"] == "keyword" and single["rows"][0]["estimated"] == row["keyword"]
    assert single["rows"][0]["keyword"] is None


def test_estimate_runs_on_a_folder_of_documents(shared_data: Path, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder)
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", folder)
    result = estimate_retention(
        folder, methods=["uot", "random"], ratios=[0.25], model="tiny-colqwen2", device="cpu"
    )
    assert result.query_kind == "lead"  # the pages' text layers give the pseudo-queries
    assert result.n_pages >= 3 and all(0 < r.estimated <= 1.5 for r in result.rows)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ratios", "1.5"], "keep ratios must be in"),
        (["--methods", "nosuch"], "unknown method"),
        (["--queries", "title"], "choose lead, sentence, keyword, both"),
    ],
)
def test_bad_usage_exits_2(tiny_index: Path, args: list[str], message: str):
    result = runner.invoke(app, ["estimate", str(tiny_index), *args])
    assert result.exit_code == 2 and message in result.output


def test_a_missing_source_exits_2(tmp_path: Path):
    result = runner.invoke(app, ["estimate", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such index, folder or file" in result.output


def test_pseudo_relevance_grades_the_own_page_and_its_nearest_pages():
    from vrag_compress.estimate import collection_ndcg, pseudo_gains

    pool = pages(3, n_pages=8)
    gains = pseudo_gains(pool, [0, 5], neighbours=2)
    assert gains[0, 0] == 2.0 and gains[1, 5] == 2.0
    assert (gains == 1.0).sum(axis=1).tolist() == [2, 2] and gains[0, 0] != 1.0
    only_own = pseudo_gains(pool, [0, 5], neighbours=0)
    assert only_own.sum() == 4.0
    ideal = gains + 0.001 * np.arange(8)[::-1]  # a ranking that follows the gains is ideal
    assert collection_ndcg(ideal, gains, 8) == pytest.approx([1.0, 1.0])
    worst = -gains
    assert (collection_ndcg(worst, gains, 8) < 0.5).all()


def _copy(index: Path, tmp_path: Path) -> Path:
    path = tmp_path / "copy.vrag"
    shutil.copytree(index, path)
    return path


def _schema(path: Path) -> int:
    import sqlite3

    from vrag_compress.store.local import catalog as cat

    conn = sqlite3.connect(path / cat.CATALOG_NAME)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    finally:
        conn.close()
    return int(row[0])


def test_estimate_reads_an_index_a_writer_holds(tiny_index: Path, tmp_path: Path):
    from vrag_compress import VisualIndex

    path = _copy(tiny_index, tmp_path)
    with VisualIndex.open(path):  # as `vrag serve` or `vrag index` would
        result = runner.invoke(
            app, ["estimate", str(path), "--ratios", "0.25", "--methods", "random"]
        )
    assert result.exit_code == 0, result.output
    assert "estimated retention" in result.output


def test_estimate_leaves_an_old_index_at_its_schema(tiny_index: Path, tmp_path: Path, make_old):
    path = _copy(tiny_index, tmp_path)
    make_old(path)
    result = runner.invoke(app, ["estimate", str(path), "--ratios", "0.25", "--methods", "random"])
    assert result.exit_code == 0, result.output
    assert _schema(path) == 1  # read, not upgraded


def test_estimate_on_a_newer_index_is_a_clean_error(tiny_index: Path, tmp_path: Path):
    import sqlite3

    from vrag_compress.store.local import catalog as cat

    path = _copy(tiny_index, tmp_path)
    conn = sqlite3.connect(path / cat.CATALOG_NAME, isolation_level=None)
    conn.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(cat.SCHEMA_VERSION + 1),)
    )
    cat.seal_meta(conn)
    conn.close()
    result = runner.invoke(app, ["estimate", str(path), "--ratios", "0.25", "--methods", "random"])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # a message, no traceback
    assert "newer" in result.output


def test_a_folder_sample_renders_only_the_drawn_pages(
    shared_data: Path, tmp_path: Path, monkeypatch
):
    from vrag_compress import ingest
    from vrag_compress.estimate.sampling import folder_sample

    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder)  # 1 page
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", folder)  # 5 pages
    rendered: list[tuple[str, int]] = []
    render = ingest.PdfDocument._render

    def counting(self, page_no):  # noqa: ANN001, ANN202
        rendered.append((self.source.name, page_no))
        return render(self, page_no)

    monkeypatch.setattr(ingest.PdfDocument, "_render", counting)
    texts, images, total = folder_sample(folder, 3, seed=0)
    assert len(texts) == len(images) == 3 and len(rendered) == 3  # not all 6 pages
    assert total == 6  # the estimate is scaled to all of them
    assert len(set(rendered)) == 3
    rendered.clear()
    assert len(folder_sample(folder, 300, seed=0)[0]) == 6 and len(rendered) == 6


def test_a_one_page_source_says_so(shared_data: Path, tmp_path: Path):
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder)
    with pytest.raises(EstimateError, match="at least 2 pages") as error:
        estimate_retention(folder, methods=["random"], ratios=[0.25], model="tiny-colqwen2")
    assert "sample more" not in str(error.value)  # more sampling cannot help


def test_a_bad_ratio_list_names_the_option(tiny_index: Path):
    result = runner.invoke(app, ["estimate", str(tiny_index), "--ratios", "abc"])
    assert result.exit_code == 2 and "--ratios" in result.output, result.output


def test_away_relevance_leaves_the_own_page_out_of_its_query_ranking():
    from vrag_compress.estimate import collection_ndcg, pseudo_gains

    pool = pages(3, n_pages=8)
    gains = pseudo_gains(pool, [0, 5], neighbours=2, relevance="away")
    assert np.isnan(gains[0, 0]) and np.isnan(gains[1, 5])
    assert np.nansum(gains, axis=1).tolist() == [2.0, 2.0]
    own = pseudo_gains(pool, [0, 5], neighbours=2)
    # missing the own page costs nothing when it is left out: the neighbours first is ideal
    scores = np.where(np.isnan(gains), -10.0, own)
    assert collection_ndcg(scores, gains, 8) == pytest.approx([1.0, 1.0])
    assert collection_ndcg(scores, gains, 800) == pytest.approx([1.0, 1.0])  # nothing above them
    assert (collection_ndcg(scores, own, 8) < 1.0).all()
    with pytest.raises(EstimateError, match="relevance must be one of"):
        pseudo_gains(pool, [0], neighbours=2, relevance="nearby")
    with pytest.raises(EstimateError, match="at least 1 neighbour"):
        pseudo_gains(pool, [0], neighbours=0, relevance="away")


def test_away_relevance_estimates_identity_at_one_and_random_below():
    pseudo = token_span_queries(pages(), np.random.default_rng(1))
    result = estimate_pages(pseudo, ["identity", "random"], [0.5, 0.05], relevance="away")
    rows = {(r.method, r.ratio): r for r in result.rows}
    assert rows[("identity", 0.5)].estimated == 1.0 and result.relevance == "away"
    assert rows[("random", 0.05)].estimated < 1.0
    assert 0.0 <= result.profile["own_first"] <= 1.0 and result.profile["pseudo_ndcg"] > 0


def test_the_notes_say_how_far_to_trust_the_figures(monkeypatch):
    from vrag_compress.estimate import validation

    pseudo = token_span_queries(pages(), np.random.default_rng(1))
    first = estimate_pages(pseudo, ["random"], [0.1]).profile["own_first"]
    notes = estimate_pages(pseudo, ["random"], [0.1]).notes
    # span queries were never validated: every collection's largest error, and a bias note
    assert "within ±0.14" in notes[0] and "'tokens', validated with keyword and lead" in notes[1]
    monkeypatch.setattr(validation, "VALIDATED", (validation.Validated("here", 60.0, first, 0.04),))
    result = estimate_pages(pseudo, ["random"], [0.1])
    assert "within ±0.04" in result.notes[0] and "bias:" in result.notes[1]
    assert "'tokens', validated with lead" in result.notes[1]
    same = validation.Validated("here", 60.0, first, 0.04, "tokens")
    monkeypatch.setattr(validation, "VALIDATED", (same,))
    assert len(validation.bias_notes(result)) == 1  # the same kind and profile: no bias note
    far = validation.Validated("far", 600.0, first - 0.5, 0.04, "tokens", 4400)
    monkeypatch.setattr(validation, "VALIDATED", (far,))
    note = validation.bias_notes(result)[1]
    assert "tokens per page, validated on 600-600" in note and "rank their own page" in note
    assert "sample" not in note  # the sample is the whole collection here
    big = estimate_pages(pseudo, ["random"], [0.1], collection_pages=100 * len(pseudo.pages))
    assert "a collection 100x the sample, checked up to 11x (raise --sample)" in big.notes[-1]
    assert json.loads(result.to_json())["profile"] == result.profile


def test_each_query_kind_names_the_other_when_users_ask_differently():
    from vrag_compress import estimate

    pseudo = token_span_queries(pages(), np.random.default_rng(1))
    result = estimate_pages(pseudo, ["random"], [0.1])
    for kind, other in (("lead", "--queries keyword"), ("keyword", "--queries lead")):
        result.query_kind = kind
        base = estimate.bias_notes(result)[0]
        assert base.startswith(f"validated with {kind} pseudo-queries") and other in base


def test_a_keyword_estimate_from_more_pages_than_validated_says_it_may_move():
    from vrag_compress import estimate

    pseudo = token_span_queries(pages(), np.random.default_rng(1))
    result = estimate_pages(pseudo, ["random"], [0.1])
    result.query_kind = "keyword"
    assert not any("sampled pages" in n for n in estimate.bias_notes(result))
    assert "pool 3 or more samples (--draws 3)" in estimate.bias_notes(result)[-1]
    result.draws = 3  # pooled: no advice to pool
    assert not any("--draws" in n for n in estimate.bias_notes(result))
    result.draws = 1
    result.n_pages = 1398
    note = estimate.bias_notes(result)[1]
    assert "1398 sampled pages: keyword pseudo-queries were validated on 400" in note
    result.query_kind = "lead"  # the lead held from 400 pages to every page
    assert not any("sampled pages" in n for n in estimate.bias_notes(result))


def test_a_keyword_search_is_the_rarest_word_another_page_shares_taken_out_of_the_page():
    texts = [
        "Boundary layer transition on a swept wing, measured in the wind tunnel. Boundary data.",
        "Wind tunnel tests of a swept wing at supersonic speed, and wind-tunnel drag.",
        "Transition of the boundary layer behind a roughness element.",
        "",
    ]
    splits = keyword_splits(texts)
    # every word the first two pages share is on 2 of the 4 pages: the earliest wins, and
    # every occurrence of it leaves the page, inside "wind-tunnel" too (the tokenizer splits it)
    assert splits[0] == (
        "boundary",
        "layer transition on a swept wing, measured in the wind tunnel.   data.",
    )
    assert splits[1] == (
        "wind",
        "tunnel tests of a swept wing at supersonic speed, and  -tunnel drag.",
    )
    assert splits[3] is None  # nothing to share: the page only joins the pool
    assert pseudo_splits(texts, "keyword", np.random.default_rng(0)) == (splits, set())


def test_bench_estimate_halves_split_the_judged_queries_and_recompute_retention():
    from vrag_compress_bench.estimate import judged_half

    rng = np.random.default_rng(5)
    full = rng.random(11) + 0.1
    judged = {"uncompressed": full, "uot@0.1": full * 0.9, "sap@0.1": full * rng.random(11)}
    measured = {
        "n_queries": 11,
        "results": [
            {"method": "uot", "ratio": 0.1, "retention@10": 0.9},
            {"method": "sap", "ratio": 0.1, "retention@10": 0.5},
        ],
    }
    first, first_judged = judged_half(measured, judged, "first", seed=3)
    second, second_judged = judged_half(measured, judged, "second", seed=3)
    assert first["n_queries"] + second["n_queries"] == 11 and first["n_queries"] == 5
    together = np.sort(np.r_[first_judged["uncompressed"], second_judged["uncompressed"]])
    np.testing.assert_array_equal(together, np.sort(full))  # disjoint halves, nothing lost
    assert first["results"][0]["retention@10"] == pytest.approx(0.9)
    picked = first_judged["sap@0.1"].mean() / first_judged["uncompressed"].mean()
    assert first["results"][1]["retention@10"] == pytest.approx(picked)
    assert measured["results"][1]["retention@10"] == 0.5  # the full figures are left alone


def test_a_keyword_is_as_rare_whatever_the_sample_size():
    # "alpha" is on 3 pages, "beta" on 6: among 10 pages both are on 2 or more, and the rarer
    # wins; among 1,000 a keyword must be on 0.5% of them (5 pages), so only "beta" qualifies
    shared = ["alpha beta"] * 3 + ["beta"] * 3
    assert keyword_splits(shared + [""] * 4)[0] == ("alpha", "beta")
    assert keyword_splits(shared + [""] * 994)[0] == ("beta", "alpha")


def test_page_samples_pool_into_their_mean_with_the_spread_between_them():
    from vrag_compress.estimate import EstimateRow, RetentionEstimate, mean_interval, pooled

    def sample(value: float, fallbacks: int) -> RetentionEstimate:
        row = EstimateRow("uot", 0.1, value, value - 0.1, value + 0.1, 0.9, 0.8, 20.0)
        profile = {"pseudo_ndcg": value / 2, "own_first": 0.5}
        return RetentionEstimate(
            [row], 300, 290, "lead", "m", 200.0, [], fallbacks, "own", 900, profile
        )

    result = pooled([sample(0.8, 1), sample(0.9, 0), sample(1.0, 2)])
    row = result.rows[0]
    assert row.draws == [0.8, 0.9, 1.0] and row.estimated == pytest.approx(0.9)
    assert row.estimated_sd == pytest.approx(0.1)
    # a t-interval of the mean over 3 samples: t(0.95, 2) = 2.920
    assert (row.low, row.high) == pytest.approx((0.9 - 0.1686, 0.9 + 0.1686), abs=1e-3)
    assert (row.low, row.high) == pytest.approx(mean_interval([0.8, 0.9, 1.0]))
    assert result.draws == 3 and result.n_pages == 300 and result.n_queries == 870
    assert result.fallback_queries == 3 and "3 of 870 pseudo-queries" in result.notes[0]
    assert "pooled over 3 page samples of 300 pages" in result.notes[-1]
    assert result.profile["pseudo_ndcg"] == pytest.approx(0.45)
    single = sample(0.8, 1)
    assert pooled([single]) is single  # one sample: its own bootstrap interval
    same = pooled([sample(0.8, 0), sample(0.8, 0)])  # a source smaller than a sample
    assert (same.rows[0].low, same.rows[0].high) == pytest.approx((0.7, 0.9))


def test_draws_pool_several_page_samples_of_an_index(tiny_index: Path):
    args = ["estimate", str(tiny_index), "--ratios", "0.1", "--methods", "random"]
    args += ["--sample", "6", "--json"]
    one = json.loads(runner.invoke(app, args).stdout)
    assert one["draws"] == 1 and one["rows"][0]["draws"] is None
    result = runner.invoke(app, [*args, "--draws", "3"])
    assert result.exit_code == 0, result.output
    three = json.loads(result.stdout)
    row = three["rows"][0]
    assert three["draws"] == 3 and three["n_pages"] == 6 and len(row["draws"]) == 3
    assert row["draws"][0] == one["rows"][0]["estimated"]  # the first sample is seed 0's
    assert row["estimated"] == pytest.approx(np.mean(row["draws"]))
    assert row["low"] <= row["estimated"] <= row["high"]
    table = runner.invoke(app, [*args[:-1], "--draws", "2"])
    assert table.exit_code == 0 and "6 pages x 2 samples" in table.stdout
    bad = runner.invoke(app, [*args, "--draws", "0"])
    assert bad.exit_code == 2 and "--draws" in bad.output
    with pytest.raises(EstimateError, match="draws must be at least 1"):
        estimate_retention(tiny_index, draws=0)
