"""The `vrag` Typer application objects; commands live in sibling modules, one per area."""

from __future__ import annotations

import typer

from vrag_compress.bench.app import bench_app

app = typer.Typer(
    name="vrag",
    help="Index PDFs and page images with compressed ColPali-family embeddings and search them.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(bench_app, name="bench")

__all__ = ["app", "bench_app"]
