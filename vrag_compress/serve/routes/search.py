"""``GET /api/search``: top-k pages for a query, as `vrag search --json` prints them, and for
each the snippet of its text around the match that `vrag search` shows (the web page's cards)."""

from __future__ import annotations

from typing import Any, cast

from fastapi import APIRouter, Depends, Query

from vrag_compress.encoders.errors import EncoderLoadError
from vrag_compress.serve.deps import READS, ApiError, check_query, server_of
from vrag_compress.serve.guards import public_hit
from vrag_compress.serve.server import Server
from vrag_compress.snippets import snippet
from vrag_compress.store import StoreError
from vrag_compress.store.base import SearchMode
from vrag_compress.store.filters import parse_user_filter

router = APIRouter(dependencies=READS, tags=["search"])
SNIPPET_CHARS = 160
"""About four lines of a result card."""


@router.get("/api/search")
def search(
    q: str = Query(..., min_length=1, description="The question or keywords."),
    k: int = Query(5, ge=1, description="Number of pages to return."),
    mode: str = Query(
        "auto",
        description="auto, exact or two_stage (MaxSim); text (BM25 over the page text); "
        "hybrid (both, fused).",
    ),
    alpha: float | None = Query(
        None, ge=0, le=1, description="hybrid: 0 text only .. 1 visual only (else RRF)."
    ),
    filter: list[str] = Query([], description="JSON object, or repeated KEY=VALUE."),
    server: Server = Depends(server_of),
) -> dict[str, Any]:
    """Top-k pages; each hit as `vrag search --json` prints it (with regions, and with
    `components` in the text and hybrid modes); `snippets` holds, hit by hit, about 160
    characters of its text around the first query word found in it."""
    check_query("q", q, k, server.config.max_k)
    try:
        hits = server.reader.search(
            q, k=k, filter=parse_user_filter(filter), mode=cast(SearchMode, mode), alpha=alpha
        )
    except (ValueError, EncoderLoadError, StoreError) as error:
        raise ApiError(400, str(error)) from error
    return {
        "query": q,
        "hits": [public_hit(h.to_dict(), server.root) for h in hits],
        "snippets": [snippet(h.text, q, width=SNIPPET_CHARS) for h in hits],
    }
