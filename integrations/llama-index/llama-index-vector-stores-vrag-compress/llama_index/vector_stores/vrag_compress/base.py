"""`VragVectorStore`: a LlamaIndex vector store backed by a compressed multi-vector `VisualIndex`.

The store encodes page images and queries itself with the index's Col* model
(`is_embedding_query=False`), so `VectorStoreIndex` never needs a real embedding model; pass
`StoreSideEmbedding()` to keep it from resolving the OpenAI default. Each `ImageNode` becomes one
stored page whose id is the node id; the node itself is kept in the page metadata
(`node_to_metadata_dict`, the convention of LlamaIndex stores) and restored on query.
The index folder is durable after every `add`, so `persist` has nothing to write.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode, ImageNode
from llama_index.core.utils import get_tqdm_iterable
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import node_to_metadata_dict
from PIL import Image
from vrag_compress import Compressor, Encoder, Page, VisualIndex, VisualIndexError

from llama_index.readers.vrag_compress.nodes import node_image
from llama_index.vector_stores.vrag_compress.filters import (
    StoreFilter,
    merge_filters,
    to_store_filter,
)
from llama_index.vector_stores.vrag_compress.hits import (
    ImageMode,
    check_image_mode,
    hit_to_node,
    keep_query_fields,
)

log = logging.getLogger(__name__)

_PROGRESS: contextvars.ContextVar[bool] = contextvars.ContextVar("vrag_progress", default=False)
"""Set by `StoreSideEmbedding` from `VectorStoreIndex(..., show_progress=...)`, which calls the
embedding right before `VragVectorStore.add`: the store then shows its real encoding progress."""


class StoreSideEmbedding(BaseEmbedding):
    """Placeholder embedding for `VectorStoreIndex` over `VragVectorStore`.

    The store embeds pages and queries itself with its Col* model, so these vectors are never
    used; passing this keeps `VectorStoreIndex` from resolving `Settings.embed_model` (OpenAI).
    """

    model_name: str = "vrag-store-side"

    @classmethod
    def class_name(cls) -> str:
        return "StoreSideEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return [0.0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return [0.0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return [0.0]

    def get_text_embedding_batch(
        self, texts: list[str], show_progress: bool = False, **kwargs: Any
    ) -> list[list[float]]:
        """No work and no progress bar here; `show_progress` is passed on to the store's `add`,
        where the pages are really encoded."""
        _PROGRESS.set(show_progress)
        return [[0.0] for _ in texts]

    async def aget_text_embedding_batch(
        self, texts: list[str], show_progress: bool = False, **kwargs: Any
    ) -> list[list[float]]:
        return self.get_text_embedding_batch(texts, show_progress)


@dataclass
class _PendingPage:
    """One node, validated and resolved to a page, before anything is written."""

    node: ImageNode
    doc_id: str
    page_no: int
    image: Image.Image
    source: str | None


class VragVectorStore(BasePydanticVectorStore):
    """Compressed ColPali-family page store for `VectorStoreIndex`.

    Build it with `VragVectorStore.from_path(folder, model=...)` (creates the index folder when
    missing) or `VragVectorStore(index=visual_index)`. Nodes must be `ImageNode`s (one per page,
    e.g. from `PageImageNodeParser`); node metadata keys are filterable with `MetadataFilters`.
    """

    stores_text: bool = True
    is_embedding_query: bool = False
    flat_metadata: bool = False
    path: str = Field(description="The VisualIndex folder.")
    image_mode: ImageMode = Field(
        default="path", description="How query results carry page images."
    )
    show_progress: bool = Field(default=False, description="Progress bar while pages encode.")

    _index: VisualIndex = PrivateAttr()

    def __init__(self, index: VisualIndex, *, image_mode: str = "path", **kwargs: Any) -> None:
        if not isinstance(index, VisualIndex):
            raise TypeError(
                f"index must be a VisualIndex, got {type(index).__name__}; "
                "use VragVectorStore.from_path(folder) to open or create one"
            )
        # pydantic sets this class's own fields through the base __init__
        super().__init__(  # type: ignore[call-arg]
            path=str(index.path), image_mode=check_image_mode(image_mode), **kwargs
        )
        self._index = index

    @classmethod
    def from_path(
        cls,
        path: str | Path,
        *,
        model: str | None = None,
        compressor: Compressor | str | None = None,
        ratio: float = 0.1,
        encoder: Encoder | None = None,
        device: str = "auto",
        image_mode: str = "path",
        readonly: bool = False,
        show_progress: bool = False,
    ) -> VragVectorStore:
        """Open the index at `path`, or create it there with `model` (default
        `vidore/colqwen2-v1.0`) and `compressor`; an explicit `model` must match an existing
        index's model.

        A writable store holds the index's write lock until `close()` (or the end of a `with`
        block); `readonly=True` opens an existing index for queries only, beside a writer."""
        if readonly:
            index = VisualIndex.open(
                path, model=model, encoder=encoder, device=device, readonly=True
            )
        else:
            index = VisualIndex.open_or_create(
                path,
                model=model,
                encoder=encoder,
                device=device,
                compressor=compressor,
                ratio=ratio,
            )
        return cls(index, image_mode=image_mode, show_progress=show_progress)

    def close(self) -> None:
        """Release the index (and its write lock); the store cannot be used afterwards."""
        self._index.close()

    def __enter__(self) -> VragVectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def class_name(cls) -> str:
        return "VragVectorStore"

    @property
    def client(self) -> VisualIndex:
        return self._index

    @property
    def index(self) -> VisualIndex:
        return self._index

    # ----------------------------------------------------------------- writing
    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Encode, compress and store image nodes (same node id replaces the stored page)."""
        pending = self._resolve(nodes)
        show = self.show_progress or _PROGRESS.get()
        step = self._index.batch_size
        batches = [pending[i : i + step] for i in range(0, len(pending), step)]
        ids: list[str] = []
        for batch in get_tqdm_iterable(batches, show, f"Encoding pages ({step} per batch)"):
            # no `source` on the Page: the node's own `source` metadata is stored as given
            pages = [
                Page(p.doc_id, p.page_no, p.image, p.node.text or None, None)  # type: ignore[arg-type]
                for p in batch
            ]
            try:
                ids += self._index.upsert_pages(
                    pages,
                    page_ids=[p.node.node_id for p in batch],
                    metadata=[_stored_metadata(p) for p in batch],
                )
            except VisualIndexError as error:  # e.g. a page without visual tokens
                raise ValueError(str(error)) from error
        return ids

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        return await asyncio.to_thread(self.add, nodes, **kwargs)

    def _resolve(self, nodes: Sequence[BaseNode]) -> list[_PendingPage]:
        """Check every node and find its document and page number before writing anything."""
        ids = Counter(n.node_id for n in nodes)
        repeated = sorted(i for i, c in ids.items() if c > 1)
        if repeated:
            raise ValueError(f"node ids repeat within one add: {repeated[:5]}")
        pending: list[_PendingPage] = []
        numbered: Counter[str] = Counter()
        for i, node in enumerate(nodes):
            if not isinstance(node, ImageNode):
                raise TypeError(
                    f"nodes[{i}] ({node.node_id!r}) is a {type(node).__name__}; VragVectorStore "
                    "indexes page images: parse documents with PageImageNodeParser"
                )
            doc_id = node.ref_doc_id or node.node_id
            page_no = _page_no(node.metadata.get("page_no"))
            if page_no is None:
                numbered[doc_id] += 1
                page_no = numbered[doc_id]
            source = (
                node.metadata.get("source") or node.metadata.get("file_path") or node.image_path
            )
            pending.append(_PendingPage(node, doc_id, page_no, node_image(node), source))
        return pending

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every page of a document (and its stored images)."""
        self._index.delete(ref_doc_id)

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Delete pages by node id and/or filter (both given: pages matching both)."""
        if node_ids is None and filters is None:
            raise ValueError("delete_nodes needs node_ids or filters; use clear() to empty it")
        self._index.delete_pages(self._select(node_ids, filters))

    def clear(self) -> None:
        """Delete every document and page."""
        self._index.clear()

    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Nothing to do: every `add` and `delete` is committed to the index folder."""
        log.debug(
            "VragVectorStore at %s is already durable; persist(%s) is a no-op",
            self.path,
            persist_path,
        )

    # ----------------------------------------------------------------- reading
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Top-k pages for `query.query_str`; filters and `doc_ids` restrict them.

        `query.mode`: DEFAULT ranks by MaxSim; TEXT_SEARCH (or SPARSE) by BM25 over the page
        text; HYBRID fuses both (reciprocal rank fusion, or `query.alpha`-weighted normalised
        scores; `sparse_top_k` text candidates; `hybrid_top_k` results when set). Hybrid and
        text nodes carry `search_components` in their metadata: each side's rank and score.

        `query.node_ids` is ignored: `VectorStoreIndex.as_retriever()` fills it with only the
        nodes inserted through that index object, which would hide pages indexed elsewhere.
        """
        options = search_options(
            query.mode,
            similarity_top_k=query.similarity_top_k,
            alpha=query.alpha,
            sparse_top_k=query.sparse_top_k,
            hybrid_top_k=query.hybrid_top_k,
        )
        if not query.query_str or not query.query_str.strip():
            raise ValueError(
                "VragVectorStore encodes queries itself and needs query.query_str; "
                "query_embedding is not used"
            )
        doc_filter = {"doc_id": {"$in": list(query.doc_ids)}} if query.doc_ids else None
        where = merge_filters(to_store_filter(query.filters), doc_filter)
        hits = self._index.search(query.query_str, filter=where, **options)
        result = QueryResult(
            nodes=[hit_to_node(h, self.image_mode) for h in hits],
            similarities=[h.score for h in hits],
            ids=[h.page_id for h in hits],
        )
        result.images = self.image_mode != "none"
        return result

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        return await asyncio.to_thread(self.query, query, **kwargs)

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """Stored nodes by id and/or filter (all nodes when neither is given)."""
        hits = self._index.get(self._select(node_ids, filters))
        return [hit_to_node(h, self.image_mode) for h in hits]

    def _select(self, node_ids: list[str] | None, filters: MetadataFilters | None) -> list[str]:
        """Page ids matching the ids and the filter, evaluated by the store's own filter engine."""
        store = self._index.store
        if filters is None:
            return list(node_ids) if node_ids is not None else store.page_ids()
        id_filter = {"page_id": {"$in": list(node_ids)}} if node_ids is not None else None
        where: StoreFilter | None = merge_filters(to_store_filter(filters), id_filter)
        total = store.count()
        if total == 0:
            return []
        # a neutral query ranks every page at 0, so the top-`total` is exactly the filtered set
        probe = np.zeros((1, int(store.config["dim"])), dtype=np.float32)
        return [r.page_id for r in store.search(probe, k=total, filter=where, mode="exact")]


