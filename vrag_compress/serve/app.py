"""The FastAPI application behind `vrag serve`: REST API, OpenAPI docs and the web page.

Readers (search, pages, explanations) share one read-only handle on the index; they never wait for
an upload being indexed except while a batch of pages is encoded (the model is shared and runs one
batch at a time). Writes (uploads, deletes) go through one writer, see `vrag_compress.serve.jobs`.
Errors are JSON ``{"error": message}`` with the same messages as the CLI.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from fastapi import Depends, FastAPI, File, Form, Query, Request, Security, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from vrag_compress.answering import (
    AnswerPage,
    ChatModel,
    answer_messages,
    load_chat_model,
    page_reference,
)
from vrag_compress.encoders.base import Encoder
from vrag_compress.encoders.errors import EncoderLoadError
from vrag_compress.index import VisualIndex, VisualIndexError
from vrag_compress.messages import EMPTY_QUERY
from vrag_compress.serve.guards import (
    RequestGuard,
    allowed_host_names,
    key_problem,
    public_hit,
    public_path,
    too_large,
)
from vrag_compress.serve.jobs import JobQueue, UploadError
from vrag_compress.serve.logs import shorten_request_logs
from vrag_compress.store import StoreError
from vrag_compress.store.base import SearchMode
from vrag_compress.store.filters import check_user_metadata, parse_user_filter
from vrag_compress.store.user_input import UserInputError, load_json, show
from vrag_compress.store.validate import check_id

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
STATIC_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
SWAGGER_FILES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css"}
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
DOCS_CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)
WRITE_PATHS = frozenset({("POST", "/api/documents")})
"""Body-carrying routes that write; their key is checked before the body is read."""


@dataclass
class ServeConfig:
    """What `vrag serve` was started with (also what `create_app` takes in tests)."""

    index_dir: Path
    api_key: str | None = None
    reads_need_key: bool = False
    llm: str | None = None
    cors_origins: list[str] = field(default_factory=list)
    max_upload_mb: float = 50.0
    max_pages: int = 300
    max_k: int = 100
    ocr: str = "auto"
    device: str = "auto"
    model: str | None = None
    host: str = "127.0.0.1"
    allowed_hosts: list[str] = field(default_factory=list)


class AskRequest(BaseModel):
    """The body of ``POST /api/ask``."""

    question: str = Field(min_length=1, description="The question to answer from the pages.")
    k: int = Field(3, ge=1, description="Pages to retrieve and send to the chat model.")
    filter: dict[str, Any] | None = Field(None, description="Metadata filter (JSON object).")


class ApiError(Exception):
    """An error answered as ``{"error": message}`` with an HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SerialEncoder:
    """One encoder shared by the readers and the writer, used by one thread at a time: attention
    capture during page encoding changes the model's state, so calls must not interleave."""

    def __init__(self, encoder: Encoder) -> None:
        self._encoder = encoder
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._encoder, name)
        if not (name.startswith("encode") and callable(value)):
            return value

        def serial(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return value(*args, **kwargs)

        return serial

    def encode_pages(self, images: list[Any], *, with_stats: bool = False) -> Any:
        return self.__getattr__("encode_pages")(images, with_stats=with_stats)

    def encode_queries(self, queries: list[str]) -> Any:
        return self.__getattr__("encode_queries")(queries)


class Server:
    """The index handles, the job queue and the chat model one app serves."""

    def __init__(
        self,
        config: ServeConfig,
        encoder: Encoder | None = None,
        chat_model: ChatModel | None = None,
    ) -> None:
        self.config = config
        root = Path(config.index_dir)
        self.root = root.resolve()  # as stored paths name it; answers show paths relative to it
        if not VisualIndex.exists(root):
            VisualIndex.create(
                root, model=config.model or "auto", encoder=encoder, device=config.device
            ).close()
        asked = None if config.model in (None, "auto") else config.model
        probe = VisualIndex.open(root, model=asked, encoder=encoder, readonly=True)
        self.encoder: Any = SerialEncoder(probe.encoder)
        probe.close()
        self.reader = VisualIndex.open(root, encoder=self.encoder, readonly=True)
        self.jobs = JobQueue(
            root,
            self.reader,
            lambda: VisualIndex.open(root, encoder=self.encoder),
            ocr=config.ocr,
        )
        self.chat_model = chat_model
        if chat_model is None and config.llm:
            self.chat_model = load_chat_model(config.llm)

    def close(self) -> None:
        self.jobs.close()
        self.reader.close()


def create_app(
    config: ServeConfig, *, encoder: Encoder | None = None, chat_model: ChatModel | None = None
) -> FastAPI:
    """The application for one index folder (created when missing, with ``config.model``)."""
    shorten_request_logs()
    server = Server(config, encoder=encoder, chat_model=chat_model)
    server.jobs.resume_unfinished()
    app = FastAPI(
        title="vrag-compress",
        summary="Search, explain and grow a compressed visual RAG index.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.server = server
    app.add_middleware(
        RequestGuard,
        host_names=allowed_host_names(config.host, config.allowed_hosts),
        api_key=config.api_key,
        reads_need_key=config.reads_need_key,
        write_paths=WRITE_PATHS,
        max_upload_mb=config.max_upload_mb,
    )
    if config.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=config.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    _add_errors(app)
    _add_headers(app, config)
    _add_pages(app)
    _add_api(app, server)
    app.router.on_shutdown.append(server.close)
    return app


# ---------------------------------------------------------------------------------- plumbing


def _add_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse({"error": error.message}, status_code=error.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(error.detail)}, status_code=error.status_code)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, error: RequestValidationError) -> JSONResponse:
        parts = [_in_cli_words(problem) for problem in error.errors()]
        return JSONResponse({"error": "; ".join(parts) or "bad request"}, status_code=422)


