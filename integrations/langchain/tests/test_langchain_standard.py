"""The langchain-tests standard suites (sync and async) on both kinds of store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import (
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)
from vrag_compress import VisualIndex, get_compressor

from langchain_vrag_compress import CompressedColPaliRetriever, VragVectorStore


class TestVragVectorStoreTextEmbeddings(VectorStoreIntegrationTests):
    """Text `Embeddings` (one-token multi-vectors) in a fresh index per test."""

    @pytest.fixture()
    def vectorstore(self, tmp_path: Path) -> Iterator[VectorStore]:  # type: ignore[override]
        store = VragVectorStore(embedding=self.get_embeddings(), path=tmp_path / "index")
        try:
            yield store
        finally:
            store.close()


class TestVragVectorStoreColIndex(VectorStoreIntegrationTests):
    """Texts and queries through the index's own (fake) Col* encoder: multi-vector MaxSim."""

    @pytest.fixture()
    def vectorstore(self, tmp_path: Path, fake_encoder) -> Iterator[VectorStore]:  # type: ignore[override]
        index = VisualIndex.create(
            tmp_path / "index", compressor=get_compressor("identity"), encoder=fake_encoder
        )
        store = VragVectorStore(index)
        try:
            yield store
        finally:
            index.close()


class TestCompressedColPaliRetriever(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _index(self, page_index: VisualIndex) -> None:
        self.index = page_index

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return CompressedColPaliRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"index": self.index}

    @property
    def retriever_query_example(self) -> str:
        return "firearm background checks"
