"""Slow clients against a real `vrag serve` process (slowloris).

The server runs with a descriptor limit of 256 (set on its process). One client, from
127.0.0.2, opens 400 connections (fewer than this test's own limit) and sends each half a
request head, then holds them. Without a header timeout and a connection cap the server ran out
of descriptors and every other request waited for as long as the slow client held on; now a
normal request from 127.0.0.1 is answered while the slow client still holds its sockets. A
request whose body stalls is answered 408 instead of being held open.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from vrag_compress.serve.process import free_port, start_server

pytestmark = pytest.mark.e2e  # a real server process

SERVER_FDS = 256
SLOW_CONNECTIONS = 400
KEY = "slowloris-key"
LIVENESS_S = 120  # how long a request may wait before the test calls the server stuck


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (SERVER_FDS, SERVER_FDS))


@pytest.fixture(scope="module")
def server(law_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """`vrag serve` on a copy of the tiny index, under a 256 descriptor limit; yields its port."""
    import shutil

    tmp = tmp_path_factory.mktemp("slowloris")
    index = tmp / "index"
    shutil.copytree(law_index, index)
    port = free_port()
    options = ["--header-timeout", "5", "--body-timeout", "2", "--api-key", KEY]
    process = start_server(index, port, tmp / "serve.log", *options, preexec_fn=_low_fd_limit)
    try:
        yield port
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def half_requests(port: int, count: int) -> list[socket.socket]:
    """``count`` connections from 127.0.0.2, each with half a request head sent."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.2", 0))
        sock.settimeout(10)
        try:
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        except OSError:
            sock.close()  # refused or reset: the server is shedding the slow client
            continue
        held.append(sock)
    return held


def test_a_slow_client_cannot_starve_a_normal_one(server: int) -> None:
    held = half_requests(server, SLOW_CONNECTIONS)
    try:
        answer = httpx.get(f"http://127.0.0.1:{server}/api/info", timeout=LIVENESS_S)
        assert answer.status_code == 200, answer.text
        search = httpx.get(
            f"http://127.0.0.1:{server}/api/search",
            params={"q": "court", "mode": "text"},
            timeout=LIVENESS_S,
        )
        assert search.status_code == 200, search.text
    finally:
        for sock in held:
            sock.close()


def test_the_slow_client_is_refused_or_timed_out(server: int) -> None:
    """Each half-sent connection is closed by the server (503 past the caps, 408 when its head
    does not arrive in time), none is held for ever."""
    held = half_requests(server, 80)
    try:
        answers = set()
        for sock in held:
            sock.settimeout(LIVENESS_S)
            try:
                data = sock.recv(64)
            except OSError:
                data = b"reset"
            answers.add(data[:12])
        assert answers <= {b"HTTP/1.1 408", b"HTTP/1.1 503", b"", b"reset"}, answers
        assert b"HTTP/1.1 408" in answers
    finally:
        for sock in held:
            sock.close()


def test_a_stalled_body_is_answered_408(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server), timeout=LIVENESS_S) as sock:
        head = (
            f"POST /api/documents HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: 100000\r\n\r\n"
        )
        part = b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.pdf"\r\n\r\n%PDF'
        sock.sendall(head.encode() + part)
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer
