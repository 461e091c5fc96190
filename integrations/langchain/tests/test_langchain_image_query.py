"""LangChain reaches image queries and neighbouring pages: `similarity_search_by_image` on the
vector store, and a retriever with `neighbours` whose pages the QA chain shows and cites."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from vrag_compress import ImageQueryError, VisualIndex

from langchain_vrag_compress import (
    CompressedColPaliRetriever,
    VragVectorStore,
    create_visual_qa_chain,
)

from .conftest import TOPICS


def test_similarity_search_by_image_finds_the_page_from_a_path_or_a_picture(
    page_index: VisualIndex, fake_encoder, tmp_path: Path
):
    store = VragVectorStore(page_index)
    picture = fake_encoder.page_image(TOPICS["court"])
    path = tmp_path / "court.png"
    picture.save(path)
    for given in (picture, path, path.read_bytes()):
        (doc, score), *_ = store.similarity_search_by_image_with_score(given, k=2)
        assert (doc.metadata["doc_id"], doc.metadata["page"]) == ("b", 2) and score > 0
    found = store.similarity_search_by_image(picture, k=3, filter={"year": 2015})
    assert {d.metadata["doc_id"] for d in found} == {"a"}
    (tmp_path / "notes.png").write_text("not an image")
    with pytest.raises(ImageQueryError, match="not a readable image"):
        store.similarity_search_by_image(tmp_path / "notes.png")
    with pytest.raises(TypeError, match="unknown keyword"):
        store.similarity_search_by_image(picture, kk=3)


def test_the_qa_chain_sends_neighbouring_pages_and_cites_the_one_the_answer_came_from(
    page_index: VisualIndex,
):
    alone = CompressedColPaliRetriever(index=page_index, k=1).invoke("firearm background checks")
    assert [d.metadata["page"] for d in alone] == [2]
    retriever = CompressedColPaliRetriever(index=page_index, k=1, neighbours=1)
    docs = retriever.invoke("firearm background checks")
    assert [(d.metadata["doc_id"], d.metadata["page"]) for d in docs] == [
        ("a", 1),
        ("a", 2),
        ("a", 3),
    ]
    assert [d.metadata.get("neighbour_of") for d in docs] == ["a:2", None, "a:2"]
    assert "score" not in docs[0].metadata and docs[1].metadata["score"] > 0
    llm = GenericFakeChatModel(messages=iter([AIMessage("Continued on the next page [3].")]))
    result = create_visual_qa_chain(retriever, llm).invoke("firearm background checks")
    (cited,) = result["citations"]
    assert (cited["page"], cited["neighbour_of"]) == (3, "a:2")
