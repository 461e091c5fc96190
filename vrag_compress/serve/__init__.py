"""`vrag serve`: a REST API and a web page over one index folder (needs the ``[serve]`` extra).

FastAPI is imported only here and below, and only when the server starts.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import socket

from vrag_compress.serve.app import CONFIG_ENV, create_app
from vrag_compress.serve.config import ServeConfig
from vrag_compress.serve.connections import GuardedH11Protocol
from vrag_compress.serve.server import ensure_index

__all__ = ["HostError", "ServeConfig", "create_app", "is_loopback", "run"]

WORKER_HEALTHCHECK_S = 120
"""How long uvicorn waits for a worker to answer its health check before replacing it: a worker
loads torch and the model at start (tens of seconds on a busy machine), and a worker encoding
pages may answer late; uvicorn's 5 s default kept killing them mid-start."""


MAX_HEAD_BYTES = 16 * 1024
"""Largest request head (request line and headers) read; a bigger one is answered 400."""


class HostError(ValueError):
    """A ``--host`` the server will not bind as configured (another machine's clients, no key)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(
                ipaddress.ip_address(info[4][0]).is_loopback
                for info in socket.getaddrinfo(host, None)
            )
        except (OSError, ValueError):
            return False


def run(config: ServeConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until interrupted. Non-loopback binds need an API key, and every request then too."""
    import uvicorn

    if not is_loopback(host):
        if not config.api_key:
            raise HostError(
                f"--host {host} accepts connections from other machines: set --api-key "
                "(or VRAG_API_KEY); every request must then send 'Authorization: Bearer KEY'"
            )
        config.reads_need_key = True
    config.host = host
    if config.workers > 1:
        _run_workers(config, host, port)
        return
    app = create_app(config)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="info",
        server_header=False,
        http=GuardedH11Protocol,  # header timeout, connection caps (serve.connections)
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    )


def _run_workers(config: ServeConfig, host: str, port: int) -> None:
    """``config.workers`` uvicorn worker processes on one socket, each serving the same index
    (see `vrag_compress.serve.server`); the folder is created first, once."""
    import uvicorn

    ensure_index(config)
    values = dataclasses.asdict(config)
    values["index_dir"] = str(config.index_dir)
    os.environ[CONFIG_ENV] = json.dumps(values)
    uvicorn.run(
        "vrag_compress.serve.app:app_from_environment",
        factory=True,
        workers=config.workers,
        host=host,
        port=port,
        log_level="info",
        server_header=False,
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
        http=GuardedH11Protocol,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    )
