"""VragVectorStore: maximal marginal relevance on MaxSim scores, and stores made from a model."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.documents import Document
from vrag_compress import Page, VisualIndex, get_compressor

from langchain_vrag_compress import VragVectorStore
from langchain_vrag_compress.vectorstores import VragStoreError

QUERY = "firearm background checks"


@pytest.fixture()
def duplicate_store(tmp_path: Path, fake_encoder) -> VragVectorStore:  # noqa: ANN001
    texts = {
        "p1": "firearm background checks state",
        "p2": "firearm background checks state",  # the same page again
        "p3": "firearm checks texas rainfall",
        "p4": "aviation maintenance handbook",
    }
    index = VisualIndex.create(tmp_path / "i", compressor=get_compressor("identity"),
                               encoder=fake_encoder)  # fmt: skip
    pages = [
        Page(pid, 1, fake_encoder.page_image(text, seed=n), text, Path(f"/c/{pid}.pdf"))
        for n, (pid, text) in enumerate(texts.items())
    ]
    index.add(pages, progress=False)
    store = VragVectorStore(index)
    yield store
    index.close()


def test_similarity_ranks_the_duplicates_first(duplicate_store: VragVectorStore) -> None:
    top = [d.metadata["doc_id"] for d in duplicate_store.similarity_search(QUERY, k=2)]
    assert sorted(top) == ["p1", "p2"]


def test_mmr_skips_the_duplicate(duplicate_store: VragVectorStore) -> None:
    docs = duplicate_store.max_marginal_relevance_search(QUERY, k=2, fetch_k=4, lambda_mult=0.5)
    picked = [d.metadata["doc_id"] for d in docs]
    assert picked[0] in ("p1", "p2") and picked[1] == "p3"
    assert all("score" in d.metadata for d in docs)


def test_mmr_with_lambda_one_is_plain_relevance(duplicate_store: VragVectorStore) -> None:
    docs = duplicate_store.max_marginal_relevance_search(QUERY, k=2, fetch_k=4, lambda_mult=1.0)
    assert sorted(d.metadata["doc_id"] for d in docs) == ["p1", "p2"]
    with pytest.raises(VragStoreError, match="lambda_mult"):
        duplicate_store.max_marginal_relevance_search(QUERY, lambda_mult=2.0)


def test_mmr_through_as_retriever(duplicate_store: VragVectorStore) -> None:
    retriever = duplicate_store.as_retriever(
        search_type="mmr", search_kwargs={"k": 2, "fetch_k": 4}
    )
    assert [d.metadata["doc_id"] for d in retriever.invoke(QUERY)][1] == "p3"


def test_a_store_from_a_model_name(tmp_path: Path, shared_data: Path) -> None:
    texts = ["NICS firearm background checks by state", "aircraft bearing maintenance"]
    with VragVectorStore.from_texts(
        texts, embedding=None, model="minilm", path=tmp_path / "t"
    ) as s:
        assert s.index.model_id == "minilm"
        assert s.similarity_search("firearm checks per state", k=1)[0].page_content == texts[0]
    pdf = shared_data / "pdfs" / "gov" / "nics-background-checks-2015-11.pdf"
    docs = [Document(page_content="aircraft bearing maintenance")]
    with VragVectorStore.from_documents(docs, embedding=None, model="minilm") as store:
        store.add_files(pdf)
        hit = store.similarity_search("firearm background checks by state", k=1)[0]
        assert hit.metadata["filename"] == pdf.name
        assert hit.metadata["page_no"] == hit.metadata["page"] == 1


def test_model_and_embedding_together_are_refused(tmp_path: Path) -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    with pytest.raises(VragStoreError, match="not both"):
        VragVectorStore(model="minilm", embedding=DeterministicFakeEmbedding(size=8))
    with pytest.raises(VragStoreError, match="model="):
        VragVectorStore()


def test_one_vocabulary_with_the_other_front_ends(duplicate_store: VragVectorStore) -> None:
    """k defaults to 5 as in `vrag search`, VisualIndex.search and LlamaIndex; an empty query
    raises ValueError everywhere; pages carry page_no (and LangChain's usual page)."""
    from langchain_vrag_compress import CompressedColPaliRetriever

    retriever = CompressedColPaliRetriever(index=duplicate_store.index)
    assert retriever.k == 5
    assert len(duplicate_store.similarity_search("firearm")) == 4  # all 4 pages (k=5)
    with pytest.raises(ValueError, match="empty query"):
        retriever.invoke("  ")
    with pytest.raises(ValueError, match="empty query"):
        duplicate_store.similarity_search("")
    doc = retriever.invoke(QUERY)[0]
    assert doc.metadata["page_no"] == doc.metadata["page"] == 1
