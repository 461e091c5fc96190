"""One set of defaults in every front end: 5 pages per search, `auto` as the commands' model."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import typer

from vrag_compress import VisualIndex
from vrag_compress.cli import app
from vrag_compress.defaults import COMMAND_MODEL

STATIC = Path(__file__).resolve().parents[1] / "vrag_compress" / "serve" / "static"


def _option_default(command: str, option: str) -> object:
    group = typer.main.get_command(app)
    params = group.commands[command].params  # type: ignore[attr-defined]
    (param,) = [p for p in params if p.name == option]
    return param.default


def test_the_web_page_asks_for_as_many_pages_as_every_other_search() -> None:
    html = (STATIC / "index.html").read_text()
    match = re.search(r'<input id="k"[^>]*value="(\d+)"', html)
    assert match, "the page has a k box with a value"
    python_default = inspect.signature(VisualIndex.search).parameters["k"].default
    assert int(match.group(1)) == python_default == _option_default("search", "k") == 5


def test_vrag_index_creates_with_the_model_that_works_offline() -> None:
    assert COMMAND_MODEL == "auto"
    assert _option_default("index", "model") == COMMAND_MODEL
