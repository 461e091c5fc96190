"""What the `vrag` commands share: exit codes, the consoles, `--json`, `--store`, errors as one
line, opening an index and naming a document.

Exit codes: 0 success; 1 the command failed (message on stderr); 2 bad usage;
3 `index` finished but some files or pages failed (listed in the report).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from vrag_compress.cli.options import resolve_document

if TYPE_CHECKING:
    from vrag_compress.index import VisualIndex

EXIT_FAILED = 1
EXIT_PARTIAL = 3
EXIT_INTERRUPTED = 130

out = Console()
err = Console(stderr=True, soft_wrap=True)  # messages keep whole paths on one line

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON on stdout.")


def fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(EXIT_FAILED)


def emit_json(payload: Any) -> None:
    typer.echo(json.dumps(payload, indent=2, default=str))


StoreOpt = typer.Option(
    None,
    "--store",
    help="Where the vectors live: qdrant://host:port/collection or qdrant+local://PATH "
    "[default: the embedded store in the index folder, or the store it points at].",
)


def open_index(
    path: Path, readonly: bool = False, device: str = "auto", store: str | None = None
) -> VisualIndex:
    from vrag_compress.index import VisualIndex, VisualIndexError
    from vrag_compress.store import StoreError

    try:
        return VisualIndex.open(path, readonly=readonly, device=device, store=store)
    except (VisualIndexError, StoreError) as error:
        fail(str(error))


def detail_lines(details: dict[str, Any], indent: str = "") -> list[str]:
    """`key: value` lines for people: nested mappings indented under their key, lists joined
    with commas, None as "none" (`--json` keeps the structure for scripts)."""
    lines = []
    for key, value in details.items():
        if isinstance(value, dict) and value:
            lines.append(f"{indent}{key}:")
            lines.extend(detail_lines(value, indent + "  "))
            continue
        if isinstance(value, (list, tuple)):
            shown = ", ".join(str(v) for v in value) or "none"
        elif isinstance(value, bool):
            shown = "yes" if value else "no"
        elif value is None or value == {}:
            shown = "none"
        else:
            shown = str(value)
        lines.append(f"{indent}{key}: {shown}")
    return lines


def document_label(vindex: Any, doc_id: str, typed: str) -> str:
    """How messages name a document: what the user typed, else its file name, with the doc id
    in brackets (``report.pdf [c63508c7b195e6b6]``)."""
    if typed == doc_id:
        source = next((d.source for d in vindex.documents() if d.doc_id == doc_id), None)
        typed = Path(source).name if source else doc_id
    return doc_id if typed == doc_id else f"{typed} [{doc_id}]"


def find_document(vindex: Any, name: str) -> str:
    """The doc id for a doc id, file name or source path given on the command line."""
    try:
        return resolve_document(vindex.documents(), name)
    except LookupError as error:
        fail(f"{vindex.path}: {error}")