def _check_query(field: str, query: str, k: int, max_k: int) -> None:
    """A blank query is malformed (422, as an empty one); k over the server's limit is refused
    (400): the same words and codes for search and ask."""
    if not query.strip():
        raise ApiError(422, f"{field}: {EMPTY_QUERY}")
    if k > max_k:
        raise ApiError(400, f"k={k} is over this server's limit of {max_k}")


def _in_cli_words(problem: Any) -> str:
    """One request problem as the CLI words it: numbers out of range or of the wrong type already
    read the same (the CLI's options are checked by pydantic too); an empty query and a body
    that is not JSON do not."""
    kind = problem.get("type", "")
    if kind == "json_invalid":
        reason = problem.get("ctx", {}).get("error", "")
        return f"the request body is not valid JSON ({reason})" if reason else "not valid JSON"
    where = ".".join(str(p) for p in problem.get("loc", ()) if p not in ("body", "query"))
    if kind == "string_too_short":
        message = EMPTY_QUERY
    elif kind == "missing":
        message = "missing (required)"
    else:
        message = str(problem.get("msg", "bad value"))
    return f"{where}: {message}" if where else message


def _add_headers(app: FastAPI, config: ServeConfig) -> None:
    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        response = await call_next(request)
        is_docs = request.url.path == "/docs"
        response.headers.setdefault("Content-Security-Policy", DOCS_CSP if is_docs else PAGE_CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Frame-Options", "DENY")
        return response


def _add_pages(app: FastAPI) -> None:
    """The web page, its two static files and the offline Swagger UI; nothing else is served
    from disk (no directory listing, no paths taken from the request)."""

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> FileResponse:
        if name not in STATIC_FILES:
            raise ApiError(404, f"no static file {name!r}")
        return FileResponse(STATIC / name, media_type=STATIC_FILES[name])

    @app.get("/docs", include_in_schema=False)
    def docs() -> Response:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="vrag-compress API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="data:,",
        )

    @app.get("/docs-assets/{name}", include_in_schema=False)
    def docs_assets(name: str) -> FileResponse:
        folder = _swagger_folder()
        if name not in SWAGGER_FILES or folder is None:
            raise ApiError(
                404, "Swagger UI assets are not installed: pip install swagger-ui-bundle-v2"
            )
        return FileResponse(folder / name, media_type=SWAGGER_FILES[name])


def _swagger_folder() -> Path | None:
    try:
        import swagger_ui_bundle
    except ImportError:
        return None
    return Path(swagger_ui_bundle.swagger_ui_path)


BEARER = HTTPBearer(
    auto_error=False, description="The server's API key (--api-key or VRAG_API_KEY)."
)
"""Declares the key in the OpenAPI schema, so /docs offers "Authorize"."""


def _check_key(
    config: ServeConfig, credentials: HTTPAuthorizationCredentials | None, write: bool
) -> None:
    token = credentials.credentials.strip() if credentials else None
    problem = key_problem(config.api_key, config.reads_need_key, token, write=write)
    if problem is not None:
        raise ApiError(*problem)


# ---------------------------------------------------------------------------------- the API


