"""The `vrag` Typer application objects; commands live in sibling modules, one per area."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="vrag",
    help="Index PDFs and page images with compressed ColPali-family embeddings and search them.",
    no_args_is_help=True,
    add_completion=False,
)
bench_app = typer.Typer(help="Benchmarks that print numbers (and --json).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
