"""A server on a free loopback port, the way tests and the load benchmark need one: `vrag serve`
as a real process of its own (`start_server`, returned once it answers) or an ASGI app served by
uvicorn in a thread (`serving`). Lives with the server so tests use it without the benchmarks
installed; uvicorn and httpx (the ``[serve]`` extra and the dev tools) are imported on use."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve an ASGI ``app`` with uvicorn on a free loopback port, in a thread, for the block;
    yields its base URL (tests that need a real socket but not a second process)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.1)
    if not server.started:
        raise RuntimeError("uvicorn did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def start_server(
    index_dir: Path,
    port: int,
    log: Path,
    *options: str,
    timeout: float = 300,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen:
    """A real `vrag serve INDEX --port PORT [options]` process, returned once /api/info answers
    (the load test and the kill -9 test drive the server exactly as users start it).
    ``preexec_fn`` runs in the child before `vrag serve` starts (a resource limit, say)."""
    import httpx

    command = [sys.executable, "-m", "vrag_compress", "serve", str(index_dir)]
    command += ["--port", str(port), *options]
    with open(log, "ab") as out:  # its own process group: --workers children go with it
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=5) as client:  # one client: each `httpx.get` built an SSL context
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"vrag serve exited: {log.read_text()[-2000:]}")
            try:
                if client.get(f"http://127.0.0.1:{port}/api/info").status_code == 200:
                    return process
            except httpx.HTTPError:
                time.sleep(0.3)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
    raise RuntimeError(
        f"vrag serve did not start within {timeout:.0f} s: {log.read_text()[-2000:]}"
    )
