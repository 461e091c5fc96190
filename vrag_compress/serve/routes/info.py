"""``GET /api/info`` and ``/api/verify``: the index as `vrag info` and `vrag verify` see it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends

from vrag_compress.serve.deps import READS, server_of
from vrag_compress.serve.server import Server

router = APIRouter(dependencies=READS, tags=["index"])


@router.get("/api/info")
def info(server: Server = Depends(server_of)) -> dict[str, Any]:
    """Model, compressor, counts, size (as `vrag info --json`) and the server's limits."""
    config = server.config
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
            "workers": config.workers,
            "indexes_uploads": server.jobs.is_writer,
        },
    }


@router.get("/api/verify")
def verify(server: Server = Depends(server_of)) -> dict[str, Any]:
    """Checksums and catalog/segment agreement (as `vrag verify --json`)."""
    report = server.reader.verify()
    return {"ok": report.ok, "pages": report.pages, "problems": list(report.problems)}
