"""What every request passes before the API sees it, and what a response may say about the server.

`RequestGuard` is an ASGI middleware that refuses, before a single body byte is read:

- a ``Host`` header that is not this server's (DNS rebinding: a page on ``attacker.example``
  whose name resolves to 127.0.0.1 would otherwise read the API as a same-origin client);
- a body-carrying API request without the key it needs (no unauthenticated upload is spooled);
- a declared ``Content-Length`` over the limit;

and cuts any body off at the limit while it streams (chunked uploads declare no length), so at
most the limit plus a little framing is ever read, spooled or written to disk.

`public_path`, `public_hit` and `hide_root` keep absolute server paths out of API answers.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BODY_SLACK = 65536
"""Multipart framing and the small form fields sent along with an upload's file."""

WRITE_KEY_MISSING = (
    "uploads and deletes need an API key: start the server with --api-key KEY "
    "(or VRAG_API_KEY) and send 'Authorization: Bearer KEY'"
)
WRONG_KEY = "missing or wrong API key: send 'Authorization: Bearer KEY'"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def too_large(size: int, limit_mb: float) -> str:
    return (
        f"upload of {size / 2**20:.2f} MB is over this server's limit of {limit_mb:g} MB "
        "(--max-upload-mb)"
    )


def bearer_token(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer KEY`` header (as FastAPI's `HTTPBearer` reads it)."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def key_problem(
    api_key: str | None, reads_need_key: bool, token: str | None, *, write: bool
) -> tuple[int, str] | None:
    """(status, message) when a request with ``token`` may not go on; None when it may."""
    if api_key is None:
        return (403, WRITE_KEY_MISSING) if write else None
    if not (write or reads_need_key):
        return None
    if not token or not hmac.compare_digest(token.encode(), api_key.encode()):
        return 401, WRONG_KEY
    return None


def allowed_host_names(bind_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a request may name: the bound one, ``localhost`` and ``--allowed-host``."""
    names = {bind_host, *extra, *LOOPBACK_NAMES}
    return frozenset(_bare_host(name) for name in names if name)


def host_allowed(header: str | None, names: frozenset[str]) -> bool:
    """Whether a ``Host`` header names this server. IP literals always do: a browser sends one
    only to the address it connected to, and DNS rebinding needs a name that the attacker owns."""
    if not header:
        return False
    host = _bare_host(header)
    if host in names:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _bare_host(value: str) -> str:
    """``Host`` header or name without port or IPv6 brackets, lower case, no trailing dot."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


class BodyTooLarge(Exception):
    """Raised from `receive` once a request body passes the limit."""


class RequestGuard:
    """Host, key and size checks before the body is read, and a hard cap while it streams."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        host_names: frozenset[str],
        api_key: str | None,
        reads_need_key: bool,
        write_paths: frozenset[tuple[str, str]],
        max_upload_mb: float,
    ) -> None:
        self.app = app
        self.host_names = host_names
        self.api_key = api_key
        self.reads_need_key = reads_need_key
        self.write_paths = write_paths
        self.max_upload_mb = max_upload_mb
        self.limit = int(max_upload_mb * 2**20) + BODY_SLACK

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = self._refusal(scope)
        if problem is not None:
            await _answer(send, *problem)
            return
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        await self._capped(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = Headers(scope=scope)
        if not host_allowed(headers.get("host"), self.host_names):
            host = (headers.get("host") or "")[:100]
            return 400, (
                f"Host {host!r} is not this server's; start it with --allowed-host NAME to "
                "accept that name (a proxy's, say)"
            )
        method, path = scope["method"], scope["path"]
        if method in ("POST", "PUT", "PATCH") and path.startswith("/api/"):
            write = (method, path.rstrip("/")) in self.write_paths
            token = bearer_token(headers.get("authorization"))
            problem = key_problem(self.api_key, self.reads_need_key, token, write=write)
            if problem is not None:
                return problem
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.limit:
            return 413, too_large(int(length), self.max_upload_mb)
        return None

    async def _capped(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with a `receive` that stops at the limit; answer 413 in place of whatever
        the app made of the cut-off body (FastAPI turns a failed body read into a 400)."""
        received = 0
        over = False
        started = False

        async def capped_receive() -> Message:
            nonlocal received, over
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                over = True
                raise BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if over and not started:
                return  # the app's answer to a body it never fully got
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, capped_receive, guarded_send)
        except BodyTooLarge:
            if started:
                raise
        if over and not started:
            await _answer(send, 413, too_large(received, self.max_upload_mb))


async def _answer(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# ------------------------------------------------------------------------- what answers say


def public_path(path: str | None, root: Path) -> str | None:
    """A stored path as API answers show it: relative to the index folder when inside it
    (``uploads/<job>/name.pdf``, ``images/...``), else the file name alone."""
    if not path:
        return path
    # a stored path is relative when the index was opened by a relative path (`vrag serve
    # my.vrag`): compare it as typed, from the working folder, and with links resolved
    for candidate in (PurePath(path), Path(path).absolute(), Path(path).resolve()):
        try:
            return candidate.relative_to(root).as_posix()
        except ValueError:
            continue
    return PurePath(path).name


def hide_root(text: str, root: Path) -> str:
    """``text`` (an error message) without the absolute path of the index folder, as given or
    resolved: a path inside it becomes relative to it, the folder itself its name."""
    for prefix in sorted({str(root.absolute()), str(root.resolve())}, key=len, reverse=True):
        if len(prefix) > 1:  # never the file system root
            text = text.replace(prefix + os.sep, "").replace(prefix, PurePath(prefix).name)
    return text


def public_hit(hit: dict[str, Any], root: Path) -> dict[str, Any]:
    """A hit's JSON (or a citation) without absolute paths: ``source``, ``image_path`` and the
    ``source`` in its metadata become `public_path` forms."""
    out = dict(hit)
    for key in ("source", "image_path"):
        if key in out:
            out[key] = public_path(out[key], root)
    metadata = out.get("metadata")
    if isinstance(metadata, dict) and "source" in metadata:
        out["metadata"] = {**metadata, "source": public_path(metadata["source"], root)}
    return out