def _add_api(app: FastAPI, server: Server) -> None:
    config = server.config

    def read_key(credentials: HTTPAuthorizationCredentials | None = Security(BEARER)) -> None:
        _check_key(config, credentials, write=False)

    def write_key(credentials: HTTPAuthorizationCredentials | None = Security(BEARER)) -> None:
        _check_key(config, credentials, write=True)

    reads = [Depends(read_key)]
    writes = [Depends(write_key)]

    def page_hit(page_id: str) -> Any:
        try:
            hits = server.reader.get([check_id(page_id, "page id")])
        except StoreError as error:  # NUL, an over-long id
            raise ApiError(400, str(error)) from error
        if not hits:
            raise ApiError(404, f"no page {show(page_id)} in {config.index_dir}")
        return hits[0]

    @app.get("/api/search", dependencies=reads, tags=["search"])
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
    ) -> dict[str, Any]:
        """Top-k pages; each hit as `vrag search --json` prints it (with regions, and with
        `components` in the text and hybrid modes)."""
        _check_query("q", q, k, config.max_k)
        try:
            hits = server.reader.search(
                q, k=k, filter=parse_user_filter(filter), mode=cast(SearchMode, mode), alpha=alpha
            )
        except (ValueError, EncoderLoadError, StoreError) as error:
            raise ApiError(400, str(error)) from error
        return {"query": q, "hits": [public_hit(h.to_dict(), server.root) for h in hits]}

    @app.get("/api/pages/{page_id:path}/image", dependencies=reads, tags=["pages"])
    def page_image(page_id: str, max_side: int | None = Query(None, ge=16, le=4096)) -> Response:
        """The page image (stored WebP, or a fresh render); ``max_side`` for a thumbnail."""
        hit = page_hit(page_id)
        path = hit.image_path
        root = Path(config.index_dir).resolve()
        if path is not None and max_side is None:
            if not path.resolve().is_relative_to(root):
                raise ApiError(404, f"page {show(page_id)} has no image inside the index")
            if path.is_file():
                return FileResponse(path, media_type=_mime(path))
        try:
            image = hit.image
        except (FileNotFoundError, VisualIndexError) as error:
            raise ApiError(404, str(error)) from error
        if max_side:
            image.thumbnail((max_side, max_side))
        buffer = io.BytesIO()
        image.save(buffer, "WEBP", quality=80)
        return Response(buffer.getvalue(), media_type="image/webp")

    @app.get("/api/pages/{page_id:path}/explain", dependencies=reads, tags=["pages"])
    def page_explain(
        page_id: str,
        q: str = Query(..., min_length=1),
        format: str = Query("json", pattern="^(json|png)$"),
        overlay: bool = Query(False, description="png: draw the kept/merged patches too."),
    ) -> Any:
        """Why the page matches ``q``: per query token the matched stored vector, its share of
        the score and the page patches behind it, the heatmap grid and the regions (JSON), or
        the heatmap drawn over the page (``format=png``)."""
        hit = page_hit(page_id)
        try:
            explanation = server.reader.explain(q, hit.doc_id, hit.page_no)
        except KeyError as error:
            raise ApiError(404, str(error).strip("'\"")) from error
        except (ValueError, EncoderLoadError) as error:
            raise ApiError(400, str(error)) from error
        layout = server.reader.page_layout(hit.doc_id, hit.page_no)
        if format == "png":
            if explanation.heat is None:
                raise ApiError(
                    404, f"page {show(page_id)} has no patch layout to draw a heatmap on"
                )
            from vrag_compress.visualize import draw_heatmap

            drawn = draw_heatmap(
                hit.image,
                explanation.heat,
                layout=layout if overlay else None,
                regions=explanation.regions,
            )
            buffer = io.BytesIO()
            drawn.save(buffer, "PNG")
            return Response(buffer.getvalue(), media_type="image/png")
        body = explanation.to_dict()
        body["overlay"] = _overlay(layout)
        return body

    @app.get("/api/documents", dependencies=reads, tags=["documents"])
    def documents() -> dict[str, Any]:
        """Every document: id, file name, pages, whether indexing finished, metadata."""
        return {
            "documents": [
                {
                    "doc_id": d.doc_id,
                    "filename": Path(d.source).name if d.source else None,
                    "source": public_path(d.source, server.root),
                    "n_pages": d.n_pages,
                    "complete": d.complete,
                    "metadata": d.metadata,
                }
                for d in server.reader.documents()
            ]
        }

    @app.delete("/api/documents/{doc_id}", dependencies=writes, tags=["documents"])
    def delete_document(doc_id: str) -> dict[str, Any]:
        """Delete one document's pages, images and upload (as `vrag delete`)."""
        try:
            removed = server.jobs.delete_document(check_id(doc_id, "doc id"))
        except UploadError as error:
            raise ApiError(error.status, str(error)) from error
        except StoreError as error:  # NUL, an over-long id
            raise ApiError(400, str(error)) from error
        if removed == 0:
            raise ApiError(404, f"no document {show(doc_id)} in {config.index_dir}")
        return {"doc_id": doc_id, "pages_deleted": removed}

    @app.post("/api/documents", dependencies=writes, status_code=202, tags=["documents"])
    def upload(
        file: UploadFile = File(..., description="A PDF or page image."),
        metadata: str | None = Form(None, description="JSON object stored on every page."),
    ) -> dict[str, Any]:
        """Index an uploaded file in the background; poll ``GET /api/jobs/{job}``."""
        extra = _metadata(metadata)
        limit = int(config.max_upload_mb * 2**20)

        def save(path: Path) -> None:
            written = 0
            with open(path, "wb") as out:
                while chunk := file.file.read(1 << 20):
                    written += len(chunk)
                    if written > limit:
                        raise UploadError(too_large(written, config.max_upload_mb), 413)
                    out.write(chunk)

        try:
            job = server.jobs.submit(file.filename or "upload", save, extra, config.max_pages)
        except UploadError as error:
            raise ApiError(error.status, str(error)) from error
        return {"job": job.id, "doc_id": job.doc_id, "filename": job.filename}

    @app.get("/api/jobs/{job_id}", dependencies=reads, tags=["documents"])
    def job_status(job_id: str) -> dict[str, Any]:
        """An upload's state (queued, running, done, failed), pages done and failures."""
        job = server.jobs.status(job_id)
        if job is None:
            raise ApiError(404, f"no job {show(job_id)}")
        return job.to_dict()

    @app.get("/api/info", dependencies=reads, tags=["index"])
    def info() -> dict[str, Any]:
        """Model, compressor, counts, size (as `vrag info --json`) and the server's limits."""
        return {
            **server.reader.info(),
            "path": Path(config.index_dir).name,
            "server": {
                "llm": server.chat_model is not None,
                "writes_enabled": config.api_key is not None,
                "reads_need_key": config.reads_need_key,
                "max_upload_mb": config.max_upload_mb,
                "max_pages": config.max_pages,
                "max_k": config.max_k,
            },
        }

    @app.get("/api/verify", dependencies=reads, tags=["index"])
    def verify() -> dict[str, Any]:
        """Checksums and catalog/segment agreement (as `vrag verify --json`)."""
        report = server.reader.verify()
        return {"ok": report.ok, "pages": report.pages, "problems": list(report.problems)}

    @app.post("/api/ask", dependencies=reads, tags=["search"])
    def ask(body: AskRequest) -> StreamingResponse:
        """Answer a question from the retrieved page images with the chat model given by
        ``--llm``. Streams NDJSON: ``{"type": "citations"}`` (pages and regions), then
        ``{"type": "token", "text"}`` pieces, then ``{"type": "done", "answer"}``."""
        if server.chat_model is None:
            raise ApiError(400, _no_llm_message())
        question, k, where = body.question, body.k, body.filter
        _check_query("question", question, k, config.max_k)
        try:
            hits = server.reader.search(question, k=k, filter=parse_user_filter(where))
        except (ValueError, EncoderLoadError, StoreError) as error:
            raise ApiError(400, str(error)) from error
        if not hits:
            raise ApiError(404, f"{config.index_dir}: the index has no pages to answer from")
        return StreamingResponse(
            _answer_stream(server.chat_model, question, hits, server.root),
            media_type="application/x-ndjson",
        )


