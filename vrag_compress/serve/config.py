"""What `vrag serve` was started with: the settings the `Server`, its routers and its worker
processes read. Kept apart from the routers' dependencies (`deps`, which hand routers the
running `Server`), so `server` reads its config without importing them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


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
    workers: int = 1
    header_timeout_s: float = 10.0  # see serve.connections: slow clients
    body_timeout_s: float = 30.0
    max_connections: int | None = None
    max_client_connections: int = 64
