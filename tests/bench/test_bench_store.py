"""`vrag bench store`: the JSON a run reports, on synthetic and on resampled real pages."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.beir import load_beir
from vrag_compress.cli.app import app

KEYS = (
    "open_s",
    "first_query_s",
    "first_query_rss_mb",
    "recall@10_two_stage",
    "bytes_per_page",
    "build_s",
    "params",
    "load_avg",
    "query_peak_rss_mb",
    "bench_peak_rss_mb",
    "reference_s",
)


def _check(report: dict, pages: int) -> None:
    for key in KEYS:
        assert key in report, key
    assert report["pages"] == pages
    assert 0.0 <= report["recall@10_two_stage"] <= 1.0
    assert report["latency_ms"]["two_stage"] > 0 and report["latency_ms"]["exact"] > 0
    assert report["latency_ms"]["auto"] > 0
    assert report["size_mb"]["compressed"] > 0 and report["bytes_per_page"] > 0
    assert report["params"]["k"] >= 1 and report["params"]["rerank"] >= 1
    assert report["recall_queries"] == report["config"]["queries"]
    assert report["first_query_s"] > 0
    assert report["first_query_rss_mb"] > report["first_query_rss_file_mb"] > 0
    # the process answering every query holds at least what answering the first one held
    assert report["query_peak_rss_mb"] >= report["query_peak_rss_file_mb"] > 0
    assert report["bench_peak_rss_mb"] > 0 and report["reference_s"] > 0
    assert set(report["load_avg"]) == {"before", "queries", "after"}
    assert report["params"]["params_from"] == "measured"
    assert report["tuned"]["recall"] >= report["tuned"]["target"] == 0.97


def test_synthetic(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    args = ["bench", "store", "--pages", "400", "--tokens-full", "100", "--queries", "12"]
    args += ["--bruteforce-queries", "0", "--no-full-store", "--dim", "32", "--json", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    _check(report, 400)
    assert report["config"]["data"] == "synthetic"
    # the default layout by size: 4,000 vectors are far below 500,000, so fp16 rows stay
    assert report["config"]["layout"] == "auto" and report["config"]["fp16"] is True
    assert report["params"]["codes"] == "4bit"


def test_thread_counts_are_timed_in_one_run(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    args = ["bench", "store", "--pages", "300", "--tokens-full", "60", "--queries", "10"]
    args += ["--bruteforce-queries", "0", "--no-full-store", "--dim", "16", "--threads", "1,2"]
    res = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    for key in (
        "latency_ms_by_threads",
        "queries_per_s_by_threads",
        "batch_queries_per_s_by_threads",
    ):
        assert set(report[key]) == {"1", "2"} and min(report[key].values()) > 0, key
    assert report["config"]["threads"] == [1, 2]
    for bad in ("0", "1,x", ""):
        res = CliRunner().invoke(app, [*args[:-1], bad])
        assert res.exit_code == 2 and "--threads" in res.output, res.output


def test_real_pages_from_a_beir_folder(shared_data: Path, tmp_path: Path) -> None:
    source = shared_data / "cranfield"
    ds = load_beir(source)
    folder = tmp_path / "mini"
    folder.mkdir()
    docs = list(ds.docs.items())[:40]
    queries = list(ds.queries.items())[:8]
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in docs if t)
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries)
    )
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n")
    out = tmp_path / "r.json"
    args = ["bench", "store", "--data", "real", "--source-dataset", str(folder)]
    args += ["--cache-dir", str(tmp_path / "cache"), "--pages", "300", "--queries", "10"]
    args += ["--bruteforce-queries", "0", "--no-full-store", "--json", str(out)]
    args += ["--tokens-full", "100", "--dim", "32"]  # small pages: the path, not the scale
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    _check(report, 300)
    assert report["config"]["data"] == "real" and list((tmp_path / "cache").glob("*.npz"))
    bad = CliRunner().invoke(app, ["bench", "store", "--data", "nope"])
    assert bad.exit_code == 2


def test_store_without_fp16_vectors(tmp_path: Path) -> None:
    """`--codes 2bit --no-fp16`: a smaller store, searched on decoded codes, same JSON keys."""
    base = ["bench", "store", "--pages", "400", "--tokens-full", "100", "--queries", "12"]
    base += ["--bruteforce-queries", "0", "--no-full-store", "--dim", "32"]
    reports = {}
    for name, extra in (
        ("fp16", ["--codes", "2bit", "--fp16"]),
        ("codes", ["--codes", "2bit", "--no-fp16"]),
    ):
        out = tmp_path / f"{name}.json"
        res = CliRunner().invoke(app, [*base, *extra, "--json", str(out)])
        assert res.exit_code == 0, res.output
        reports[name] = json.loads(out.read_text())
        _check(reports[name], 400)
    assert reports["codes"]["config"]["fp16"] is False
    assert reports["codes"]["bytes_per_page"] < reports["fp16"]["bytes_per_page"] / 2
    assert reports["codes"]["index_bytes_per_page"] > 0
    assert reports["fp16"]["config"]["layout"] == "fixed"
    bad = CliRunner().invoke(app, [*base, "--no-fp16", "--codes", "none"])  # nothing to rerank on
    assert bad.exit_code == 2


def test_keep_store(tmp_path: Path) -> None:
    """`--keep-store` leaves the compressed store where the JSON says, and it opens and answers;
    a `--dir` that does not exist yet is made."""
    import numpy as np

    from vrag_compress.store import LocalStore

    out = tmp_path / "k.json"
    args = ["bench", "store", "--pages", "300", "--tokens-full", "60", "--queries", "5"]
    args += ["--bruteforce-queries", "0", "--no-full-store", "--dim", "16", "--keep-store"]
    workdir = tmp_path / "new" / "stores"
    res = CliRunner().invoke(app, [*args, "--dir", str(workdir), "--json", str(out)])
    assert res.exit_code == 0, res.output
    path = Path(json.loads(out.read_text())["store_path"])
    partial = json.loads(out.with_suffix(".partial.json").read_text())  # the milestones
    assert partial["build_s"]["value"] > 0 and partial["two_stage_ms"]["value"] > 0
    assert path.parent.parent == workdir
    with LocalStore.open(path, readonly=True) as store:
        assert store.count() == 300
        assert len(store.search(np.ones((3, 16), np.float32), k=10)) == 10


def test_skewed_family(tmp_path: Path) -> None:
    """`--data skewed --skew S`: the Zipf family runs end to end and records its skew."""
    out = tmp_path / "k.json"
    args = ["bench", "store", "--data", "skewed", "--skew", "1.5", "--pages", "300"]
    args += ["--queries", "10", "--bruteforce-queries", "0", "--no-full-store", "--json", str(out)]
    args += ["--tokens-full", "100", "--dim", "32"]  # small pages: the path, not the scale
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    _check(report, 300)
    assert report["config"]["data"] == "skewed" and report["config"]["skew"] == 1.5


def test_skew_concentrates_the_common_words() -> None:
    """The knob does what it says: the most common word's share of tokens grows with skew."""
    import numpy as np

    from vrag_compress_bench.skewed import skewed_corpus

    def top_share(skew: float) -> float:
        _, ids, _, _ = skewed_corpus(16, skew, n_docs=200, n_queries=2)
        return float(np.bincount(ids).max() / len(ids))

    assert top_share(0.0) < 0.01 < top_share(1.0) < top_share(1.5)


def test_real_pages_from_a_folder_of_pdfs(shared_data: Path) -> None:
    """A PDF folder is a corpus too: one document per page with text, queries drawn from it."""
    from vrag_compress_bench.real_pages import corpus_texts

    texts, queries = corpus_texts(shared_data / "pdfs" / "gov")
    assert len(texts) > 20 and all(len(t.split()) >= 8 for t in texts)
    assert len(queries) == 225 and all(4 <= len(q.split()) <= 12 for q in queries)
    assert any(q in t for q in queries[:5] for t in texts)
