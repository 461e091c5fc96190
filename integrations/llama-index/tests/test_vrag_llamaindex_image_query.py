"""LlamaIndex reaches image queries (`QueryBundle.image_path`) and neighbouring pages (the
retriever's `neighbours`, which a query engine sends to the LLM and lists as sources)."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ImageBlock
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import QueryBundle
from vrag_compress import ImageQueryError

from llama_index.retrievers.vrag_compress import CompressedColPaliRetriever

from .conftest import corpus_pages


def test_a_query_bundle_with_an_image_path_finds_that_page(visual_index, encoder, tmp_path):
    page = corpus_pages(encoder, "weather")[1]
    path = tmp_path / "photo.png"
    page.image.save(path)
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=2)
    found = retriever.retrieve(QueryBundle(query_str="", image_path=str(path)))
    assert found[0].node.node_id == "weather:2" and found[0].score > found[1].score
    (tmp_path / "notes.png").write_text("not an image")
    with pytest.raises(ImageQueryError, match="not a readable image"):
        retriever.retrieve(QueryBundle(query_str="", image_path=str(tmp_path / "notes.png")))


def test_the_query_engine_sends_and_lists_the_neighbouring_pages(visual_index, mock_llm):
    alone = CompressedColPaliRetriever(visual_index, similarity_top_k=1)
    assert [n.node.node_id for n in alone.retrieve("saturn rocket engine")] == ["apollo:2"]
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=1, neighbours=1)
    nodes = retriever.retrieve("saturn rocket engine")
    assert [(n.node.node_id, n.score is None) for n in nodes] == [
        ("apollo:1", True),
        ("apollo:2", False),
    ]
    assert nodes[0].node.metadata["neighbour_of"] == "apollo:2"
    engine = RetrieverQueryEngine.from_args(retriever, llm=mock_llm, multimodal=True)
    response = engine.query("saturn rocket engine")
    assert [s.node.node_id for s in response.source_nodes] == ["apollo:1", "apollo:2"]
    sent = [b for call in mock_llm.calls for m in call for b in m.blocks]
    assert sum(isinstance(b, ImageBlock) for b in sent) == 2
    with pytest.raises(ValueError, match="neighbours"):
        CompressedColPaliRetriever(visual_index, neighbours=-1)


def test_an_image_query_needs_no_words(visual_index, encoder, tmp_path: Path):
    page = corpus_pages(encoder, "budget")[0]
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=1)
    (hit,) = retriever.retrieve(QueryBundle(query_str="", image_path=_saved(page, tmp_path)))
    assert hit.node.node_id == "budget:1"
    with pytest.raises(ValueError, match="the query is empty"):
        retriever.retrieve(QueryBundle(query_str=" "))


def _saved(page, folder: Path) -> str:
    path = folder / f"{page.doc_id}-{page.page_no}.png"
    page.image.save(path)
    return str(path)
