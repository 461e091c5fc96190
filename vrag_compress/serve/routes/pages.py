"""``GET /api/pages/{page_id}/image`` and ``/explain``: one stored page, and why it matches."""

from __future__ import annotations

import functools
import io
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import FileResponse, Response
from PIL import Image

from vrag_compress.encoders.errors import EncoderLoadError
from vrag_compress.index import VisualIndexError
from vrag_compress.ingest import IngestError
from vrag_compress.ingest.page_assets import encode_image
from vrag_compress.serve.deps import READS, ApiError, server_of
from vrag_compress.serve.guards import public_path
from vrag_compress.serve.server import Server
from vrag_compress.snippets import matched_words
from vrag_compress.store import StoreError
from vrag_compress.store.user_input import show
from vrag_compress.store.validate import check_id

router = APIRouter(dependencies=READS, tags=["pages"])


def page_hit(server: Server, page_id: str) -> Any:
    """The stored page ``page_id``: 400 for an id the store refuses, 404 for an unknown one."""
    try:
        hits = server.reader.get([check_id(page_id, "page id")])
    except StoreError as error:  # NUL, an over-long id
        raise ApiError(400, str(error)) from error
    if not hits:
        raise ApiError(404, f"no page {show(page_id)} in {server.root.name}")
    return hits[0]


def page_picture(server: Server, hit: Any, page_id: str) -> Image.Image:
    """The page's image (stored, or rendered from its source): 404 with the reason when there
    is none to show, e.g. a ``--no-images`` index whose source file moved or changed."""
    try:
        return hit.image
    except IngestError as error:
        source = public_path(hit.source, server.root)
        raise ApiError(
            404, f"page {show(page_id)} has no stored image and its source {source} {error.reason}"
        ) from error
    except (OSError, ValueError, VisualIndexError) as error:  # a stored image missing, unsafe
        raise ApiError(404, f"page {show(page_id)} has no image to show: {error}") from error


@router.get("/api/pages/{page_id:path}/image")
def page_image(
    page_id: str,
    max_side: int | None = Query(None, ge=16, le=4096),
    server: Server = Depends(server_of),
) -> Response:
    """The page image (stored WebP, or a fresh render); ``max_side`` for a thumbnail."""
    hit = page_hit(server, page_id)
    path = hit.image_path
    root = Path(server.config.index_dir).resolve()
    if path is not None and max_side is None:
        if not path.resolve().is_relative_to(root):
            raise ApiError(404, f"page {show(page_id)} has no image inside the index")
        if path.is_file():
            return FileResponse(path, media_type=_mime(path))
    if path is not None and max_side:
        try:
            stat = path.stat()
            key = (str(path), stat.st_mtime_ns, stat.st_size, stat.st_ino)
            return Response(_stored_thumbnail(*key, max_side), media_type="image/webp")
        except (OSError, ValueError):  # missing or unreadable: answered below, with the reason
            pass
    return Response(_webp(page_picture(server, hit, page_id), max_side), media_type="image/webp")


def _webp(image: Image.Image, max_side: int | None) -> bytes:
    """The image as WebP, downsized to fit ``max_side`` when given."""
    if max_side:
        image.thumbnail((max_side, max_side))
    return encode_image(image)


@functools.lru_cache(maxsize=256)
def _stored_thumbnail(path: str, mtime_ns: int, size: int, inode: int, max_side: int) -> bytes:
    """A stored page image's thumbnail, kept per file version: every result card asks for one,
    and decoding, resizing and re-encoding the full page each time was the cost of a search
    page. The file's mtime, size and inode are in the key, so a replaced image is redone."""
    with Image.open(path) as image:
        return _webp(image.convert("RGB"), max_side)


@router.get("/api/pages/{page_id:path}/explain")
def page_explain(
    page_id: str,
    q: str = Query(..., min_length=1),
    format: str = Query("json", pattern="^(json|png)$"),
    overlay: bool = Query(False, description="png: draw the kept/merged patches too."),
    server: Server = Depends(server_of),
) -> Any:
    """Why the page matches ``q``: per query token the matched stored vector, its share of
    the score and the page patches behind it, the heatmap grid and the regions (JSON), or
    the heatmap drawn over the page (``format=png``)."""
    hit = page_hit(server, page_id)
    try:
        explanation = server.reader.explain(q, hit.doc_id, hit.page_no)
    except KeyError as error:
        raise ApiError(404, str(error).strip("'\"")) from error
    except (ValueError, EncoderLoadError) as error:
        raise ApiError(400, str(error)) from error
    layout = server.reader.page_layout(hit.doc_id, hit.page_no)
    if format == "png":
        if explanation.heat is None:
            raise ApiError(404, f"page {show(page_id)} has no patch layout to draw a heatmap on")
        from vrag_compress.visualize import draw_heatmap

        drawn = draw_heatmap(
            page_picture(server, hit, page_id),
            explanation.heat,
            layout=layout if overlay else None,
            regions=explanation.regions,
        )
        buffer = io.BytesIO()
        drawn.save(buffer, "PNG")
        return Response(buffer.getvalue(), media_type="image/png")
    body = explanation.to_dict()
    body["overlay"] = _overlay(layout)
    # a text encoder's page has no patches: the viewer highlights the words that matched instead
    body["reads"] = "text" if server.reader.reads_page_text else "image"
    body["matched_words"] = matched_words(hit.text, q)
    return body


def _overlay(layout: dict[str, Any] | None) -> dict[str, Any] | None:
    """The kept positions or merge assignment of a page, for drawing the compression overlay."""
    if not layout or "grid" not in layout:
        return None
    out: dict[str, Any] = {"grid": [int(v) for v in layout["grid"]]}
    for key in ("kept", "assignment"):
        if key in layout:
            out[key] = [int(v) for v in layout[key]]
    return out


def _mime(path: Path) -> str:
    return {
        ".webp": "image/webp",
        ".png": "image/png",
        ".jpg": "image/jpeg",
        ".jpeg": "image/jpeg",
    }.get(path.suffix.lower(), "application/octet-stream")
