"""The queries a search sends to Qdrant and what it makes of the answers: MaxSim over the
pages (exact, or over a candidate field's prefetch), BM25 over the sparse text vector, the
filters that select a document's points, and the hits with each side's rank and score.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from vrag_compress.store.base import SearchResult
from vrag_compress.store.fusion import RRF_K
from vrag_compress.store.lexical import sparse_query
from vrag_compress.store.qdrant.schema import PAGES, TEXT, signs

try:
    from qdrant_client import models
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Qdrant backend needs qdrant-client: pip install 'vrag-compress[qdrant]'"
    ) from exc

HYBRID_DEPTH = 50  # candidates each side of a hybrid search gives the fusion (at least k)
TIE_MARGIN = 8  # extra hits fetched so ties at the k-th score can be ordered by page_id


def match(key: str, value: str) -> models.Filter:
    return models.Filter(
        must=[models.FieldCondition(key=key, match=models.MatchValue(value=value))]
    )


def as_prefetch(request: models.QueryRequest) -> models.Prefetch:
    """A query request as a prefetch of a fusion query."""
    return models.Prefetch(
        prefetch=request.prefetch,
        query=request.query,
        using=request.using,
        filter=request.filter,
        limit=request.limit,
    )


def with_components(
    hit: SearchResult, text_hits: list[SearchResult], maxsim: dict[str, float]
) -> SearchResult:
    """A fused hit with each side's rank and score: the text side's from its own list, the
    visual rank from the fused score (``1/(RRF_K + rank)`` per side), its MaxSim from
    ``maxsim``."""
    components: dict[str, dict[str, float]] = {}
    text_rank = next((i for i, t in enumerate(text_hits, start=1) if t.page_id == hit.page_id), 0)
    visual_share = hit.score
    if text_rank:
        components["text"] = {"rank": text_rank, "score": text_hits[text_rank - 1].score}
        visual_share -= 1.0 / (RRF_K + text_rank)
    if visual_share > 1e-9:
        rank = int(round(1.0 / visual_share - RRF_K))
        components = {
            "visual": {"rank": rank, "score": maxsim.get(hit.page_id, float("nan"))},
            **components,
        }
    return dataclasses.replace(hit, components=components)


def results(points: list[Any], k: int) -> list[SearchResult]:
    hits = [
        SearchResult(
            p.payload["page_id"],
            p.payload["doc_id"],
            int(p.payload["page_no"]),
            float(p.score),
            dict(p.payload.get("metadata") or {}),
            p.payload.get("image_ref"),
            p.payload.get("text"),
        )
        for p in points
    ]
    return sorted(hits, key=lambda h: (-h.score, h.page_id))[:k]


def text_request(text: str, limit: int, flt: models.Filter | None) -> models.QueryRequest:
    """BM25 over the page text: the query's terms against the sparse ``text`` vector."""
    indices, values = sparse_query(text)
    return models.QueryRequest(
        query=models.SparseVector(indices=indices or [0], values=values or [0.0]),
        using=TEXT,
        filter=flt,
        limit=limit,
        with_payload=True,
        with_vector=False,
    )


def page_request(
    q: np.ndarray,
    limit: int,
    flt: models.Filter | None,
    *,
    candidate: str | None,
    candidates: int,
) -> models.QueryRequest:
    """MaxSim over the pages' vectors; with a ``candidate`` field, over the ``candidates``
    best pages it prefetches (None: every page, exact)."""
    prefetch = None
    if candidate is not None:
        cand = q.mean(axis=0).tolist() if candidate == "mean" else signs(q).tolist()
        prefetch = models.Prefetch(
            query=cand,
            using=candidate,
            filter=flt,
            limit=max(limit, candidates),
        )
    return models.QueryRequest(
        query=q.tolist(),
        using=PAGES,
        prefetch=prefetch,
        filter=flt,
        limit=limit,
        with_payload=True,
        with_vector=False,
    )
