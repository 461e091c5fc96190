"""VragVectorStore beyond the standard suite: images, files, deletes, scores, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from vrag_compress import VisualIndex, get_compressor

from langchain_vrag_compress import EmbeddingsEncoder, VragStoreError, VragVectorStore


@pytest.fixture()
def col_store(tmp_path: Path, fake_encoder):
    index = VisualIndex.create(
        tmp_path / "index", compressor=get_compressor("identity"), encoder=fake_encoder
    )
    with VragVectorStore(index) as store:
        yield store
    index.close()


def test_add_images_files_and_pil(col_store: VragVectorStore, fake_encoder, tmp_path: Path):
    path = tmp_path / "chart.png"
    fake_encoder.page_image("quarterly revenue chart").save(path)
    pil = fake_encoder.page_image("employee headcount table")
    ids = col_store.add_images([path, pil], [{"kind": "chart"}, {"kind": "table"}], ids=["c", None])
    assert ids[0] == "c" and ids[1]
    doc, score = col_store.similarity_search_with_score("revenue chart", k=1)[0]
    assert doc.id == "c" and doc.metadata["kind"] == "chart"
    assert doc.metadata["source"] == str(path) and doc.metadata["page"] == 1
    assert Path(doc.metadata["image_path"]).is_file()
    assert score == pytest.approx(2.0, abs=1e-2)  # two query words, each matched exactly
    table = col_store.similarity_search("headcount", k=1, filter={"kind": "table"})[0]
    assert table.id == ids[1] and table.metadata["source"] is None


def test_delete_removes_pages_and_their_images(col_store: VragVectorStore, fake_encoder):
    ids = col_store.add_images([fake_encoder.page_image("solar panels")], ids=["p"])
    image_path = Path(col_store.get_by_ids(ids)[0].metadata["image_path"])
    assert image_path.is_file()
    col_store.delete(["p", "never-added"])
    assert col_store.get_by_ids(["p"]) == []
    assert not image_path.exists()
    assert col_store.index.documents() == []


def test_delete_all(col_store: VragVectorStore):
    col_store.add_texts(["one", "two"])
    col_store.delete()
    assert col_store.index.store.count() == 0


def test_add_files_indexes_pages_of_a_real_pdf(col_store: VragVectorStore, shared_data: Path):
    pdf = shared_data / "pdfs" / "gov" / "amt_handbook_sample.pdf"
    ids = col_store.add_files(pdf, metadata={"collection": "faa"})
    assert ids and all(":" in i for i in ids)
    docs = col_store.get_by_ids(ids)
    assert [d.metadata["page"] for d in docs] == list(range(1, len(ids) + 1))
    assert docs[0].metadata["collection"] == "faa" and docs[0].metadata["filename"] == pdf.name
    assert col_store.add_files(pdf) == ids  # unchanged file: skipped, same ids


def test_text_metadata_round_trips_exactly(tmp_path: Path):
    emb = DeterministicFakeEmbedding(size=8)
    meta = {"n": 1, "f": 0.5, "tags": ["x", "y"], "nested": {"a": None}}
    with VragVectorStore.from_texts(["alpha"], emb, [meta], ids=["t"], path=tmp_path / "i") as s:
        assert s.get_by_ids(["t"])[0].metadata == meta
        assert s.similarity_search("alpha", k=1, filter={"n": 1})[0].id == "t"
        assert s.similarity_search("alpha", k=1, filter={"n": 2}) == []


def test_relevance_scores_are_in_unit_range(tmp_path: Path):
    emb = DeterministicFakeEmbedding(size=8)
    with VragVectorStore.from_texts(["alpha", "beta", "gamma"], emb, path=tmp_path / "i") as s:
        results = s.similarity_search_with_relevance_scores("alpha", k=3)
        assert results[0][0].page_content == "alpha"
        assert results[0][1] == pytest.approx(1.0, abs=1e-3)
        assert all(0.0 <= r <= 1.0 for _, r in results)


def test_search_by_vector_single_and_multi(col_store: VragVectorStore, fake_encoder):
    col_store.add_texts(["red apples", "green pears"], ids=["r", "g"])
    query = fake_encoder.encode_queries(["pears"])[0]
    assert col_store.similarity_search_by_vector(query[0].tolist(), k=1)[0].id == "g"
    assert col_store.similarity_search_by_vector(query, k=1)[0].id == "g"


def test_reopening_a_text_index_keeps_entries(tmp_path: Path):
    emb = DeterministicFakeEmbedding(size=8)
    with VragVectorStore(embedding=emb, path=tmp_path / "i") as store:
        store.add_texts(["kept"], ids=["k"])
    with VragVectorStore(embedding=emb, path=tmp_path / "i") as store:
        assert [d.id for d in store.similarity_search("kept", k=1)] == ["k"]


def test_as_retriever_passes_filter(tmp_path: Path):
    emb = DeterministicFakeEmbedding(size=8)
    metas = [{"lang": "en"}, {"lang": "fr"}]
    with VragVectorStore.from_texts(["hello", "bonjour"], emb, metas, path=tmp_path / "i") as s:
        retriever = s.as_retriever(search_kwargs={"k": 2, "filter": {"lang": "fr"}})
        assert [d.page_content for d in retriever.invoke("hello")] == ["bonjour"]


def test_errors_say_what_to_do(tmp_path: Path, page_index: VisualIndex):
    emb = DeterministicFakeEmbedding(size=8)
    with pytest.raises(VragStoreError, match="index= .* or embedding="):
        VragVectorStore()
    with pytest.raises(VragStoreError, match="not comparable"):
        VragVectorStore(page_index, embedding=emb)
    with VragVectorStore(embedding=emb, path=tmp_path / "i") as store:
        with pytest.raises(VragStoreError, match="2 entries for 1 items"):
            store.add_texts(["x"], metadatas=[{}, {}])
        with pytest.raises(VragStoreError, match="cannot encode page images"):
            store.add_images([_white()])


def test_embeddings_encoder_rejects_zero_vectors():
    class Zero(DeterministicFakeEmbedding):
        def embed_query(self, text: str) -> list[float]:
            return [0.0] * self.size

    with pytest.raises(VragStoreError, match="non-zero"):
        EmbeddingsEncoder(Zero(size=4)).encode_queries(["q"])


def _white():
    from PIL import Image

    return Image.new("RGB", (8, 8), "white")
