"""CompressedColPaliRetriever: planted queries, top-k, filters, async, query and chat engines."""

from __future__ import annotations

import asyncio
import base64
import io
import time
from pathlib import Path

import pytest
from llama_index.core import Settings
from llama_index.core.base.llms.types import ImageBlock, TextBlock
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import ImageNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from PIL import Image

from llama_index.retrievers.vrag_compress import CompressedColPaliRetriever
from llama_index.vector_stores.vrag_compress import UnsupportedFilterError

PLANTED = {
    "apollo moon": ("apollo", 1),
    "rocket engine": ("apollo", 2),
    "senate tax": ("budget", 2),
    "rainfall forecast": ("weather", 1),
    "drought record": ("weather", 2),
}


def ids(results) -> list[str]:
    return [r.node.node_id for r in results]


@pytest.mark.parametrize("query", sorted(PLANTED))
def test_planted_query_finds_its_page(visual_index, query):
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=3)
    results = retriever.retrieve(query)
    doc_id, page_no = PLANTED[query]
    top = results[0]
    assert isinstance(top.node, ImageNode)
    assert top.node.node_id == f"{doc_id}:{page_no}"
    assert top.node.metadata["doc_id"] == doc_id
    assert top.node.metadata["page_no"] == page_no
    assert top.node.metadata["source"] == f"/corpus/{doc_id}.pdf"
    assert top.node.ref_doc_id == doc_id
    assert set(query.split()) <= set(top.node.text.split())  # the text layer is the node text
    assert top.score == pytest.approx(len(query.split()), abs=1e-2)  # MaxSim: one per word
    assert top.score > results[1].score


def test_nodes_carry_the_stored_page_image(visual_index):
    node = CompressedColPaliRetriever(visual_index, similarity_top_k=1).retrieve("apollo")[0].node
    assert node.image_path is not None and node.image_mimetype == "image/webp"
    with Image.open(node.resolve_image()) as image:
        assert image.size == visual_index.page_image("apollo", 1).size


def test_base64_mode_inlines_the_image(visual_index):
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=1, image_mode="base64")
    node = retriever.retrieve("storm")[0].node
    assert node.image_path is None and node.image_mimetype == "image/png"
    with Image.open(io.BytesIO(base64.b64decode(node.image))) as image:
        assert image.size == (40, 48)


def test_image_mode_none_and_bad_mode(visual_index):
    node = CompressedColPaliRetriever(visual_index, image_mode="none").retrieve("storm")[0].node
    assert node.image is None and node.image_path is None
    with pytest.raises(ValueError, match="image_mode"):
        CompressedColPaliRetriever(visual_index, image_mode="url")


@pytest.mark.parametrize("k", [1, 2, 4, 6])
def test_similarity_top_k(visual_index, k):
    assert len(CompressedColPaliRetriever(visual_index, similarity_top_k=k).retrieve("tax")) == k


def test_top_k_larger_than_the_index_returns_every_page(visual_index):
    results = CompressedColPaliRetriever(visual_index, similarity_top_k=50).retrieve("tax")
    assert len(results) == 6 and len(set(ids(results))) == 6


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_bad_top_k_is_refused(visual_index, k):
    with pytest.raises((ValueError, TypeError), match="similarity_top_k"):
        CompressedColPaliRetriever(visual_index, similarity_top_k=k)


