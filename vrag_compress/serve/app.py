"""The FastAPI application behind `vrag serve`: REST API, OpenAPI docs and the web page.

The routes live in one router per resource (`vrag_compress.serve.routes`); this module joins
them with the guards every request passes (host names, API key and body size before the body
is read, security headers, CORS when asked) and answers errors as JSON ``{"error": message}``
with the same messages as the CLI, less the absolute path of the index folder. The handles the
routes read live in `serve.server.Server`.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from vrag_compress.answering import ChatModel
from vrag_compress.encoders.base import Encoder
from vrag_compress.messages import EMPTY_QUERY
from vrag_compress.serve.config import ServeConfig
from vrag_compress.serve.connections import BodyTimeout, ConnectionLimits, install
from vrag_compress.serve.deps import ApiError, server_of
from vrag_compress.serve.guards import RequestGuard, allowed_host_names
from vrag_compress.serve.logs import shorten_request_logs
from vrag_compress.serve.routes import ROUTERS
from vrag_compress.serve.server import Server

__all__ = ["ApiError", "ServeConfig", "app_from_environment", "create_app"]

log = logging.getLogger(__name__)

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
CONFIG_ENV = "VRAG_SERVE_CONFIG"
"""How `vrag serve --workers N` hands its config to the worker processes (JSON)."""


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
    app.add_middleware(BodyTimeout, timeout_s=config.body_timeout_s)  # outermost: raw reads
    install(
        ConnectionLimits(
            config.header_timeout_s,
            config.body_timeout_s,
            config.max_connections,
            config.max_client_connections,
        )
    )
    _add_errors(app)
    _add_headers(app)
    for router in ROUTERS:
        app.include_router(router)
    app.router.on_shutdown.append(server.close)
    return app


def app_from_environment() -> FastAPI:
    """The app of one `vrag serve --workers N` worker process (uvicorn's factory), from the
    config the parent process put in `CONFIG_ENV`."""
    values = json.loads(os.environ[CONFIG_ENV])
    values["index_dir"] = Path(values["index_dir"])
    return create_app(ServeConfig(**values))


# ---------------------------------------------------------------------------------- plumbing


def _add_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        message = server_of(request).public(error.message)
        return JSONResponse({"error": message}, status_code=error.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        message = server_of(request).public(str(error.detail))
        return JSONResponse({"error": message}, status_code=error.status_code)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, error: RequestValidationError) -> JSONResponse:
        parts = [_in_cli_words(problem) for problem in error.errors()]
        return JSONResponse({"error": "; ".join(parts) or "bad request"}, status_code=422)


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


def _add_headers(app: FastAPI) -> None:
    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        response = await call_next(request)
        is_docs = request.url.path == "/docs"
        response.headers.setdefault("Content-Security-Policy", DOCS_CSP if is_docs else PAGE_CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Frame-Options", "DENY")
        return response
