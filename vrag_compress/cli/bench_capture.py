"""Commands for this area are registered here (see cli/app.py)."""

from vrag_compress.cli.app import app, bench_app  # noqa: F401