class QueryResult(VectorStoreQueryResult):
    """A query result whose nodes keep their query-time fields when LlamaIndex swaps them.

    On an index built from nodes or documents, LlamaIndex's `VectorIndexRetriever` replaces
    every returned node that is not a TEXT node with the copy `VectorStoreIndex` put in its
    docstore when the node was added (it keeps one for every `ImageNode`, even when the store
    `stores_text`), by assigning `query_result.nodes` (llama_index.core 0.14.25,
    `indices/vector_store/retrievers/retriever.py`, lines 146-170 and 240/261). Those copies
    predate the query, so that assignment puts the query's `search_components` and page image
    back on them: every path returns the same fields.
    """

    images: bool = True

    def __setattr__(self, name: str, value: Any) -> None:
        found = self.__dict__.get("nodes")
        if name == "nodes" and found and value is not None:
            value = keep_query_fields(found, value, images=self.images)
        super().__setattr__(name, value)


# LlamaIndex query modes and the index's search modes they run.
QUERY_MODES = {
    VectorStoreQueryMode.DEFAULT: "auto",
    VectorStoreQueryMode.HYBRID: "hybrid",
    VectorStoreQueryMode.TEXT_SEARCH: "text",
    VectorStoreQueryMode.SPARSE: "text",
}


def search_options(
    mode: VectorStoreQueryMode | str,
    *,
    similarity_top_k: int,
    alpha: float | None = None,
    sparse_top_k: int | None = None,
    hybrid_top_k: int | None = None,
) -> dict[str, Any]:
    """`VisualIndex.search` keyword arguments for a LlamaIndex query mode and its settings."""
    try:
        wanted = VectorStoreQueryMode(mode)
    except ValueError:
        wanted = None
    if wanted not in QUERY_MODES:
        names = ", ".join(m.value for m in QUERY_MODES)
        raise ValueError(f"VragVectorStore supports the query modes {names}; got {mode!r}")
    search_mode = QUERY_MODES[wanted]
    if search_mode == "hybrid":
        return {
            "mode": "hybrid",
            "k": hybrid_top_k or similarity_top_k,
            "alpha": alpha,
            "text_k": sparse_top_k,
        }
    if search_mode == "text":
        return {"mode": "text", "k": sparse_top_k or similarity_top_k}
    return {"mode": "auto", "k": similarity_top_k}


def _page_no(value: Any) -> int | None:
    """A 1-based page number from node metadata, or None when absent or not a number."""
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 1 else None


def _stored_metadata(page: _PendingPage) -> dict[str, Any]:
    """The node (without its image bytes or text) plus the citation fields `VisualIndex` hits
    expect; `upsert_pages` adds `n_tokens` and `text_source`."""
    node = page.node.model_copy()
    node.image = None
    node.embedding = None
    metadata = node_to_metadata_dict(node, remove_text=True, flat_metadata=False)
    metadata.setdefault("source", page.source)
    metadata.setdefault("filename", Path(page.source).name if page.source else None)
    return metadata
