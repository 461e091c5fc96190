"""CompressedColPaliRetriever on a small index built with the deterministic fake encoder."""

from __future__ import annotations

import asyncio
import base64
import io
import time
from pathlib import Path

import pytest
from PIL import Image
from vrag_compress import VisualIndex

from langchain_vrag_compress import CompressedColPaliRetriever

PLANTED = {
    "firearm background checks": ("a", 2),
    "aviation maintenance aircraft": ("b", 1),
    "oral argument supreme court": ("b", 2),
}


@pytest.mark.parametrize("query", sorted(PLANTED))
def test_planted_queries_retrieve_their_page(page_index: VisualIndex, query: str) -> None:
    docs = CompressedColPaliRetriever(index=page_index, k=3).invoke(query)
    top = docs[0].metadata
    assert (top["doc_id"], top["page"]) == PLANTED[query]
    assert docs[0].id == f"{top['doc_id']}:{top['page']}"
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


def test_documents_carry_page_provenance_and_image(page_index: VisualIndex) -> None:
    doc = CompressedColPaliRetriever(index=page_index, k=1).invoke("warn layoffs california")[0]
    meta = doc.metadata
    assert meta["source"] == "/corpus/a.pdf" and meta["filename"] == "a.pdf" and meta["page"] == 3
    assert meta["year"] == 2015
    assert doc.page_content.startswith("layoffs:")
    assert Path(meta["image_path"]).is_file()
    assert "image_base64" not in meta


def test_base64_on_request_decodes_to_the_page(page_index: VisualIndex) -> None:
    retriever = CompressedColPaliRetriever(index=page_index, k=1, image_format="png")
    doc = retriever.invoke("rainfall forecast storm", include_image_base64=True)[0]
    assert doc.metadata["image_mime_type"] == "image/png"
    image = Image.open(io.BytesIO(base64.b64decode(doc.metadata["image_base64"])))
    stored = Image.open(doc.metadata["image_path"])
    assert image.size == stored.size


def test_k_field_and_invoke_kwarg(page_index: VisualIndex) -> None:
    retriever = CompressedColPaliRetriever(index=page_index, k=2)
    assert len(retriever.invoke("budget")) == 2
    assert len(retriever.invoke("budget", k=5)) == 5
    with pytest.raises(ValueError, match="positive int"):
        retriever.invoke("budget", k=0)


def test_filter_as_field_and_kwarg(page_index: VisualIndex) -> None:
    retriever = CompressedColPaliRetriever(index=page_index, k=6, filter={"year": 2020})
    assert {d.metadata["doc_id"] for d in retriever.invoke("federal budget")} == {"b"}
    docs = retriever.invoke("federal budget", filter={"year": {"$lt": 2020}})
    assert {d.metadata["doc_id"] for d in docs} == {"a"}
    assert docs[0].metadata["page"] == 1  # the budget page, now allowed by the filter


def test_unknown_kwarg_is_a_clear_error(page_index: VisualIndex) -> None:
    with pytest.raises(TypeError, match="top_k"):
        CompressedColPaliRetriever(index=page_index).invoke("budget", top_k=2)


async def test_async_matches_sync(page_index: VisualIndex) -> None:
    retriever = CompressedColPaliRetriever(index=page_index, k=3)
    sync = retriever.invoke("supreme court transcript")
    result = await retriever.ainvoke("supreme court transcript", k=3)
    assert [d.id for d in result] == [d.id for d in sync]


def test_from_path_opens_read_only(page_index: VisualIndex, fake_encoder) -> None:
    retriever = CompressedColPaliRetriever.from_path(page_index.path, encoder=fake_encoder, k=1)
    try:
        assert retriever.invoke("aircraft handbook")[0].metadata["page"] == 1
        assert retriever.index.store.readonly
    finally:
        retriever.index.close()


async def test_concurrent_ainvoke_calls_share_batches_not_a_lock(
    page_index: VisualIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent `ainvoke` calls search together (micro-batched through the query encoder),
    each getting its own answer; none waits for the others one by one."""
    queries = sorted(PLANTED) * 3
    retriever = CompressedColPaliRetriever(index=page_index, k=2)
    alone = [[d.id for d in retriever.invoke(q)] for q in queries]
    encoder = page_index.query_encoder
    plain = encoder.encode_queries
    sizes: list[int] = []

    def slow(batch: list[str]) -> list:
        sizes.append(len(batch))
        time.sleep(0.05)  # a real model's forward takes a while: concurrent queries pile up
        return plain(batch)

    monkeypatch.setattr(encoder, "encode_queries", slow)
    results = await asyncio.gather(*(retriever.ainvoke(q) for q in queries))
    assert [[d.id for d in r] for r in results] == alone
    assert sum(sizes) == len(queries) and max(sizes) > 1
