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
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import node_to_metadata_dict
from PIL import Image
from vrag_compress.compress.base import Compressor
from vrag_compress.encoders.base import Encoder
from vrag_compress.index import DEFAULT_MODEL, Hit, VisualIndex
from vrag_compress.store import DocumentRecord, PageRecord

from llama_index.retrievers.vrag_compress.filters import (
    StoreFilter,
    merge_filters,
    to_store_filter,
)
from llama_index.retrievers.vrag_compress.nodes import check_image_mode, hit_to_node, node_image

log = logging.getLogger(__name__)


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
    image_mode: str = Field(default="path", description="How query results carry page images.")

    _index: VisualIndex = PrivateAttr()

    def __init__(self, index: VisualIndex, *, image_mode: str = "path", **kwargs: Any) -> None:
        if not isinstance(index, VisualIndex):
            raise TypeError(
                f"index must be a VisualIndex, got {type(index).__name__}; "
                "use VragVectorStore.from_path(folder) to open or create one"
            )
        super().__init__(path=str(index.path), image_mode=check_image_mode(image_mode), **kwargs)
        self._index = index

    @classmethod
    def from_path(
        cls,
        path: str | Path,
        *,
        model: str = DEFAULT_MODEL,
        compressor: Compressor | str | None = None,
        ratio: float = 0.1,
        encoder: Encoder | None = None,
        device: str = "auto",
        image_mode: str = "path",
    ) -> VragVectorStore:
        """Open the index at `path`, or create it there with `model` and `compressor`."""
        if VisualIndex.exists(path):
            index = VisualIndex.open(path, encoder=encoder, device=device)
        else:
            index = VisualIndex.create(
                path, model=model, compressor=compressor, ratio=ratio, device=device,
                encoder=encoder,
            )
        return cls(index, image_mode=image_mode)

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
        batch_size = max(1, self._index.batch_size)
        for start in range(0, len(pending), batch_size):
            self._write(pending[start : start + batch_size])
        return [p.node.node_id for p in pending]

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

    def _write(self, batch: list[_PendingPage]) -> None:
        """Encode, compress, save images, and commit one batch atomically (upsert)."""
        index = self._index
        encodings = index.encoder.encode_pages(
            [p.image for p in batch], with_stats=index.compressor.requires_stats
        )
        empty = [p.node.node_id for p, e in zip(batch, encodings, strict=True) if e.n_tokens == 0]
        if empty:
            raise ValueError(f"the encoder produced no visual tokens for nodes {empty}")
        compressed = index.compressor.compress_many(encodings)
        records = []
        for page, encoding, packed in zip(batch, encodings, compressed, strict=True):
            image_ref = index.assets.save(page.doc_id, page.page_no, page.image)
            index.assets.save_layout(page.doc_id, page.page_no, encoding, packed, page.image.size)
            records.append(
                PageRecord(
                    page_id=page.node.node_id,
                    doc_id=page.doc_id,
                    page_no=page.page_no,
                    vectors=packed.vectors,
                    metadata=_stored_metadata(page, encoding.n_tokens),
                    image_ref=image_ref,
                    text=page.node.text or None,
                )
            )
        new_docs = {p.doc_id: p.source for p in batch if index.store.document(p.doc_id) is None}
        documents = [
            DocumentRecord(doc_id=d, source=str(s) if s else None, complete=True)
            for d, s in new_docs.items()
        ]
        index.store.upsert(records, documents=documents)

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
        store = self._index.store
        records = self._records(self._select(node_ids, filters))
        if not records:
            return
        store.delete(page_ids=[r.page_id for r in records])
        for record in records:
            self._remove_assets(record)
        for doc_id in {r.doc_id for r in records}:
            if not store.page_ids(doc_id):
                self._index.delete(doc_id)

    def clear(self) -> None:
        """Delete every document and page."""
        for document in self._index.documents():
            self._index.delete(document.doc_id)
        leftover = self._index.store.page_ids()
        if leftover:
            self._index.store.delete(page_ids=leftover)

    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Nothing to do: every `add` and `delete` is committed to the index folder."""
        log.debug("VragVectorStore at %s is already durable; persist(%s) is a no-op",
                  self.path, persist_path)

    # ----------------------------------------------------------------- reading
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Top-k pages for `query.query_str` by MaxSim; filters and `doc_ids` restrict them.

        `query.node_ids` is ignored: `VectorStoreIndex.as_retriever()` fills it with only the
        nodes inserted through that index object, which would hide pages indexed elsewhere.
        """
        if query.mode != VectorStoreQueryMode.DEFAULT:
            raise ValueError(
                f"VragVectorStore supports only the default query mode, got {query.mode.value!r}"
            )
        if not query.query_str or not query.query_str.strip():
            raise ValueError(
                "VragVectorStore encodes queries itself and needs query.query_str; "
                "query_embedding is not used"
            )
        doc_filter = {"doc_id": {"$in": list(query.doc_ids)}} if query.doc_ids else None
        where = merge_filters(to_store_filter(query.filters), doc_filter)
        hits = self._index.search(query.query_str, k=query.similarity_top_k, filter=where)
        return VectorStoreQueryResult(
            nodes=[hit_to_node(h, self.image_mode) for h in hits],  # type: ignore[arg-type]
            similarities=[h.score for h in hits],
            ids=[h.page_id for h in hits],
        )

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        return await asyncio.to_thread(self.query, query, **kwargs)

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """Stored nodes by id and/or filter (all nodes when neither is given)."""
        records = self._records(self._select(node_ids, filters))
        return [hit_to_node(self._as_hit(r), self.image_mode) for r in records]

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

    def _records(self, page_ids: list[str]) -> list[PageRecord]:
        """The stored pages among `page_ids`, in that order (unknown ids are skipped)."""
        if not page_ids:
            return []
        known = set(self._index.store.page_ids())
        return self._index.store.get([i for i in page_ids if i in known])

    def _as_hit(self, record: PageRecord) -> Hit:
        return Hit(
            doc_id=record.doc_id,
            page_no=record.page_no,
            score=0.0,
            source=record.metadata.get("source"),
            metadata=dict(record.metadata),
            text=record.text,
            page_id=record.page_id,
            _assets=self._index.assets,
            _image_ref=record.image_ref,
        )

    def _remove_assets(self, record: PageRecord) -> None:
        root = self._index.path
        layout = root / "layouts" / record.doc_id / f"{record.page_no}.npz"
        for path in (self._index.assets.image_path(record.image_ref), layout):
            if path is not None:
                path.unlink(missing_ok=True)


def _page_no(value: Any) -> int | None:
    """A 1-based page number from node metadata, or None when absent or not a number."""
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 1 else None


def _stored_metadata(page: _PendingPage, n_tokens: int) -> dict[str, Any]:
    """The node (without its image bytes or text) plus the fields `VisualIndex` hits expect."""
    node = page.node.model_copy()
    node.image = None
    node.embedding = None
    metadata = node_to_metadata_dict(node, remove_text=True, flat_metadata=False)
    metadata.setdefault("source", page.source)
    metadata.setdefault("filename", Path(page.source).name if page.source else None)
    metadata["n_tokens"] = n_tokens
    return metadata
