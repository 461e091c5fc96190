"""Slow and greedy clients cannot hold `vrag serve`: header and body read timeouts and
connection caps.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive`` and refuses headers
over 16 KiB (h11's ``max_incomplete_event_size``), but it waits for ever for the rest of a
request's headers, and accepts connections until the process runs out of file descriptors: a
client sending 1,100 half requests against a 1,024 descriptor limit stopped every other request
for as long as it held them. Here:

- `GuardedH11Protocol` (uvicorn's h11 protocol, given to ``uvicorn.run(http=...)``) closes a
  connection that has not sent a whole request head ``header_timeout_s`` after it opened or
  after its previous answer (with ``408 Request Timeout``), and answers ``503`` and closes a new
  connection at once when the process holds ``max_connections`` or its client's address holds
  ``max_client_connections``. So a client that never finishes its headers holds at most its own
  share of connections, each for at most the header timeout, and descriptors never run out.
- `BodyTimeout` (ASGI middleware) answers ``408`` when a request body stalls: no chunk for
  ``body_timeout_s``. Only reads of the body are timed, not a streamed answer's wait for the
  client to leave.

The limits are per process (`install` sets them; each ``--workers`` process calls it when it
builds its app).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
from collections import Counter
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("vrag_compress.serve")

FD_RESERVE = 128
"""Descriptors kept back from connections for what the server opens itself (index segments,
catalog, model files, upload files, logs)."""


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take to send a request and how many connections it may hold."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int | None = None  # None: what the descriptor limit allows
    max_client_connections: int = 64  # per client address; 0: no per-address cap


_limits = ConnectionLimits()
_cap = 1024


def install(limits: ConnectionLimits) -> int:
    """Use ``limits`` for the connections this process accepts from now on; raises the soft
    descriptor limit to the hard one first. Returns the connection cap in force."""
    global _limits, _cap
    _limits = limits
    _cap = connection_cap(limits, raise_fd_limit())
    return _cap


def raise_fd_limit() -> int:
    """The process's descriptor limit, raised to the hard limit where the soft one is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(limits: ConnectionLimits, fd_limit: int) -> int:
    """The most connections held at once: ``max_connections`` when given, never more than the
    descriptor limit minus `FD_RESERVE` (at least 8)."""
    room = max(8, fd_limit - FD_RESERVE)
    return room if limits.max_connections is None else max(1, min(limits.max_connections, room))


_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\nretry-after: 1\r\ncontent-length: 31\r\n\r\n"
    b"too many connections; try again"
)
_HEAD_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 35\r\n\r\n"
    b"request headers took too long; retry"
)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request-head timeout and connection caps (see the module
    docstring); pass the class as ``uvicorn.run(..., http=GuardedH11Protocol)``."""

    _per_client: Counter[str] = Counter()  # open connections per client address, this process
    _open = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._address = self.client[0] if self.client else "?"
        per_client = _limits.max_client_connections
        cls = GuardedH11Protocol
        if cls._open >= _cap or (per_client and cls._per_client[self._address] >= per_client):
            self._counted = False
            log.warning("refused a connection from %s: too many connections", self._address)
            transport.write(_REFUSED)
            transport.close()
            return
        self._counted = True
        cls._open += 1
        cls._per_client[self._address] += 1
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if getattr(self, "_counted", False):
            self._counted = False
            cls = GuardedH11Protocol
            cls._open -= 1
            cls._per_client[self._address] -= 1
            if cls._per_client[self._address] <= 0:
                del cls._per_client[self._address]
        self._cancel_head_timer()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_timer()  # the next request's head has the same time to arrive

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(_limits.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        waiting = self.cycle is None or self.cycle.response_complete  # no request under way
        if waiting and not self.transport.is_closing():
            log.warning("closed a connection from %s: no request head in time", self._address)
            self.transport.write(_HEAD_TIMEOUT)
            self.transport.close()


class BodyTimeout:
    """ASGI middleware: a request whose body stalls for ``timeout_s`` is answered 408 (the app
    sees the client leave). Reads after the whole body came are not timed."""

    def __init__(self, app: Any, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"body_done": False, "timed_out": False, "started": False}

        async def timed_receive() -> dict[str, Any]:
            if state["body_done"]:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.timeout_s)
            except asyncio.TimeoutError:
                state["timed_out"] = state["body_done"] = True
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["body_done"] = True
            return message

        async def guarded_send(message: dict[str, Any]) -> None:
            if state["timed_out"]:
                return  # the 408 below answers instead
            state["started"] = True
            await send(message)

        try:
            await self.app(scope, timed_receive, guarded_send)
        except Exception:
            if not state["timed_out"]:
                raise
        if state["timed_out"] and not state["started"]:
            await _answer_408(send)


async def _answer_408(send: Any) -> None:
    body = b'{"error":"the request body stalled; send it again"}'
    await send(
        {
            "type": "http.response.start",
            "status": 408,
            "headers": [
                (b"content-type", b"application/json"),
                (b"connection", b"close"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
