"""VragVectorStore through VectorStoreIndex: add, query, filters, delete, get, persist, async."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.schema import ImageNode, TextNode
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from llama_index.vector_stores.vrag_compress import StoreSideEmbedding, VragVectorStore


@pytest.fixture
def store(tmp_path, encoder):
    vector_store = VragVectorStore.from_path(
        tmp_path / "index", compressor="identity", encoder=encoder
    )
    yield vector_store
    vector_store.client.close()


@pytest.fixture
def index(store, corpus_nodes):
    storage = StorageContext.from_defaults(vector_store=store)
    return VectorStoreIndex(corpus_nodes, storage_context=storage, embed_model=StoreSideEmbedding())


def top_ids(index, query, **kwargs) -> list[str]:
    return [r.node.node_id for r in index.as_retriever(**kwargs).retrieve(query)]


def test_vector_store_contract_flags(store):
    assert store.stores_text and not store.is_embedding_query
    assert store.client.store.count() == 0


def test_add_through_the_index_then_query(index, store, corpus_nodes):
    assert store.client.store.count() == len(corpus_nodes)
    assert top_ids(index, "apollo moon", similarity_top_k=1) == ["apollo:1"]
    assert top_ids(index, "senate tax", similarity_top_k=1) == ["budget:2"]
    assert len(top_ids(index, "senate tax", similarity_top_k=4)) == 4


def test_query_returns_the_stored_node_with_its_image(store, corpus_nodes):
    store.add(corpus_nodes)
    result = store.query(VectorStoreQuery(query_str="storm forecast", similarity_top_k=2))
    assert result.ids[0] == "weather:1" and len(result.nodes) == 2
    node = result.nodes[0]
    original = next(n for n in corpus_nodes if n.node_id == "weather:1")
    assert isinstance(node, ImageNode)
    assert node.text == original.text and node.ref_doc_id == "weather"
    assert node.metadata["year"] == 2021 and node.metadata["page_no"] == 1
    assert node.image_path.endswith("images/weather/1.webp")
    assert result.similarities[0] == pytest.approx(2.0, abs=1e-2)


def test_filters_and_doc_ids(index):
    recent = MetadataFilters(
        filters=[MetadataFilter(key="year", value=2000, operator=FilterOperator.GT)]
    )
    found = top_ids(index, "apollo moon rocket", similarity_top_k=10, filters=recent)
    assert {i.split(":")[0] for i in found} == {"budget", "weather"}
    only_budget = top_ids(index, "apollo moon", similarity_top_k=10, doc_ids=["budget"])
    assert sorted(only_budget) == ["budget:1", "budget:2"]


def test_query_engine_with_mock_llm(index, mock_llm):
    engine = index.as_query_engine(llm=mock_llm, similarity_top_k=1)
    response = engine.query("drought temperature")
    assert response.source_nodes[0].node.node_id == "weather:2"
    assert mock_llm.calls  # the configured mock answered, not a default LLM


def test_delete_ref_doc(index, store):
    index.delete_ref_doc("apollo")
    assert store.client.store.count() == 4
    assert all(not i.startswith("apollo") for i in top_ids(index, "apollo", similarity_top_k=10))
    assert "apollo" not in {d.doc_id for d in store.client.documents()}
    assert not (store.client.path / "images" / "apollo").exists()


def test_persist_and_reload(index, store, tmp_path, encoder):
    persist_dir = tmp_path / "storage"
    index.storage_context.persist(persist_dir=str(persist_dir))
    store.client.close()

    reopened = VragVectorStore.from_path(tmp_path / "index", encoder=encoder)
    try:
        storage = StorageContext.from_defaults(vector_store=reopened, persist_dir=str(persist_dir))
        loaded = load_index_from_storage(storage, embed_model=StoreSideEmbedding())
        assert top_ids(loaded, "budget deficit", similarity_top_k=1) == ["budget:1"]
        fresh = VectorStoreIndex.from_vector_store(reopened, embed_model=StoreSideEmbedding())
        assert top_ids(fresh, "rainfall", similarity_top_k=1) == ["weather:1"]
    finally:
        reopened.client.close()


def test_from_vector_store_then_insert_sees_old_and_new_pages(store, corpus_nodes):
    store.add(corpus_nodes[:4])
    index = VectorStoreIndex.from_vector_store(store, embed_model=StoreSideEmbedding())
    index.insert_nodes(corpus_nodes[4:])
    found = top_ids(index, "apollo moon storm", similarity_top_k=10)
    assert len(found) == 6 and found[0] in ("apollo:1", "weather:1")


def test_get_nodes_by_id_and_filter(store, corpus_nodes):
    store.add(corpus_nodes)
    by_id = store.get_nodes(node_ids=["budget:2", "apollo:1", "missing:9"])
    assert [n.node_id for n in by_id] == ["budget:2", "apollo:1"]
    assert by_id[0].text == "This page mentions tax expenditure senate"
    space = MetadataFilters(filters=[MetadataFilter(key="topic", value="space")])
    assert sorted(n.node_id for n in store.get_nodes(filters=space)) == ["apollo:1", "apollo:2"]
    both = store.get_nodes(node_ids=["apollo:1", "budget:1"], filters=space)
    assert [n.node_id for n in both] == ["apollo:1"]
    assert len(store.get_nodes()) == 6


def test_delete_nodes_by_id_and_filter(store, corpus_nodes):
    store.add(corpus_nodes)
    store.delete_nodes(node_ids=["apollo:2"])
    assert sorted(store.client.store.page_ids("apollo")) == ["apollo:1"]
    finance = MetadataFilters(filters=[MetadataFilter(key="topic", value="finance")])
    store.delete_nodes(filters=finance)
    assert store.client.store.count() == 3
    assert "budget" not in {d.doc_id for d in store.client.documents()}  # emptied doc goes too
    with pytest.raises(ValueError, match="clear"):
        store.delete_nodes()


def test_clear(store, corpus_nodes):
    store.add(corpus_nodes)
    store.clear()
    assert store.client.store.count() == 0 and store.client.documents() == []


def test_same_node_id_replaces_the_page(store, corpus_nodes, encoder):
    store.add(corpus_nodes)
    replacement = corpus_nodes[0].model_copy()
    replacement.text = "edited text layer"
    store.add([replacement])
    assert store.client.store.count() == 6
    assert store.get_nodes(node_ids=["apollo:1"])[0].text == "edited text layer"


def test_async_add_and_query(store, corpus_nodes):
    ids = asyncio.run(store.async_add(corpus_nodes))
    assert ids == [n.node_id for n in corpus_nodes]
    result = asyncio.run(store.aquery(VectorStoreQuery(query_str="saturn", similarity_top_k=1)))
    assert result.ids == ["apollo:2"]


def test_bad_input_is_refused_before_writing(store, corpus_nodes):
    with pytest.raises(TypeError, match="PageImageNodeParser"):
        store.add([corpus_nodes[0], TextNode(text="plain text")])
    with pytest.raises(ValueError, match="has no image"):
        store.add([ImageNode(text="no image")])
    with pytest.raises(ValueError, match="repeat"):
        store.add([corpus_nodes[0], corpus_nodes[0]])
    assert store.client.store.count() == 0


def test_bad_queries_are_refused(store, corpus_nodes):
    store.add(corpus_nodes)
    with pytest.raises(ValueError, match="query_str"):
        store.query(VectorStoreQuery(query_embedding=[0.1, 0.2], similarity_top_k=1))
    with pytest.raises(ValueError, match="supports the query modes default, hybrid"):
        store.query(VectorStoreQuery(query_str="x", mode=VectorStoreQueryMode.MMR))


def test_close_releases_the_write_lock_and_readonly_opens_beside_a_writer(
    tmp_path, encoder, corpus_nodes
):
    path = tmp_path / "locked"
    with VragVectorStore.from_path(path, compressor="identity", encoder=encoder) as writer:
        writer.add(corpus_nodes)
        reader = VragVectorStore.from_path(path, encoder=encoder, readonly=True)
        index = VectorStoreIndex.from_vector_store(reader, embed_model=StoreSideEmbedding())
        assert top_ids(index, "apollo moon", similarity_top_k=1) == ["apollo:1"]
        with pytest.raises(Exception, match="read-only|readonly"):
            reader.add(corpus_nodes[:1])
        reader.close()
    again = VragVectorStore.from_path(path, encoder=encoder)  # the lock was released
    assert again.client.store.count() == len(corpus_nodes)
    again.close()


def test_readonly_needs_an_existing_index(tmp_path, encoder):
    with pytest.raises(Exception, match="no index here"):
        VragVectorStore.from_path(tmp_path / "absent", encoder=encoder, readonly=True)
    assert not (tmp_path / "absent").exists()


def test_the_retriever_shares_the_store_and_its_encoder(index, store):
    from llama_index.retrievers.vrag_compress import CompressedColPaliRetriever

    for source in (index, store):
        retriever = CompressedColPaliRetriever(source, similarity_top_k=1)
        assert retriever.index is store.client
        assert retriever.index.encoder is store.client.encoder  # one model in memory
        assert [r.node.node_id for r in retriever.retrieve("apollo moon")] == ["apollo:1"]


def test_the_retriever_names_what_it_accepts(store):
    from llama_index.core import SummaryIndex

    from llama_index.retrievers.vrag_compress import CompressedColPaliRetriever

    with pytest.raises(TypeError, match="VragVectorStore"):
        CompressedColPaliRetriever(SummaryIndex([]))
    with pytest.raises(TypeError, match="got a int"):
        CompressedColPaliRetriever(3)


def test_show_progress_is_the_real_encoding_not_a_fake_embedding_bar(store, corpus_nodes, capsys):
    storage = StorageContext.from_defaults(vector_store=store)
    VectorStoreIndex(
        corpus_nodes, storage_context=storage, embed_model=StoreSideEmbedding(), show_progress=True
    )
    err = capsys.readouterr().err
    batches = -(-len(corpus_nodes) // store.client.batch_size)
    assert "Encoding pages" in err and f"{batches}/{batches}" in err
    assert "Generating embeddings" not in err
    assert store.client.store.count() == len(corpus_nodes)


def test_one_vocabulary_with_the_other_front_ends(index, store):
    """similarity_top_k defaults to 5 as everywhere; an empty query raises ValueError; nodes
    carry page_no."""
    from llama_index.retrievers.vrag_compress import CompressedColPaliRetriever

    retriever = CompressedColPaliRetriever(store)
    assert retriever.similarity_top_k == 5
    with pytest.raises(ValueError, match="empty"):
        retriever.retrieve("  ")
    assert retriever.retrieve("apollo moon")[0].node.metadata["page_no"] == 1
