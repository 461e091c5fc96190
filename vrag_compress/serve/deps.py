"""What every router of `vrag serve` shares: the error type, the key checks and the handle on
the running `Server` and its config (FastAPI dependencies, so routers hold no globals)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from vrag_compress.messages import EMPTY_QUERY
from vrag_compress.serve.guards import key_problem

if TYPE_CHECKING:
    from vrag_compress.serve.server import Server


class ApiError(Exception):
    """An error answered as ``{"error": message}`` with an HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def server_of(request: Request) -> Server:
    """The `Server` of the app that received ``request``."""
    return request.app.state.server


def check_query(field: str, query: str, k: int, max_k: int) -> None:
    """A blank query is malformed (422, as an empty one); k over the server's limit is refused
    (400): the same words and codes for search and ask."""
    if not query.strip():
        raise ApiError(422, f"{field}: {EMPTY_QUERY}")
    if k > max_k:
        raise ApiError(400, f"k={k} is over this server's limit of {max_k}")


BEARER = HTTPBearer(
    auto_error=False, description="The server's API key (--api-key or VRAG_API_KEY)."
)
"""Declares the key in the OpenAPI schema, so /docs offers "Authorize"."""


def _check_key(
    request: Request, credentials: HTTPAuthorizationCredentials | None, *, write: bool
) -> None:
    config = server_of(request).config
    token = credentials.credentials.strip() if credentials else None
    problem = key_problem(config.api_key, config.reads_need_key, token, write=write)
    if problem is not None:
        raise ApiError(*problem)


def read_key(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Security(BEARER)
) -> None:
    """Reads need the key only when the server says so (a non-loopback bind)."""
    _check_key(request, credentials, write=False)


def write_key(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Security(BEARER)
) -> None:
    """Writes always need the key (403 on a server started without one)."""
    _check_key(request, credentials, write=True)


READS: list[Any] = [Depends(read_key)]
WRITES: list[Any] = [Depends(write_key)]
