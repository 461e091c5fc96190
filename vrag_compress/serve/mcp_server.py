"""`vrag mcp`: one index as a Model Context Protocol server, for agents (the ``[mcp]`` extra).

Read-only tools (`search`, `get_page`, `list_documents`, `info`) and the page images as
resources (``vrag://pages/{document}/{page}``), over stdio (what an MCP client starts itself) or
streamable HTTP. Hits are the REST API's (`public_hit`, the same snippet), so no absolute server
path reaches the agent; over HTTP the `vrag serve` rules hold: a request for another host name
is refused (DNS rebinding), a non-loopback bind needs ``--api-key``, and with a key every
request must send it. A bad argument comes back as a tool error in the CLI's words, never as a
crash of the server.

The SDK (``mcp``) is imported here only; `vrag mcp` imports this module when it runs.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote, urlsplit

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.utilities.types import Image as McpImage
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ImageContent, TextContent
from PIL import Image
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from vrag_compress.encoders.errors import EncoderLoadError
from vrag_compress.index import Hit, VisualIndex, VisualIndexError
from vrag_compress.ingest import IngestError
from vrag_compress.ingest.page_assets import encode_image
from vrag_compress.messages import EMPTY_QUERY
from vrag_compress.serve import HostError, is_loopback
from vrag_compress.serve.guards import (
    allowed_host_names,
    bearer_token,
    hide_root,
    host_allowed,
    key_problem,
    public_hit,
    public_path,
)
from vrag_compress.serve.routes.search import SNIPPET_CHARS
from vrag_compress.snippets import snippet
from vrag_compress.store import StoreError
from vrag_compress.store.base import SearchMode
from vrag_compress.store.filters import parse_user_filter
from vrag_compress.store.validate import SEARCH_MODES
from vrag_compress.version import __version__

log = logging.getLogger(__name__)

__all__ = [
    "PAGE_URI",
    "IndexTools",
    "build_server",
    "guarded_http_app",
    "page_uri",
    "run_http",
    "run_stdio",
]

PAGE_URI = "vrag://pages/{document}/{page}"
"""The resource template of a page image; `page_uri` fills it in."""
MAX_K = 100
"""The most hits one search returns (as `vrag serve`'s default limit)."""
HTTP_PATH = "/mcp"
INSTRUCTIONS = (
    "Search a visual index of document pages: `search` finds pages (document, page, score, a "
    "snippet of the text and the regions that matched); `get_page` shows one page's image, "
    "text and, given a query, where it matched; `list_documents` and `info` describe the index."
)
EXPECTED = (
    ValueError,
    LookupError,
    EncoderLoadError,
    StoreError,
    VisualIndexError,
    IngestError,
    OSError,
)
"""Errors of bad input or a page that cannot be shown: their message is the answer."""

T = TypeVar("T")


def image_bytes(data: str) -> bytes:
    """A query image sent as base64 text (a ``data:`` URL's prefix is allowed)."""
    text = data.partition(",")[2] if data.startswith("data:") else data
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ToolError(f"image: not base64-encoded image bytes ({error})") from error


def page_uri(doc_id: str, page_no: int) -> str:
    """The resource URI of one stored page's image."""
    return PAGE_URI.format(document=quote(doc_id, safe=""), page=page_no)


@dataclass
class IndexTools:
    """What the tools do, on one open (read-only) index: JSON-ready answers, and errors as the
    CLI words them (raised as `ToolError`, which the SDK sends back as a tool error)."""

    index: VisualIndex

    @property
    def root(self) -> Path:
        return Path(self.index.path).resolve()

    def guarded(self, call: Callable[[], T]) -> T:
        """``call()``, its errors as a `ToolError` without the index folder's absolute path; an
        unexpected one is logged with its traceback and named by its type, as `vrag` does."""
        try:
            return call()
        except ToolError:
            raise
        except EXPECTED as error:
            message = str(error).strip("'\"") if isinstance(error, KeyError) else str(error)
            raise ToolError(hide_root(message, self.root)) from error
        except Exception as error:
            log.exception("unexpected error in a tool")
            text = f"{type(error).__name__}: {error}"
            raise ToolError(hide_root(text, self.root)) from error

    def search(
        self,
        query: str | None = None,
        k: int = 5,
        mode: str = "auto",
        filter: dict[str, Any] | None = None,
        image: str | None = None,
    ) -> dict[str, Any]:
        """Top-k pages for words or a base64 image, each a REST hit with its snippet and image
        URI (no full text); an image search reports how the image was read."""
        if image is not None and query is not None:
            raise ToolError("give either a query or an image to search with, not both")
        if image is None and (query is None or not query.strip()):
            raise ToolError(f"query: {EMPTY_QUERY}")
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}, got {k}")
        if mode not in SEARCH_MODES:
            raise ToolError(f"mode must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
        where = self.guarded(lambda: parse_user_filter(filter))
        how = cast(SearchMode, mode)
        if image is None:
            found = self.guarded(lambda: self.index.search(query, k=k, filter=where, mode=how))
            return {"query": query, "hits": [self.hit_json(h, query or "") for h in found]}
        read = self.guarded(lambda: self.index.read_image(image_bytes(image)))
        found = self.guarded(lambda: self.index.search(image=read, k=k, filter=where, mode=how))
        return {
            "query": None,
            "image_query": read.to_dict(),
            "hits": [self.hit_json(h, read.text or "") for h in found],
        }

    def hit_json(self, hit: Hit, words: str) -> dict[str, Any]:
        out = public_hit(hit.to_dict(), self.root)
        out.pop("text", None)  # `get_page` gives the whole text; a hit carries its snippet
        out["context"] = [public_hit(c, self.root) for c in out.get("context") or []]
        out["snippet"] = snippet(hit.text, words, width=SNIPPET_CHARS)
        out["uri"] = page_uri(hit.doc_id, hit.page_no)
        return out

    def document_id(self, document: str) -> str:
        """The doc id for a doc id or an indexed file's name (as `vrag show` takes them)."""
        docs = self.index.documents()
        if any(d.doc_id == document for d in docs):
            return document
        named = [d for d in docs if d.source and Path(d.source).name == document]
        if len(named) == 1:
            return named[0].doc_id
        if not named:
            raise ToolError(f"no document {document!r} in this index (`list_documents` lists them)")
        listed = ", ".join(d.doc_id for d in named)
        raise ToolError(f"{document!r} matches {len(named)} documents: {listed}; give the doc id")

    def page(self, document: str, page: int) -> Hit:
        """One stored page, or a tool error naming the pages the document has."""
        doc_id = self.guarded(lambda: self.document_id(document))
        hits = self.guarded(lambda: self.index.get([f"{doc_id}:{page}"]))
        found = [h for h in hits if h.doc_id == doc_id and h.page_no == page]
        if not found:
            pages = next((d.n_pages for d in self.index.documents() if d.doc_id == doc_id), 0)
            raise ToolError(f"no page {page} of document {doc_id!r}; it has pages 1..{pages}")
        return found[0]

    def page_image(self, hit: Hit, max_side: int | None = None) -> bytes:
        """The page as WebP bytes (stored, or rendered from its source), at most ``max_side``."""
        if max_side is not None and not 16 <= max_side <= 4096:
            raise ToolError(f"max_side must be between 16 and 4096, got {max_side}")
        image: Image.Image = self.guarded(lambda: hit.image)
        if max_side:
            image = image.copy()
            image.thumbnail((max_side, max_side))
        return encode_image(image.convert("RGB"))

    def get_page(
        self, document: str, page: int, query: str | None = None, max_side: int | None = None
    ) -> tuple[bytes, dict[str, Any]]:
        """The page image and its details: text, source, metadata and, with a query, the
        regions where it matched and its score."""
        hit = self.page(document, page)
        details: dict[str, Any] = {
            "doc_id": hit.doc_id,
            "page_no": hit.page_no,
            "page_id": hit.page_id,
            "source": public_path(hit.source, self.root),
            "metadata": public_hit({"metadata": hit.metadata}, self.root)["metadata"],
            "uri": page_uri(hit.doc_id, hit.page_no),
            "text": hit.text,
            "regions": [],
        }
        if query is not None:
            if not query.strip():
                raise ToolError(f"query: {EMPTY_QUERY}")
            why = self.guarded(lambda: self.index.explain(query, hit.doc_id, hit.page_no))
            details["score"] = why.score
            details["regions"] = [r.to_dict() for r in why.regions]
        return self.page_image(hit, max_side), details

    def list_documents(self) -> dict[str, Any]:
        """Every document as `GET /api/documents` lists it."""
        return {
            "documents": [
                {
                    "doc_id": d.doc_id,
                    "filename": Path(d.source).name if d.source else None,
                    "source": public_path(d.source, self.root),
                    "n_pages": d.n_pages,
                    "complete": d.complete,
                    "metadata": d.metadata,
                }
                for d in self.guarded(self.index.documents)
            ]
        }

    def info(self) -> dict[str, Any]:
        """`vrag info --json`, with the folder by its name only."""
        details = self.guarded(self.index.info)
        return {**details, "path": self.root.name}


def build_server(index: VisualIndex) -> MCPServer:
    """An MCP server with the read-only tools and the page-image resource over ``index``."""
    tools = IndexTools(index)
    server: MCPServer = MCPServer(
        "vrag", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
    )

    @server.tool(name="search")
    def search_tool(
        query: str | None = None,
        k: int = 5,
        mode: str = "auto",
        filter: dict[str, Any] | None = None,
        image: str | None = None,
    ) -> dict[str, Any]:
        """Find the k pages that best answer a question or match keywords, or that look like an
        image (image: the PNG, JPEG or WebP file as base64, instead of a query).

        mode: auto, exact or two_stage (late interaction over the page images); text (BM25 over
        the page text); hybrid (both, fused). filter: metadata to match, e.g. {"team": "law"} or
        {"year": {"$gte": 2020}}. Each hit has doc_id, page_no, score, a snippet of the page
        text, the regions of the page that matched (fractions of its width and height) and the
        uri of its image (read it as a resource, or call get_page). An image is searched as a
        page, or on an index of page text by the words OCR reads in it (image_query says which)."""
        return tools.search(query, k=k, mode=mode, filter=filter, image=image)

    @server.tool(name="get_page")
    def get_page_tool(
        document: str, page: int, query: str | None = None, max_side: int | None = None
    ) -> list[ImageContent | TextContent]:
        """One page: its image, then its text, source and metadata as JSON.

        document: a doc_id (from search or list_documents) or the indexed file's name. page:
        the page number, from 1. query: also return where this query matched the page
        (regions) and its score. max_side: shrink the image to at most this many pixels."""
        picture, details = tools.get_page(document, page, query=query, max_side=max_side)
        text = json.dumps(details, ensure_ascii=False, default=str)
        return [McpImage(data=picture, format="webp").to_image_content(), TextContent(text=text)]

    @server.tool(name="list_documents")
    def list_documents_tool() -> dict[str, Any]:
        """Every document in the index: doc_id, file name, page count and metadata."""
        return tools.list_documents()

    @server.tool(name="info")
    def info_tool() -> dict[str, Any]:
        """The index: model, compressor, document and page counts, size on disk."""
        return tools.info()

    @server.resource(PAGE_URI, name="page", mime_type="image/webp")
    def page_resource(document: str, page: str) -> bytes:
        """The image of one page of a document (a doc_id), as WebP."""
        try:
            number = int(page)
            return tools.page_image(tools.page(document, number))
        except ValueError as error:
            raise ResourceError(f"page must be a page number, got {page!r}") from error
        except ToolError as error:
            raise ResourceError(str(error)) from error

    return server


# ------------------------------------------------------------------------------ over HTTP


class McpGuard:
    """The `vrag serve` request checks for the MCP endpoint: a ``Host`` (and a browser's
    ``Origin``) that name this server, and the key on every request when there is one."""

    def __init__(self, app: ASGIApp, *, host_names: frozenset[str], api_key: str | None) -> None:
        self.app = app
        self.host_names = host_names
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = self.refusal(Headers(scope=scope))
            if problem is not None:
                await _answer(send, *problem)
                return
        await self.app(scope, receive, send)

    def refusal(self, headers: Headers) -> tuple[int, str] | None:
        host = headers.get("host")
        if not host_allowed(host, self.host_names):
            shown = (host or "")[:100]
            return 400, (
                f"Host {shown!r} is not this server's; start it with --allowed-host NAME to "
                "accept that name (a proxy's, say)"
            )
        origin = headers.get("origin")
        if origin and (urlsplit(origin).hostname or "") not in self.host_names:
            return 403, f"Origin {origin[:100]!r} may not call this server"
        token = bearer_token(headers.get("authorization"))
        return key_problem(self.api_key, self.api_key is not None, token, write=False)


async def _answer(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def guarded_http_app(
    server: MCPServer,
    *,
    host: str,
    api_key: str | None,
    allowed_hosts: list[str] | None = None,
) -> ASGIApp:
    """The streamable HTTP app at ``/mcp`` behind `McpGuard`. Raises `HostError` for a
    non-loopback ``host`` without a key, as `vrag serve` does."""
    if not is_loopback(host) and not api_key:
        raise HostError(
            f"--host {host} accepts connections from other machines: set --api-key "
            "(or VRAG_API_KEY); every request must then send 'Authorization: Bearer KEY'"
        )
    app = server.streamable_http_app(
        streamable_http_path=HTTP_PATH,
        host=host,
        # the Host and Origin checks are McpGuard's, the same as `vrag serve`'s
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    names = allowed_host_names(host, allowed_hosts or ())
    return McpGuard(app, host_names=names, api_key=api_key or None)


def run_stdio(server: MCPServer) -> None:
    """Answer one client over stdin/stdout until it closes them."""
    server.run("stdio")


def run_http(app: ASGIApp, *, host: str, port: int) -> None:
    """Serve `guarded_http_app` until interrupted."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="info", server_header=False)
