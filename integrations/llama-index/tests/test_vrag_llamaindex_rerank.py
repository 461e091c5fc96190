"""`VragRerank` (llama-index-postprocessor-vrag-compress): another retriever's nodes reranked by
MaxSim over page images, stored pages on their stored vectors, others encoded on the fly."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from llama_index.core.schema import ImageNode, NodeWithScore, QueryBundle, TextNode

from llama_index.postprocessor.vrag_compress import RerankWarning, VragRerank


def text_hits() -> list[NodeWithScore]:
    """What a text retriever (BM25, a dense index) returns: its own nodes and scores, here with
    the page's doc id and number in their metadata, best text match first."""
    pages = [("budget", 1), ("weather", 1), ("apollo", 2), ("apollo", 1)]
    return [
        NodeWithScore(
            node=TextNode(text=f"{doc} page {no}", metadata={"doc_id": doc, "page_no": no}),
            score=10.0 - rank,
        )
        for rank, (doc, no) in enumerate(pages)
    ]


def pages_of(nodes: list[NodeWithScore]) -> list[tuple[str, int]]:
    return [(n.node.metadata["doc_id"], n.node.metadata["page_no"]) for n in nodes]


def test_stored_pages_are_reranked_by_their_maxsim(visual_index):
    rerank = VragRerank(index=visual_index, top_n=3, keep_retrieval_score=True)
    reranked = rerank.postprocess_nodes(text_hits(), query_str="saturn rocket engine")
    assert pages_of(reranked)[0] == ("apollo", 2) and len(reranked) == 3
    (best,) = visual_index.search("saturn rocket engine", k=1, mode="exact")
    assert reranked[0].score == pytest.approx(best.score, abs=1e-3)
    assert reranked[0].score >= reranked[1].score >= reranked[2].score
    assert reranked[0].node.metadata["retrieval_score"] == 8.0  # its score from the retriever
    asynchronous = asyncio.run(
        rerank.apostprocess_nodes(text_hits(), QueryBundle("storm rainfall forecast"))
    )
    assert pages_of(asynchronous)[0] == ("weather", 1)


def test_a_page_outside_the_index_is_rendered_and_encoded_on_the_fly(
    visual_index, encoder, tmp_path: Path
):
    picture = tmp_path / "comet.png"
    encoder.page_image(["comet", "telescope", "orbit"], seed=9001).save(picture)
    outside = NodeWithScore(node=ImageNode(image_path=str(picture), text="an observatory"))
    count = visual_index.store.count()
    rerank = VragRerank(index=visual_index, top_n=2)
    reranked = rerank.postprocess_nodes([*text_hits(), outside], query_str="comet telescope")
    assert reranked[0].node is outside.node and reranked[0].score > reranked[1].score
    assert visual_index.store.count() == count  # scored, not stored
    by_picture = rerank.postprocess_nodes(
        [*text_hits(), outside], QueryBundle(query_str="", image_path=str(picture))
    )
    assert by_picture[0].node is outside.node


def test_nodes_that_cannot_be_scored_come_last_with_a_warning(visual_index):
    bare = NodeWithScore(node=TextNode(id_="bare-node", text="no page behind it"), score=99.0)
    rerank = VragRerank(index=visual_index, top_n=5)
    with pytest.warns(RerankWarning, match=r"1 of 5 nodes.*node bare-node: nothing to score"):
        reranked = rerank.postprocess_nodes([bare, *text_hits()], query_str="tax senate")
    assert reranked[-1].node is bare.node and reranked[-1].score is None
    assert all(n.score is not None for n in reranked[:-1])
    with pytest.raises(ValueError, match="needs the query"):
        rerank.postprocess_nodes(text_hits())
    with pytest.raises(ValueError, match="empty query"):
        rerank.postprocess_nodes(text_hits(), query_str="  ")
    assert rerank.postprocess_nodes([], query_str="tax") == []


def test_a_pdf_page_named_by_file_and_page_label_is_rendered(visual_index, shared_data):
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    node = TextNode(text="", metadata={"file_path": str(pdf), "page_label": "2"})
    reranked = VragRerank(index=visual_index).postprocess_nodes(
        [NodeWithScore(node=node), *text_hits()], query_str="budget deficit"
    )
    assert len(reranked) == 5 and all(n.score is not None for n in reranked)
    assert pages_of(reranked[:1]) == [("budget", 1)]
