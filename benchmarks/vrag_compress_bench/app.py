"""The `vrag bench` command group; each benchmark module in this package adds one command
(`vrag_compress_bench.cli` imports them all: the entry point `vrag` loads)."""

from __future__ import annotations

import typer

# Plain help like `vrag`'s own (no rich markup: "the [ocr] extra" stays text).
bench_app = typer.Typer(
    help="Benchmarks that print numbers (and --json).",
    no_args_is_help=True,
    add_completion=False,  # `vrag` has none either
    rich_markup_mode=None,
)
