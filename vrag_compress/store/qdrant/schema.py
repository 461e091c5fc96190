"""How a Qdrant collection holds an index: its named vectors and payload (`create_collections`),
the point of a page (`page_point`) and the records read back (`page_record`, `doc_record`), the
stable point ids, and the sidecar collection's name and config row.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

import numpy as np

from vrag_compress.store.base import DocumentRecord, PageRecord
from vrag_compress.store.lexical import sparse_document
from vrag_compress.store.qdrant.access import QdrantLocation, QdrantOptions, retry

try:
    from qdrant_client import QdrantClient, models
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Qdrant backend needs qdrant-client: pip install 'vrag-compress[qdrant]'"
    ) from exc

PAGES = "pages"
TEXT = "text"  # the sparse BM25 vector of the page text
CANDIDATES = ("mean", "binary", "none")
SIDECAR_SUFFIX = "__vrag"
SCHEMA_VERSION = 1
NAMESPACE = uuid.UUID("5b0c6f1e-6a43-4c1e-9a53-3b8d2f6c1a77")
CONFIG_ID = str(uuid.uuid5(NAMESPACE, "config:"))


def create_collections(
    client: QdrantClient, loc: QdrantLocation, dim: int, candidate: str, opts: QdrantOptions
) -> None:
    maxsim = models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM)
    vectors = {
        PAGES: models.VectorParams(
            size=dim,
            distance=models.Distance.DOT,
            multivector_config=maxsim,
            hnsw_config=models.HnswConfigDiff(m=0),
            datatype=models.Datatype.FLOAT16,
            on_disk=opts.on_disk,
        )
    }
    if candidate == "mean":
        vectors["mean"] = models.VectorParams(size=dim, distance=models.Distance.DOT)
    elif candidate == "binary":
        vectors["binary"] = models.VectorParams(
            size=dim,
            distance=models.Distance.DOT,
            multivector_config=maxsim,
            datatype=models.Datatype.FLOAT16,
            on_disk=opts.on_disk,
        )
    sparse = {TEXT: models.SparseVectorParams(modifier=models.Modifier.IDF)}
    retry(
        opts,
        "create collection",
        lambda: client.create_collection(
            loc.collection,
            vectors_config=vectors,
            sparse_vectors_config=sparse,
            shard_number=opts.shards,
            replication_factor=opts.replicas,
            on_disk_payload=opts.on_disk or None,
        ),
    )
    if not retry(
        opts, "collection check", lambda: client.collection_exists(loc.collection + SIDECAR_SUFFIX)
    ):
        retry(  # one shard (it holds a few rows per document), as many copies as the pages
            opts,
            "create collection",
            lambda: client.create_collection(
                loc.collection + SIDECAR_SUFFIX,
                vectors_config={},
                replication_factor=opts.replicas,
            ),
        )
    if loc.host is not None:  # payload indexes only matter on a server (local mode warns)
        for name, schema in (
            ("doc_id", models.PayloadSchemaType.KEYWORD),
            ("page_id", models.PayloadSchemaType.KEYWORD),
            ("page_no", models.PayloadSchemaType.INTEGER),
        ):
            retry(
                opts,
                "create index",
                partial(client.create_payload_index, loc.collection, name, schema),
            )


def signs(vectors: np.ndarray) -> np.ndarray:
    """Binary quantisation: +-1/sqrt(D) per component (dot = 1 - 2 * hamming / D)."""
    return np.where(vectors >= 0, 1.0, -1.0).astype(np.float32) / np.sqrt(vectors.shape[1])


def point_id(page_id: str) -> str:
    return str(uuid.uuid5(NAMESPACE, "page:" + page_id))


def doc_point_id(doc_id: str) -> str:
    return str(uuid.uuid5(NAMESPACE, "doc:" + doc_id))


def page_record(point: Any) -> PageRecord:
    p = point.payload
    vectors = point.vector[PAGES] if isinstance(point.vector, dict) else point.vector
    return PageRecord(
        p["page_id"],
        p["doc_id"],
        int(p["page_no"]),
        np.asarray(vectors, dtype=np.float32),
        dict(p.get("metadata") or {}),
        p.get("image_ref"),
        p.get("text"),
    )


def doc_record(p: dict[str, Any]) -> DocumentRecord:
    return DocumentRecord(
        p["doc_id"],
        p.get("source"),
        p.get("content_hash"),
        p.get("n_pages"),
        bool(p.get("complete")),
        dict(p.get("metadata") or {}),
    )


def layout_free(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without ``fp16``/``codes``/``layout``: a collection holds full vectors, never
    codes."""
    return {k: v for k, v in config.items() if k not in ("fp16", "codes", "layout")}


def page_point(
    page: PageRecord, vectors16: np.ndarray, candidate: str, text_index: bool
) -> models.PointStruct:
    """A page as a point: its vectors (and the candidate field's), the sparse BM25 terms of its
    text when the collection has a text index, and the payload."""
    vec = vectors16.astype(np.float32)
    named: dict[str, Any] = {PAGES: vec.tolist()}
    if candidate == "mean":
        named["mean"] = vec.mean(axis=0).tolist()
    elif candidate == "binary":
        named["binary"] = signs(vec).tolist()
    indices, values = sparse_document(page.text)
    if indices and text_index:
        named[TEXT] = models.SparseVector(indices=indices, values=values)
    payload = {
        "page_id": page.page_id,
        "doc_id": page.doc_id,
        "page_no": int(page.page_no),
        "metadata": page.metadata,
        "image_ref": page.image_ref,
        "text": page.text,
    }
    return models.PointStruct(id=point_id(page.page_id), vector=named, payload=payload)
