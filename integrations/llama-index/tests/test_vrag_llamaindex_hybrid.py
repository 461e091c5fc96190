"""HYBRID and TEXT_SEARCH query modes: BM25 over the page text fused with MaxSim, with `alpha`,
`sparse_top_k` and filters honoured, through VragVectorStore, VectorStoreIndex retrievers and
CompressedColPaliRetriever."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import ImageDocument
from llama_index.core.vector_stores.types import (
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from vrag_compress import Page

from llama_index.readers.vrag_compress import PageImageNodeParser
from llama_index.readers.vrag_compress.nodes import page_to_node
from llama_index.retrievers.vrag_compress import CompressedColPaliRetriever
from llama_index.vector_stores.vrag_compress import StoreSideEmbedding, VragVectorStore

CODE = "ZX-4471"  # printed in the memo's text layer only: the visual side cannot see it


@pytest.fixture
def store(tmp_path, encoder, corpus_nodes):
    memo = Page(
        doc_id="memo",
        page_no=1,
        image=encoder.page_image(["audit", "memo"], 999),
        text=f"Audit memo, reference code {CODE}",
        source=Path("/corpus/memo.pdf"),
    )
    vector_store = VragVectorStore.from_path(
        tmp_path / "index", compressor="identity", encoder=encoder
    )
    vector_store.add(
        [*corpus_nodes, page_to_node(memo, ref_doc_id="memo", metadata={"year": 2024})]
    )
    yield vector_store
    vector_store.close()


@pytest.fixture
def index(store):
    storage = StorageContext.from_defaults(vector_store=store)
    return VectorStoreIndex([], storage_context=storage, embed_model=StoreSideEmbedding())


def query(store, text: str, mode: VectorStoreQueryMode, **kwargs):
    return store.query(VectorStoreQuery(query_str=text, mode=mode, **kwargs))


def test_text_search_finds_words_only_the_text_layer_has(store):
    result = query(store, CODE, VectorStoreQueryMode.TEXT_SEARCH, similarity_top_k=3)
    assert result.ids == ["memo:1"]
    components = result.nodes[0].metadata["search_components"]
    assert components["text"]["rank"] == 1 and result.similarities[0] == components["text"]["score"]
    assert "search_components" in result.nodes[0].excluded_llm_metadata_keys
    default = query(store, CODE, VectorStoreQueryMode.DEFAULT, similarity_top_k=1)
    assert "search_components" not in default.nodes[0].metadata


def test_hybrid_fuses_both_sides(store):
    result = query(store, f"storm {CODE}", VectorStoreQueryMode.HYBRID, similarity_top_k=3)
    assert {"memo:1", "weather:1"} <= set(result.ids)
    sides = {
        i: n.metadata["search_components"] for i, n in zip(result.ids, result.nodes, strict=True)
    }
    assert sides["memo:1"]["text"]["rank"] == 1  # only the text layer holds the code
    assert "visual" in sides["weather:1"]  # the storm page, seen by the visual side
    for sim, comps in zip(result.similarities, sides.values(), strict=True):
        assert sim == pytest.approx(sum(1 / (60 + c["rank"]) for c in comps.values()))


def test_alpha_moves_between_the_two_rankings(store):
    visual = query(store, f"storm {CODE}", VectorStoreQueryMode.DEFAULT, similarity_top_k=3)
    text = query(store, f"storm {CODE}", VectorStoreQueryMode.TEXT_SEARCH, similarity_top_k=2)
    at_1 = query(store, f"storm {CODE}", VectorStoreQueryMode.HYBRID, alpha=1.0, similarity_top_k=3)
    at_0 = query(store, f"storm {CODE}", VectorStoreQueryMode.HYBRID, alpha=0.0, similarity_top_k=2)
    assert at_1.ids == visual.ids
    assert at_0.ids == text.ids
    assert max(at_0.similarities) == pytest.approx(1.0)


def test_sparse_top_k_and_hybrid_top_k(store):
    result = query(
        store, "page mentions", VectorStoreQueryMode.HYBRID, similarity_top_k=7, sparse_top_k=1
    )
    found_by_text = [n for n in result.nodes if "text" in n.metadata["search_components"]]
    assert len(found_by_text) == 1 and len(result.ids) == 7
    top = query(store, "storm", VectorStoreQueryMode.HYBRID, similarity_top_k=5, hybrid_top_k=2)
    assert len(top.ids) == 2


def test_filters_apply_to_both_sides(store):
    filters = MetadataFilters(filters=[MetadataFilter(key="year", value=2024)])
    result = query(
        store, f"storm {CODE}", VectorStoreQueryMode.HYBRID, similarity_top_k=5, filters=filters
    )
    assert result.ids == ["memo:1"]


def test_vector_store_index_retriever_modes(index):
    hybrid = index.as_retriever(
        vector_store_query_mode="hybrid", alpha=0.5, similarity_top_k=2, sparse_top_k=3
    ).retrieve(f"storm {CODE}")
    assert {r.node.node_id for r in hybrid} == {"memo:1", "weather:1"}
    text = index.as_retriever(vector_store_query_mode="text_search").retrieve(CODE)
    assert [r.node.node_id for r in text] == ["memo:1"]


def test_compressed_colpali_retriever_takes_the_query_mode(store):
    hybrid = CompressedColPaliRetriever(
        store, similarity_top_k=3, vector_store_query_mode="hybrid", alpha=0.5
    )
    nodes = hybrid.retrieve(f"storm {CODE}")
    assert "memo:1" in {n.node.node_id for n in nodes}
    assert all("search_components" in n.node.metadata for n in nodes)
    text = CompressedColPaliRetriever(
        store, vector_store_query_mode=VectorStoreQueryMode.TEXT_SEARCH
    )
    assert [n.node.node_id for n in text.retrieve(CODE)] == ["memo:1"]
    with pytest.raises(ValueError, match="query modes"):
        CompressedColPaliRetriever(store, vector_store_query_mode="mmr")
    with pytest.raises(ValueError, match="alpha"):
        CompressedColPaliRetriever(store, vector_store_query_mode="hybrid", alpha=3).retrieve("x")


def test_an_index_built_from_nodes_keeps_search_components_through_our_retriever(
    tmp_path, encoder, corpus_nodes
):
    # Built from nodes (as from_documents does), LlamaIndex keeps each image node in its
    # docstore and its own retriever returns those copies; ours queries the store itself.
    store = VragVectorStore.from_path(tmp_path / "index", compressor="identity", encoder=encoder)
    storage = StorageContext.from_defaults(vector_store=store)
    index = VectorStoreIndex(
        corpus_nodes, storage_context=storage, embed_model=StoreSideEmbedding()
    )
    assert index.docstore.docs  # the copies LlamaIndex's own retriever would swap in
    for mode in ("hybrid", "text_search"):
        nodes = CompressedColPaliRetriever(index, vector_store_query_mode=mode).retrieve("storm")
        assert nodes and all("search_components" in n.node.metadata for n in nodes), mode
    store.close()


@pytest.mark.parametrize("mode", ["hybrid", "text_search"])
def test_from_documents_keeps_search_components_through_llamaindex_retriever(
    tmp_path, encoder, corpus_nodes, mode
):
    # LlamaIndex's own retriever swaps every image node for the copy its docstore made at
    # from_documents time; the query-time fields must survive that swap (sync and async).
    documents = [
        ImageDocument(id_=node.ref_doc_id, image=node.image, text=node.text)
        for node in corpus_nodes
        if node.metadata["page_no"] == 1
    ]
    store = VragVectorStore.from_path(tmp_path / "index", compressor="identity", encoder=encoder)
    index = VectorStoreIndex.from_documents(
        documents,
        storage_context=StorageContext.from_defaults(vector_store=store),
        transformations=[PageImageNodeParser()],
        embed_model=StoreSideEmbedding(),
    )
    assert len(index.docstore.docs) == 3  # the copies LlamaIndex's retriever swaps in
    retriever = index.as_retriever(vector_store_query_mode=mode, similarity_top_k=3)
    for nodes in (retriever.retrieve("storm"), asyncio.run(retriever.aretrieve("storm"))):
        assert nodes[0].node.node_id == "weather:1"
        assert nodes[0].node.metadata["search_components"]["text"]["rank"] == 1
        for found in nodes:
            components = found.node.metadata["search_components"]
            assert components and all(side["rank"] >= 1 for side in components.values())
            assert "search_components" in found.node.excluded_llm_metadata_keys
            assert Path(found.node.image_path).is_relative_to(tmp_path / "index")
            assert found.node.text.startswith("This page mentions")
    store.close()
