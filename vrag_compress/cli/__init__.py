"""The `vrag` command. Each sibling module registers its commands on `app` / `bench_app`.

Heavy imports (torch, transformers, faiss) happen inside the command functions.
"""

from __future__ import annotations

from vrag_compress.cli import (  # noqa: F401  (importing registers the commands)
    bench_capture,
    bench_compress,
    bench_ingest,
    bench_ocr,
    bench_retention,
    bench_store,
    calibrate,
    index,
    migrate,
)
from vrag_compress.cli.app import app


def main() -> None:
    app()
