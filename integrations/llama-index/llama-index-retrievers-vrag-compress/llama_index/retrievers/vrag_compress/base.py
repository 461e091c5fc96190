"""`CompressedColPaliRetriever`: a LlamaIndex retriever over a compressed `VisualIndex`.

The index encodes the query with its own Col* model and scores pages by exact MaxSim, so no
LlamaIndex embedding model is involved. Each hit comes back as a `NodeWithScore` holding an
`ImageNode` with the page image attached, which a multimodal response synthesizer
(`RetrieverQueryEngine.from_args(..., multimodal=True)`) sends to the LLM as an image block.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreQueryMode
from vrag_compress import Encoder, Hit, VisualIndex

from llama_index.vector_stores.vrag_compress import VragVectorStore
from llama_index.vector_stores.vrag_compress.base import search_options
from llama_index.vector_stores.vrag_compress.filters import StoreFilter, to_store_filter
from llama_index.vector_stores.vrag_compress.hits import ImageMode, check_image_mode, hit_to_node


class CompressedColPaliRetriever(BaseRetriever):
    """Top-k pages of a `VisualIndex` for a text query, as image nodes with scores.

    Args:
        index: an open `VisualIndex`, a `VragVectorStore`, a `VectorStoreIndex` over one (these
            share the index and its loaded model), or the path of an index folder (opened
            read-only, loading the model again unless `encoder` is given).
        similarity_top_k: how many pages to return.
        filters: LlamaIndex `MetadataFilters` (or a store filter dict) applied to every query.
        image_mode: "path" (stored page image file, inline PNG when the index keeps none),
            "base64" (always inline) or "none".
        encoder: an encoder object to use instead of loading the index's model (tests, GPUs).
        vector_store_query_mode: "default" (MaxSim), "text_search" (BM25 over the page text)
            or "hybrid" (both fused: reciprocal rank fusion, or `alpha`-weighted scores).
        alpha: hybrid weight, 0 text only .. 1 visual only; None for reciprocal rank fusion.
        sparse_top_k: text candidates a hybrid search fuses (default max(k, 50)).
        neighbours: also return, after each page, the N pages before and after it in its
            document (each page once, in page order, score None, metadata ``neighbour_of``
            naming the page they came with), so a query engine shows the model a table that
            runs over a page break whole and its source nodes include the page cited.

    A `QueryBundle` with `image_path` searches with that picture instead of the words: a Col*
    index encodes it as a page; a text-encoder index (minilm) reads its words by OCR and each
    node's metadata then holds them as ``query_ocr``. The words still go to the LLM.
    """

    def __init__(
        self,
        index: Any,
        *,
        similarity_top_k: int = 5,
        filters: MetadataFilters | StoreFilter | None = None,
        image_mode: ImageMode = "path",
        encoder: Encoder | None = None,
        vector_store_query_mode: VectorStoreQueryMode | str = VectorStoreQueryMode.DEFAULT,
        alpha: float | None = None,
        sparse_top_k: int | None = None,
        neighbours: int = 0,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if isinstance(similarity_top_k, bool) or not isinstance(similarity_top_k, int):
            raise TypeError(f"similarity_top_k must be an int, got {similarity_top_k!r}")
        if similarity_top_k < 1:
            raise ValueError(f"similarity_top_k must be >= 1, got {similarity_top_k}")
        search_options(  # a clear error now for a mode or alpha the index cannot run
            vector_store_query_mode, similarity_top_k=similarity_top_k, alpha=alpha
        )
        self.vector_store_query_mode = VectorStoreQueryMode(vector_store_query_mode)
        self.alpha = alpha
        self.sparse_top_k = sparse_top_k
        shared = _shared_index(index)
        self._owns_index = shared is None
        if shared is not None:
            self._index = shared
        else:
            self._index = VisualIndex.open(index, encoder=encoder, readonly=True)
        self.similarity_top_k = similarity_top_k
        if isinstance(neighbours, bool) or not isinstance(neighbours, int) or neighbours < 0:
            raise ValueError(f"neighbours must be a whole number >= 0, got {neighbours!r}")
        self.neighbours = neighbours
        self._filter = to_store_filter(filters)
        self.image_mode = check_image_mode(image_mode)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_path(cls, path: str | Path, **kwargs: Any) -> CompressedColPaliRetriever:
        """Open the index folder at `path` read-only and wrap it."""
        return cls(Path(path), **kwargs)

    @property
    def index(self) -> VisualIndex:
        return self._index

    @property
    def filters(self) -> StoreFilter | None:
        """The store filter applied to every query (translated from `MetadataFilters`)."""
        return self._filter

    @filters.setter
    def filters(self, filters: MetadataFilters | StoreFilter | None) -> None:
        self._filter = to_store_filter(filters)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = query_bundle.query_str
        image = query_bundle.image_path
        if not image and (not query or not query.strip()):
            raise ValueError("the query is empty; pass the question text to retrieve()")
        options = search_options(
            self.vector_store_query_mode,
            similarity_top_k=self.similarity_top_k,
            alpha=self.alpha,
            sparse_top_k=self.sparse_top_k,
        )
        if image:
            hits = self._index.search(
                image=image, filter=self._filter, neighbours=self.neighbours, **options
            )
        else:
            hits = self._index.search(
                query, filter=self._filter, neighbours=self.neighbours, **options
            )
        return self._nodes(hits)

    def _nodes(self, hits: list[Hit]) -> list[NodeWithScore]:
        """Each hit as a scored node, followed by its unseen neighbours (score None)."""
        nodes: list[NodeWithScore] = []
        seen: set[str] = set()
        for hit in hits:
            for page in hit.pages:  # the hit alone unless neighbours were asked for
                if page.page_id in seen:
                    continue
                seen.add(page.page_id)
                node = hit_to_node(page, self.image_mode)
                if hit.query_ocr is not None:
                    node.metadata["query_ocr"] = hit.query_ocr
                if page is not hit:
                    node.metadata["neighbour_of"] = hit.page_id
                nodes.append(NodeWithScore(node=node, score=hit.score if page is hit else None))
        return nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Runs the (CPU/GPU-bound) search in a worker thread so the event loop stays free."""
        return await asyncio.to_thread(self._retrieve, query_bundle)

    def close(self) -> None:
        """Close the index if this retriever opened it from a path."""
        if self._owns_index:
            self._index.close()


def _shared_index(index: Any) -> VisualIndex | None:
    """The `VisualIndex` behind an index, vector store or `VectorStoreIndex`; None for a path."""
    if isinstance(index, VisualIndex):
        return index
    if isinstance(index, VragVectorStore):
        return index.index
    store = getattr(index, "vector_store", None)  # VectorStoreIndex
    if isinstance(store, VragVectorStore):
        return store.index
    if isinstance(index, (str, os.PathLike)):
        return None
    kind = type(index).__name__
    if store is not None:
        kind = f"{kind} over a {type(store).__name__}"
    raise TypeError(
        f"CompressedColPaliRetriever needs a VisualIndex, a VragVectorStore, a VectorStoreIndex "
        f"over a VragVectorStore, or an index folder path; got a {kind}"
    )