FILTER_CASES = [
    (MetadataFilters(filters=[MetadataFilter(key="topic", value="finance")]), {"budget"}),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="year", value=2000, operator=FilterOperator.GTE)]
        ),
        {"budget", "weather"},
    ),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="year", value=2015, operator=FilterOperator.NE)]
        ),
        {"apollo", "weather"},
    ),
    (
        MetadataFilters(
            filters=[
                MetadataFilter(key="topic", value=["space", "science"], operator=FilterOperator.IN)
            ]
        ),
        {"apollo", "weather"},
    ),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="topic", value=["space"], operator=FilterOperator.NIN)]
        ),
        {"budget", "weather"},
    ),
    (
        MetadataFilters(
            filters=[
                MetadataFilter(key="topic", value="space"),
                MetadataFilter(key="year", value=2021),
            ],
            condition=FilterCondition.OR,
        ),
        {"apollo", "weather"},
    ),
    (
        MetadataFilters(
            filters=[
                MetadataFilter(key="year", value=1990, operator=FilterOperator.GT),
                MetadataFilters(
                    filters=[
                        MetadataFilter(key="topic", value="science"),
                        MetadataFilter(key="doc_id", value="apollo"),
                    ],
                    condition=FilterCondition.OR,
                ),
            ]
        ),
        {"weather"},
    ),
    ({"doc_id": {"$in": ["apollo", "budget"]}}, {"apollo", "budget"}),  # store syntax
]


@pytest.mark.parametrize(("filters", "expected"), FILTER_CASES)
def test_filters_restrict_the_pages(visual_index, filters, expected):
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=10, filters=filters)
    results = retriever.retrieve("apollo moon budget storm")
    assert {r.node.metadata["doc_id"] for r in results} == expected
    assert len(results) == 2 * len(expected)


def test_filtered_query_still_ranks_within_the_filter(visual_index):
    filters = MetadataFilters(filters=[MetadataFilter(key="topic", value="finance")])
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=1, filters=filters)
    assert ids(retriever.retrieve("senate apollo moon")) == ["budget:2"]


@pytest.mark.parametrize(
    "filters",
    [
        MetadataFilters(
            filters=[MetadataFilter(key="topic", value="spa", operator=FilterOperator.TEXT_MATCH)]
        ),
        MetadataFilters(
            filters=[MetadataFilter(key="topic", value="space")], condition=FilterCondition.NOT
        ),
    ],
)
def test_unsupported_filters_raise_instead_of_being_ignored(visual_index, filters):
    with pytest.raises(UnsupportedFilterError):
        CompressedColPaliRetriever(visual_index, filters=filters)


def test_async_matches_sync(visual_index):
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=3)
    sync = retriever.retrieve("drought record")
    asynchronous = asyncio.run(retriever.aretrieve("drought record"))
    assert ids(asynchronous) == ids(sync)
    assert [r.score for r in asynchronous] == pytest.approx([r.score for r in sync])


def test_opens_an_index_folder_read_only(visual_index, encoder):
    path = visual_index.path
    retriever = CompressedColPaliRetriever.from_path(path, encoder=encoder, similarity_top_k=1)
    try:
        assert ids(retriever.retrieve("saturn rocket")) == ["apollo:2"]
    finally:
        retriever.close()


def test_empty_query_is_refused(visual_index):
    with pytest.raises(ValueError, match="empty"):
        CompressedColPaliRetriever(visual_index).retrieve("  ")


def _blocks(messages):
    return [block for message in messages for block in message.blocks]


def sent_images(llm) -> list[bytes]:
    """Every image the LLM received; the rich prompt templates inline them as data: URLs."""
    images = []
    for call in llm.calls:
        for block in _blocks(call):
            if isinstance(block, ImageBlock):
                url = str(block.url)
                assert url.startswith("data:image/"), url[:40]
                images.append(base64.b64decode(url.split(",", 1)[1]))
    return images


def test_query_engine_sends_the_page_images_to_the_llm(visual_index, mock_llm):
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=2)
    engine = RetrieverQueryEngine.from_args(retriever, llm=mock_llm, multimodal=True)
    response = engine.query("apollo moon landing")
    sources = response.source_nodes
    assert [s.node.node_id for s in sources][0] == "apollo:1" and len(sources) == 2
    pages = [Path(s.node.image_path).read_bytes() for s in sources]
    assert sorted(sent_images(mock_llm)) == sorted(pages)
    text = " ".join(
        b.text for call in mock_llm.calls for b in _blocks(call) if isinstance(b, TextBlock)
    )
    assert "apollo moon landing" in text  # the question
    assert "page_no: 1" in text and "/corpus/apollo.pdf" in text  # citation metadata
    assert "n_tokens" not in text  # bookkeeping stays out of the prompt
    assert str(response)


