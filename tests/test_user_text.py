"""Text users read (docs, READMEs, every command's --help, warnings, docstrings) names no
internal document: a user has no "SPEC §4" or "the issue" to look up."""

from __future__ import annotations

import re
from pathlib import Path

import click
import typer

import vrag_compress.cli  # noqa: F401  (registers the commands)
from vrag_compress.cli.app import app
from vrag_compress.cli.plugins import load_group

ROOT = Path(__file__).resolve().parents[1]
INTERNAL = re.compile(r"SPEC\.md|SPEC §|§\s*\d|\bthe issue\b|\bissue's\b|\bissue \d+", re.I)
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "integrations").glob("*/README.md")),
    ROOT / "benchmarks" / "README.md",
]


def _helps(command: click.Command, ctx: click.Context) -> list[tuple[str, str]]:
    found = [(ctx.command_path, command.get_help(ctx))]
    for name, sub in getattr(command, "commands", {}).items():  # a group's subcommands
        found += _helps(sub, click.Context(sub, info_name=name, parent=ctx))
    return found


def test_docs_name_no_internal_documents():
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in DOCS
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if INTERNAL.search(line)
    ]
    assert offenders == []


def test_command_help_names_no_internal_documents():
    root = typer.main.get_command(app)
    context = click.Context(root, info_name="vrag")
    helps = _helps(root, context)
    bench = load_group("bench")  # `vrag bench`, loaded from its entry point when it runs
    helps += _helps(bench, click.Context(bench, info_name="bench", parent=context))
    assert len(helps) > 15  # every command and group was reached
    offenders = [path for path, text in helps if INTERNAL.search(text)]
    assert offenders == []


def test_library_text_names_no_internal_documents():
    """Warnings, errors and docstrings (what `help()` shows) of the package and integrations."""
    pattern = re.compile(r"\bSPEC\b|§")
    sources = [
        *sorted((ROOT / "vrag_compress").rglob("*.py")),
        *sorted((ROOT / "benchmarks").rglob("*.py")),
        *sorted((ROOT / "integrations").glob("*/*/**/*.py")),
    ]
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]
    assert offenders == []
