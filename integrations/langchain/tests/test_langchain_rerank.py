"""`VragReranker`: another retriever's documents reranked by MaxSim over page images, as the
document compressor of `ContextualCompressionRetriever`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from langchain_vrag_compress import RerankWarning, VragReranker


class FixedRetriever(BaseRetriever):
    """A text retriever (BM25, a dense store) stand-in: the same documents for every query."""

    documents: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return list(self.documents)


def stored_documents() -> list[Document]:
    """Pages of the test index as another retriever returns them: its own ids and text, the
    page named by doc id and page number; the weather page last."""
    pages = [("a", 1), ("a", 2), ("b", 1), ("b", 3)]
    return [
        Document(id=f"bm25-{n}", page_content="...", metadata={"doc_id": d, "page_no": p})
        for n, (d, p) in enumerate(pages)
    ]


def test_contextual_compression_retriever_reranks_stored_pages(page_index):
    reranker = VragReranker(index=page_index, top_n=2)
    retriever = ContextualCompressionRetriever(
        base_compressor=reranker, base_retriever=FixedRetriever(documents=stored_documents())
    )
    found = retriever.invoke("rainfall temperature forecast storm")
    assert len(found) == 2 and found[0].id == "bm25-3"
    assert found[0].metadata["relevance_score"] > found[1].metadata["relevance_score"]
    (best,) = page_index.search("rainfall temperature forecast storm", k=1, mode="exact")
    assert found[0].metadata["relevance_score"] == pytest.approx(best.score, abs=1e-3)
    assert found[0].metadata["doc_id"] == "b" and found[0].metadata["page_no"] == 3
    again = asyncio.run(retriever.ainvoke("firearm background checks"))
    assert again[0].id == "bm25-1"


def test_pages_outside_the_index_are_rendered_and_encoded(
    page_index, fake_encoder, tmp_path, shared_data
):
    picture = tmp_path / "rocket.png"
    fake_encoder.page_image("saturn rocket engine launch").save(picture)
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    documents = [
        *stored_documents(),
        Document(page_content="a photo", metadata={"image_path": str(picture)}),
        Document(page_content="", metadata={"source": str(pdf), "page": 1}),  # PyPDFLoader's
    ]
    count = page_index.store.count()
    found = VragReranker(index=page_index, top_n=6).compress_documents(
        documents, "saturn rocket launch"
    )
    assert found[0].metadata["image_path"] == str(picture)
    assert all("relevance_score" in d.metadata for d in found) and len(found) == 6
    assert page_index.store.count() == count  # scored, never stored


def test_documents_that_cannot_be_scored_come_last_with_a_warning(page_index):
    bare = Document(id="plain", page_content="no page behind this text")
    reranker = VragReranker(index=page_index, top_n=10)
    with pytest.warns(RerankWarning, match=r"1 of 5 documents.*document plain: nothing to score"):
        found = reranker.compress_documents([bare, *stored_documents()], "federal budget")
    assert found[-1] is bare and "relevance_score" not in bare.metadata
    assert found[0].metadata["doc_id"] == "a" and found[0].metadata["page_no"] == 1
    with pytest.raises(ValueError, match="empty query"):
        reranker.compress_documents(stored_documents(), " ")
    assert reranker.compress_documents([], "budget") == []


def test_zero_based_page_of_pdf_loaders_and_page_labels_name_the_same_page(
    page_index, shared_data: Path
):
    pdf = str(shared_data / "pdfs" / "edge" / "multi_page.pdf")
    by_page = Document(page_content="", metadata={"source": pdf, "page": 2})
    by_label = Document(page_content="", metadata={"file_path": pdf, "page_label": "3"})
    scores = [
        d.metadata["relevance_score"]
        for d in VragReranker(index=page_index).compress_documents([by_page, by_label], "page")
    ]
    assert scores[0] == pytest.approx(scores[1])
