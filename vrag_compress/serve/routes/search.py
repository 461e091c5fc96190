"""``/api/search``: top-k pages, as `vrag search --json` prints them, and for each the snippet of
its text around the match that `vrag search` shows (the web page's cards).

``GET`` searches with words; ``POST`` with an uploaded image (a multipart form, as a browser's
file input or ``curl -F image=@photo.png`` sends it): "find pages like this one"."""

from __future__ import annotations

from typing import Any, cast

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile

from vrag_compress.encoders.errors import EncoderLoadError
from vrag_compress.index import Hit
from vrag_compress.serve.deps import READS, ApiError, check_query, server_of
from vrag_compress.serve.guards import public_hit, too_large
from vrag_compress.serve.server import Server
from vrag_compress.snippets import snippet
from vrag_compress.store import StoreError
from vrag_compress.store.base import SearchMode
from vrag_compress.store.filters import parse_user_filter

router = APIRouter(dependencies=READS, tags=["search"])
SNIPPET_CHARS = 160
"""About four lines of a result card."""
MAX_NEIGHBOURS = 5
"""Pages before and after each hit a request may ask for (k * 2 * 5 pages at most)."""
MODE_HELP = (
    "auto, exact or two_stage (MaxSim); text (BM25 over the page text); hybrid (both, fused)."
)
NEIGHBOURS_HELP = "Also return the N pages before and after each hit (its context)."


@router.get("/api/search")
def search(
    q: str = Query(..., min_length=1, description="The question or keywords."),
    k: int = Query(5, ge=1, description="Number of pages to return."),
    mode: str = Query("auto", description=MODE_HELP),
    alpha: float | None = Query(
        None, ge=0, le=1, description="hybrid: 0 text only .. 1 visual only (else RRF)."
    ),
    filter: list[str] = Query([], description="JSON object, or repeated KEY=VALUE."),
    neighbours: int = Query(0, ge=0, le=MAX_NEIGHBOURS, description=NEIGHBOURS_HELP),
    server: Server = Depends(server_of),
) -> dict[str, Any]:
    """Top-k pages; each hit as `vrag search --json` prints it (with regions, with `context`
    when ``neighbours`` is set, and with `components` in the text and hybrid modes);
    `snippets` holds, hit by hit, about 160 characters of its text around the first query
    word found in it."""
    check_query("q", q, k, server.config.max_k)
    try:
        hits = server.reader.search(
            q,
            k=k,
            filter=parse_user_filter(filter),
            mode=cast(SearchMode, mode),
            alpha=alpha,
            neighbours=neighbours,
        )
    except (ValueError, EncoderLoadError, StoreError) as error:
        raise ApiError(400, str(error)) from error
    return {"query": q, **_found(hits, q, server)}


@router.post("/api/search")
def search_image(
    image: UploadFile = File(..., description="The query image: PNG, JPEG, TIFF or WebP."),
    k: int = Form(5, ge=1, description="Number of pages to return."),
    mode: str = Form("auto", description=MODE_HELP),
    filter: list[str] = Form([], description="JSON object, or repeated KEY=VALUE."),
    neighbours: int = Form(0, ge=0, le=MAX_NEIGHBOURS, description=NEIGHBOURS_HELP),
    server: Server = Depends(server_of),
) -> dict[str, Any]:
    """Pages like the uploaded image, as ``GET`` returns them. A Col* index encodes the image
    as a page; a text-encoder index reads its words by OCR and searches them as text, and
    `image_query.read_by` is then ``"ocr"`` with the words in `image_query.ocr_text`."""
    if k > server.config.max_k:
        raise ApiError(400, f"k={k} is over this server's limit of {server.config.max_k}")
    data = _read_upload(image, server.config.max_upload_mb)
    try:
        read = server.reader.read_image(data)
        hits = server.reader.search(
            image=read,
            k=k,
            filter=parse_user_filter(filter),
            mode=cast(SearchMode, mode),
            neighbours=neighbours,
        )
    except (ValueError, EncoderLoadError, StoreError) as error:
        raise ApiError(400, str(error)) from error
    report = {"filename": image.filename, **read.to_dict()}
    return {"query": None, "image_query": report, **_found(hits, read.text, server)}


def _read_upload(image: UploadFile, max_mb: float) -> bytes:
    """The uploaded bytes, refused (413) past the server's upload limit."""
    limit = int(max_mb * 2**20)
    data = image.file.read(limit + 1)
    if len(data) > limit:
        raise ApiError(413, too_large(len(data), max_mb))
    return data


def _found(hits: list[Hit], words: str | None, server: Server) -> dict[str, Any]:
    """The hits (paths made public, their context's too) and their snippets."""
    public = []
    for hit in hits:
        shown = public_hit(hit.to_dict(), server.root)
        shown["context"] = [public_hit(c, server.root) for c in shown["context"]]
        public.append(shown)
    return {
        "hits": public,
        "snippets": [snippet(h.text, words or "", width=SNIPPET_CHARS) for h in hits],
    }
