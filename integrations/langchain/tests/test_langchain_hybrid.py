"""`search_type="hybrid"` (and "text"): BM25 over the stored text fused with the vectors, through
VragVectorStore, its retriever and CompressedColPaliRetriever, with `search_kwargs` honoured."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from pydantic import ValidationError
from vrag_compress import VisualIndex

from langchain_vrag_compress import CompressedColPaliRetriever, VragVectorStore

TEXTS = ["invoice ZX-4471 was paid", "rainfall forecast for May", "senate budget vote"]
METAS = [{"lang": "en"}, {"lang": "en"}, {"lang": "fr"}]


@pytest.fixture()
def store(tmp_path: Path):
    emb = DeterministicFakeEmbedding(size=16)  # meaningless vectors: the text side must carry
    with VragVectorStore.from_texts(
        TEXTS, emb, METAS, ids=["inv", "rain", "vote"], path=tmp_path / "i"
    ) as s:
        yield s


def test_text_search_ranks_by_bm25(store):
    docs = store.text_search("zx-4471 invoice", k=3)
    assert [d.id for d in docs] == ["inv"]
    assert docs[0].metadata["search_components"]["text"]["rank"] == 1


def test_hybrid_search_fuses_and_reports_components(store):
    results = store.hybrid_search_with_score("ZX-4471", k=3)
    assert {d.id for d, _ in results} == {"inv", "rain", "vote"}
    inv = next(d for d, _ in results if d.id == "inv")
    assert set(inv.metadata["search_components"]) == {"visual", "text"}
    for doc, score in results:
        ranks = [c["rank"] for c in doc.metadata["search_components"].values()]
        assert score == pytest.approx(sum(1 / (60 + r) for r in ranks))


def test_retriever_search_type_hybrid_with_alpha(store):
    by_text = store.as_retriever(search_type="hybrid", search_kwargs={"k": 3, "alpha": 0.0})
    assert by_text.invoke("ZX-4471")[0].id == "inv"
    by_vectors = store.as_retriever(search_type="hybrid", search_kwargs={"k": 3, "alpha": 1.0})
    plain = store.similarity_search("ZX-4471", k=3)
    assert [d.id for d in by_vectors.invoke("ZX-4471")] == [d.id for d in plain]
    text = store.as_retriever(search_type="text", search_kwargs={"k": 2})
    assert [d.id for d in text.invoke("budget")] == ["vote"]


def test_retriever_hybrid_filters_both_sides_and_runs_async(store):
    retriever = store.as_retriever(
        search_type="hybrid", search_kwargs={"k": 3, "filter": {"lang": "en"}, "text_k": 1}
    )
    docs = asyncio.run(retriever.ainvoke("senate budget invoice"))
    assert {d.id for d in docs} <= {"inv", "rain"} and "vote" not in {d.id for d in docs}
    assert sum("text" in d.metadata["search_components"] for d in docs) <= 1  # text_k=1


def test_a_misspelled_search_option_is_an_error_not_ignored(store):
    with pytest.raises(TypeError, match="alpah"):
        store.hybrid_search_with_score("ZX-4471", k=3, alpah=0.0)
    with pytest.raises(TypeError, match="alpha"):
        store.text_search("budget", alpha=0.5)  # text search fuses nothing
    hybrid = store.as_retriever(search_type="hybrid", search_kwargs={"k": 3, "text_kk": 1})
    with pytest.raises(TypeError, match="text_kk"):
        hybrid.invoke("ZX-4471")


def test_unknown_search_type_is_refused(store):
    with pytest.raises(ValueError, match="search_type"):
        store.as_retriever(search_type="bm42")


def test_compressed_colpali_retriever_hybrid(page_index: VisualIndex):
    retriever = CompressedColPaliRetriever(
        index=page_index, k=2, search_type="hybrid", search_kwargs={"alpha": 0.5}
    )
    docs = retriever.invoke("oral argument transcript")
    assert docs[0].metadata["filename"] == "b.pdf" and docs[0].metadata["page"] == 2
    assert "search_components" in docs[0].metadata
    assert retriever.invoke("storm", alpha=0.0)[0].page_content.startswith("weather")
    text = CompressedColPaliRetriever(index=page_index, search_type="text")
    assert [d.page_content.split(":")[0] for d in text.invoke("senate")] == ["budget"]
    with pytest.raises(ValueError, match="search_type='hybrid'"):
        CompressedColPaliRetriever(index=page_index).invoke("storm", alpha=0.5)
    with pytest.raises(ValidationError):
        CompressedColPaliRetriever(index=page_index, search_type="mmr")