def test_async_query_engine(visual_index, mock_llm):
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=1)
    engine = RetrieverQueryEngine.from_args(retriever, llm=mock_llm, multimodal=True)
    response = asyncio.run(engine.aquery("storm forecast"))
    assert response.source_nodes[0].node.node_id == "weather:1"
    assert sent_images(mock_llm) == [Path(response.source_nodes[0].node.image_path).read_bytes()]


def test_chat_engine_answers_from_the_retrieved_pages(visual_index, mock_llm):
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=1)
    # skip_condense: the mock LLM would "condense" by echoing the whole history into the query
    chat = CondensePlusContextChatEngine.from_defaults(retriever, llm=mock_llm, skip_condense=True)
    first = chat.chat("what does the budget say about deficit revenue")
    assert first.source_nodes[0].node.node_id == "budget:1"
    context = " ".join(m.content or "" for m in mock_llm.last_chat_messages)
    assert "budget deficit revenue" in context  # the page's text layer reached the LLM
    second = chat.chat("and drought temperature record")
    assert second.source_nodes[0].node.node_id == "weather:2"
    assert len(chat.chat_history) == 4


def test_the_default_model_guard_is_active():
    with pytest.raises(AssertionError, match="OpenAI"):
        _ = Settings.llm
    with pytest.raises(AssertionError, match="OpenAI"):
        _ = Settings.embed_model


def test_async_chat_with_condensing(visual_index, mock_llm):
    """The mock "condenses" by echoing, so only the mechanics are checked here."""
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=2)
    chat = CondensePlusContextChatEngine.from_defaults(retriever, llm=mock_llm)
    chat.chat("saturn rocket engine")
    follow_up = asyncio.run(chat.achat("apollo moon landing"))
    assert len(follow_up.source_nodes) == 2
    assert all(isinstance(n.node, ImageNode) and n.node.image_path for n in follow_up.source_nodes)
    assert len(chat.chat_history) == 4


def test_the_declared_minimum_llama_index_sends_images():
    """The pyprojects' lower bound is a release whose query engines take `multimodal=`."""
    import importlib.metadata
    import inspect
    import re
    from pathlib import Path

    from llama_index.core.query_engine import RetrieverQueryEngine
    from packaging.version import Version

    pyprojects = sorted(Path(__file__).resolve().parents[1].glob("llama-index-*/pyproject.toml"))
    bound = re.compile(r'"llama-index-core>=([\d.]+),')
    minima = {bound.search(p.read_text()).group(1) for p in pyprojects}
    assert len(pyprojects) == 4 and len(minima) == 1, minima  # one lower bound for the four
    minimum = minima.pop()
    assert Version(minimum) >= Version("0.14.23")  # 0.14.22 drops the images silently
    assert Version(importlib.metadata.version("llama-index-core")) >= Version(minimum)
    assert "multimodal" in inspect.signature(RetrieverQueryEngine.from_args).parameters


def test_concurrent_aretrieve_calls_share_batches_not_a_lock(visual_index, monkeypatch):
    """Concurrent `aretrieve` calls search together (micro-batched through the query encoder),
    each getting its own answer; none waits for the others one by one."""
    queries = ["drought record", "court ruling", "storm damage", "budget deficit"] * 2
    retriever = CompressedColPaliRetriever(visual_index, similarity_top_k=3)
    alone = [ids(retriever.retrieve(q)) for q in queries]
    encoder = visual_index.query_encoder
    plain = encoder.encode_queries
    sizes: list[int] = []

    def slow(batch):  # a real model's forward takes a while: concurrent queries pile up
        sizes.append(len(batch))
        time.sleep(0.05)
        return plain(batch)

    monkeypatch.setattr(encoder, "encode_queries", slow)

    async def together():
        return await asyncio.gather(*(retriever.aretrieve(q) for q in queries))

    assert [ids(r) for r in asyncio.run(together())] == alone
    assert sum(sizes) == len(queries) and max(sizes) > 1
