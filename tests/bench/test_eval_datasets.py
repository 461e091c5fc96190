"""BEIR loader on both layouts (text and page images), id collisions, errors, query splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vrag_compress.beir import DatasetError, load_beir, load_dataset, split_queries


def test_cranfield_text_layout(shared_data: Path) -> None:
    ds = load_beir(shared_data / "cranfield")
    assert ds.kind == "text"
    assert len(ds.docs) == 1400 and len(ds.queries) == 225
    # the classic collections reuse small integers for docs and queries: nothing is dropped
    assert "1" in ds.docs and "1" in ds.queries
    assert ds.qrels["1"]["184"] == 3
    assert sum(len(v) for v in ds.qrels.values()) == 1612
    assert ds.empty_docs() == ["471", "995"]  # kept in the corpus, reported by the runner
    assert ds.docs["1"].startswith("experimental investigation of the aerodynamics")


def test_arxivqa_image_layout(shared_data: Path) -> None:
    ds = load_dataset(shared_data / "vidore_arxivqa_sample")
    assert ds.kind == "image"
    assert len(ds.docs) == 10 and list(ds.queries) == ["q_0", "q_1"]
    assert ds.qrels == {"q_0": {"0": 1}, "q_1": {"1": 1}}
    image = ds.load_image("0")
    assert image.mode == "RGB" and min(image.size) > 0
    assert ds.empty_docs() == []


def _write(folder: Path, corpus: list[dict], queries: list[dict], qrels: str, nested: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in corpus) + "\n")
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(r) for r in queries) + "\n")
    target = folder / ("qrels/test.tsv" if nested else "qrels.tsv")
    target.parent.mkdir(exist_ok=True)
    target.write_text("query-id\tcorpus-id\tscore\n" + qrels)


def test_original_beir_layout_with_colliding_ids(tmp_path: Path) -> None:
    corpus = [{"_id": "1", "title": "Wings", "text": "lift and drag"}, {"_id": "2", "text": "heat"}]
    queries = [{"_id": "1", "text": "what is lift"}, {"_id": "2", "text": "unjudged"}]
    _write(tmp_path / "d", corpus, queries, "1\t1\t2\n1\t2\t0\n", nested=True)
    ds = load_beir(tmp_path / "d")
    assert ds.docs == {"1": "Wings. lift and drag", "2": "heat"}
    assert ds.qrels == {"1": {"1": 2, "2": 0}}
    assert ds.judged_queries() == ["1"]
    assert ds.best_document("1") == "1"


def test_best_document_prefers_highest_gain_then_file_order(tmp_path: Path) -> None:
    corpus = [{"_id": str(i), "text": f"doc {i}"} for i in range(4)]
    _write(
        tmp_path / "d",
        corpus,
        [{"_id": "q", "text": "x"}],
        "q\t2\t1\nq\t3\t3\nq\t1\t3\n",
        nested=False,
    )
    assert load_beir(tmp_path / "d").best_document("q") == "3"


def test_bad_inputs_say_where(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        load_beir(tmp_path / "missing")
    folder = tmp_path / "bad"
    _write(folder, [{"_id": "1", "text": "a"}], [{"_id": "q", "text": "b"}], "q\t1\t1\n", False)
    (folder / "corpus.jsonl").write_text('{"_id": "1", "text": "a"}\n{oops\n')
    with pytest.raises(DatasetError, match=r"corpus.jsonl:2"):
        load_beir(folder)
    _write(folder, [{"_id": "1", "text": "a"}], [{"_id": "q", "text": "b"}], "q\t1\n", False)
    with pytest.raises(DatasetError, match=r"qrels.tsv:2: expected 3"):
        load_beir(folder)
    _write(folder, [{"_id": "1", "image": "nope.png"}], [{"_id": "q", "text": "b"}], "", False)
    with pytest.raises(DatasetError, match="nope.png does not exist"):
        load_beir(folder)
    with pytest.raises(DatasetError, match="no such folder"):
        load_dataset("./not-here")


def test_split_queries_is_disjoint_and_seeded(shared_data: Path) -> None:
    ds = load_beir(shared_data / "cranfield")
    cal, ev = split_queries(ds, 45, seed=0)
    assert len(cal) == 45 and set(cal).isdisjoint(ev)
    assert set(cal) | set(ev) == set(ds.judged_queries())
    assert split_queries(ds, 45, seed=0) == (cal, ev)
    assert split_queries(ds, 45, seed=1)[0] != cal
    with pytest.raises(DatasetError, match="calibration queries leave none"):
        split_queries(ds, len(ds.judged_queries()), seed=0)
