"""The `vrag bench` command group; each benchmark module in this package adds one command."""

from __future__ import annotations

import typer

bench_app = typer.Typer(help="Benchmarks that print numbers (and --json).", no_args_is_help=True)
