"""`VisualIndex.score_pages`: MaxSim of a query against given pages, the core of the LlamaIndex
and LangChain rerankers (stored pages by their stored vectors, others encoded on the fly), and
`vrag bench rerank` (BM25 top-n reranked by it, on a Cranfield slice)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vrag_compress import (
    Page,
    RerankCandidate,
    RerankInputError,
    rerank_order,
    rerank_scores,
)
from vrag_compress.cli import app as cli
from vrag_compress.testing import word_page_index

TEXTS = [
    "annual budget revenue forecast",
    "court ruling appeal judge",
    "storm weather forecast rain",
    "engine maintenance aviation notice",
]


@pytest.fixture
def word_index(tmp_path: Path):
    index, encoder = word_page_index(tmp_path, TEXTS)
    yield index, encoder
    index.close()


def test_stored_pages_score_as_exact_search_does(word_index):
    index, _ = word_index
    hits = index.search("weather forecast", k=4, mode="exact")
    scores = index.score_pages("weather forecast", [h.page_id for h in reversed(hits)])
    assert scores == pytest.approx([h.score for h in reversed(hits)], abs=1e-3)
    assert hits[0].page_no == 3


def test_a_page_outside_the_index_is_encoded_and_compressed_as_add_would(word_index, tmp_path):
    index, encoder = word_index
    stored = index.score_pages("court judge appeal", ["doc:2"])
    fresh = Page("other", 1, encoder.page_image(TEXTS[1]), TEXTS[1], tmp_path / "o.pdf")
    before = index.store.count()
    mixed = index.score_pages("court judge appeal", [fresh, "doc:1", "doc:2"])
    assert mixed[0] == pytest.approx(stored[0], abs=1e-3)  # fp16 storage: close, not equal
    assert mixed[2] == pytest.approx(stored[0], abs=1e-6) and mixed[1] < mixed[0]
    assert index.store.count() == before  # scored, never stored


def test_unknown_ids_and_empty_queries_are_refused(word_index):
    index, _ = word_index
    with pytest.raises(KeyError, match="no page 'doc:9'.*rendered Page"):
        index.score_pages("court", ["doc:1", "doc:9"])
    with pytest.raises(ValueError, match="empty query"):
        index.score_pages("  ", ["doc:1"])
    assert index.score_pages("court", []) == []
    vectors = np.stack([np.ones(index.config.dim, np.float32)])
    assert len(index.score_pages(vectors, ["doc:1", "doc:2"])) == 2  # ready-made query vectors


def test_candidates_by_id_by_image_and_by_file_page_and_the_ones_that_cannot_be_scored(
    word_index, tmp_path, shared_data
):
    index, encoder = word_index
    picture = tmp_path / "storm.png"
    encoder.page_image(TEXTS[2]).save(picture)
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    candidates = [
        RerankCandidate(page_id="doc:1", name="budget"),
        RerankCandidate(doc_id="doc", page_no=3, name="storm stored"),
        RerankCandidate(image_path=str(picture), name="storm picture"),
        RerankCandidate(file_path=str(pdf), page_no=2, name="pdf page"),
        RerankCandidate(file_path=str(pdf), name="pdf without a page"),
        RerankCandidate(text="storm forecast", name="bare text"),  # a Col* model reads pixels
        RerankCandidate(image_path=str(tmp_path / "gone.png"), name="missing file"),
    ]
    scores = rerank_scores(index, "storm forecast rain", candidates)
    assert all(isinstance(s, float) for s in scores[:4])
    assert scores[2] == pytest.approx(scores[1], abs=1e-3) and scores[1] > scores[0]
    errors = [str(s) for s in scores[4:]]
    assert all(isinstance(s, RerankInputError) for s in scores[4:])
    assert "pdf without a page" in errors[0] and "give it a page number" in errors[0]
    assert "bare text: nothing to score" in errors[1] and "image_path" in errors[1]
    assert "missing file: cannot render its page" in errors[2]
    assert rerank_order(scores)[:2] in ([1, 2], [2, 1]) and rerank_order(scores)[4:] == [4, 5, 6]


def _small_cranfield_slice(shared_data: Path, out: Path, n_queries: int, n_extra: int = 8) -> Path:
    """A BEIR folder of the first judged queries with at most 5 judged documents each, those
    documents and some others (about 25 documents to encode, not the 60 of the first queries)."""
    from vrag_compress.beir import load_beir, write_slice

    return write_slice(load_beir(shared_data / "cranfield"), out, n_queries, n_extra)


@pytest.mark.slow
def test_bench_rerank_on_a_cranfield_slice(shared_data, tmp_path):
    """`vrag bench rerank`: BM25's candidates reranked by MaxSim on stored pages, the same
    candidates scored on the fly as pages outside the index, and the JSON report."""
    folder = _small_cranfield_slice(shared_data, tmp_path / "cran", n_queries=4)
    report = tmp_path / "rerank.json"
    args = ["bench", "rerank", "--dataset", str(folder), "--depth", "5", "--on-the-fly", "1"]
    result = CliRunner().invoke(cli, [*args, "--json", str(report), "--no-progress"])
    assert result.exit_code == 0, result.output
    found = json.loads(report.read_text())
    assert found["queries"] == 4 and found["depth"] == 5 and found["index"]["method"] == "sap"
    for run in ("bm25", "reranked", "maxsim"):
        assert 0.0 <= found[run]["ndcg@10"] <= 1.0 and set(found[run]) >= {"ndcg@10", "mrr"}
    assert found["bm25"] != found["reranked"]  # the candidates were reordered
    assert found["on_the_fly"]["queries"] == 1
    assert found["on_the_fly"]["max_abs_diff"] < 0.01  # stored fp16 vs freshly encoded float32
    assert "reranked by MaxSim" in result.output