def _answer_stream(
    chat_model: ChatModel, question: str, hits: list[Any], root: Path
) -> Iterator[bytes]:
    pages = [AnswerPage.from_hit(hit, image_base64=True) for hit in hits]
    cited = [
        public_hit(
            {
                **page_reference(n, page),
                "page_no": hit.page_no,
                "filename": hit.metadata.get("filename"),
            },
            root,
        )
        for n, (page, hit) in enumerate(zip(pages, hits, strict=True), start=1)
    ]
    yield _line({"type": "citations", "citations": cited})
    parts: list[str] = []
    try:
        for text in chat_model.stream(answer_messages(question, pages)):
            if text:
                parts.append(text)
                yield _line({"type": "token", "text": text})
    except Exception as error:  # provider errors: missing key, network, refused images
        yield _line(
            {"type": "error", "error": f"the chat model failed: {type(error).__name__}: {error}"}
        )
        return
    yield _line({"type": "done", "answer": "".join(parts)})


def _line(payload: dict[str, Any]) -> bytes:
    return (json.dumps(payload, default=str) + "\n").encode()


def _no_llm_message() -> str:
    return "no LLM configured: start the server with --llm PROVIDER:MODEL (or VRAG_LLM)"


def _metadata(text: str | None) -> dict[str, Any]:
    """An upload's ``metadata`` form field, refused (422) before the file is read."""
    if not text:
        return {}
    try:
        return check_user_metadata(load_json(text, "metadata"))
    except UserInputError as error:
        raise ApiError(422, str(error)) from error


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
