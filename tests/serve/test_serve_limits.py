"""Issue 32.3, unauthenticated disk fill, against a real loopback uvicorn server: a chunked
``POST /api/documents`` (no Content-Length) of 96 x 1 MiB. Before the fix the server read (and
spooled to the temp folder) the whole body before answering 401 without a key, and 413 with one.

The server's app is wrapped in a counter of the body bytes it takes from the socket: what it
never reads, it can never spool. The client stops sending as soon as an answer arrives.
"""

from __future__ import annotations

import select
import socket
from pathlib import Path
from typing import Any

import pytest

from vrag_compress import VisualIndex, get_compressor
from vrag_compress.serve import ServeConfig, create_app
from vrag_compress.serve.guards import BODY_SLACK
from vrag_compress.serve.process import serving

KEY = "limits-key"
MIB = 2**20
LIMIT_MB = 2
CHUNKS = 96


class BodyCounter:
    """ASGI wrapper that counts the request body bytes the app received."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.read = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def counted() -> Any:
            message = await receive()
            self.read += len(message.get("body", b""))
            return message

        await self.app(scope, counted, send)


def post_chunked(port: int, headers: dict[str, str]) -> tuple[int, int]:
    """Send up to `CHUNKS` MiB of a multipart upload, chunked; stop when the server answers.
    Returns (HTTP status, bytes sent)."""
    head = [
        "POST /api/documents HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Transfer-Encoding: chunked",
        "Content-Type: multipart/form-data; boundary=XyZ",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    part = b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="big.pdf"\r\n\r\n%PDF'
    chunks = [part] + [b"0" * MIB] * CHUNKS + [b"\r\n--XyZ--\r\n"]
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0]:
                break  # answered: stop sending
            try:
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            except OSError:
                break
            sent += len(chunk)
        else:
            sock.sendall(b"0\r\n\r\n")
        answer = b""
        try:
            while b"\r\n" not in answer and (data := sock.recv(4096)):
                answer += data
        except OSError:
            pass
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, sent


@pytest.fixture()
def index_dir(tmp_path: Path) -> Path:
    path = tmp_path / "limits.vrag"
    compressor = get_compressor("sap", ratio=0.25, layers=[0, 1])
    VisualIndex.create(path, model="tiny-colqwen2", compressor=compressor).close()
    return path


@pytest.mark.parametrize(
    ("headers", "status"), [({}, 401), ({"Authorization": f"Bearer {KEY}"}, 413)]
)
def test_chunked_upload_is_cut_off_before_the_disk_fills(index_dir, tmp_path, headers, status):
    app = BodyCounter(
        create_app(ServeConfig(index_dir, api_key=KEY, max_upload_mb=LIMIT_MB, ocr="never"))
    )
    with serving(app) as url:
        answered, sent = post_chunked(int(url.rsplit(":", 1)[1]), headers)
    assert answered == status
    cap = LIMIT_MB * MIB + BODY_SLACK + MIB  # the limit, the framing slack, one chunk in flight
    assert app.read <= (0 if status == 401 else cap), app.read
    assert sent < CHUNKS * MIB // 2, sent  # the client was stopped long before the end
    assert not list((index_dir / "uploads").glob("*/*"))
