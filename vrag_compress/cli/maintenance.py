"""`vrag info`, `vrag optimize`, `vrag verify` and `vrag delete`: looking after an index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from vrag_compress.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    detail_lines,
    document_label,
    emit_json,
    err,
    fail,
    find_document,
    open_index,
    out,
)
from vrag_compress.cli.fit import fit_table
from vrag_compress.progress import counted


def info(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    recall: bool = typer.Option(
        False,
        "--recall",
        help="Also measure the candidate index's recall@10 against exact search, with a "
        "sample of stored pages as queries (seconds to minutes on large indexes).",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Show the model, compressor, counts and size of an index, and list its documents."""
    with open_index(index_dir, readonly=True) as vindex:
        details = vindex.info(measure_recall=recall)
        docs: list[dict[str, Any]] = [
            {"doc_id": d.doc_id, "source": d.source, "n_pages": d.n_pages, "complete": d.complete}
            for d in vindex.documents()
        ]
    if json_out:
        emit_json({**details, "document_list": docs})
        return
    for line in detail_lines(details):
        out.print(line, markup=False, soft_wrap=True, highlight=False)
    table = Table(title="documents", title_justify="left")
    table.add_column("file", overflow="fold")  # folded only when wider than the terminal
    for column in ("pages", "doc id", "status"):
        table.add_column(column)
    for doc in docs:
        name = Path(doc["source"]).name if doc["source"] else "-"
        status = "complete" if doc["complete"] else "incomplete (re-run `vrag index` to resume)"
        table.add_row(escape(name), str(doc["n_pages"] or "?"), doc["doc_id"], status)
    out.print(fit_table(table, out))


def optimize(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    codes: str | None = typer.Option(
        None,
        "--codes",
        help="Residual codes kept per vector by the candidate index: none, 4bit, 2bit or 1bit "
        "[default: keep the index's setting].",
    ),
    fp16: bool | None = typer.Option(
        None,
        "--fp16/--no-fp16",
        help="--no-fp16 converts the index in place to keep only its --codes (4bit unless "
        "given or kept in the index), dropping the fp16 vectors; crash-safe (a kill leaves the "
        "old layout or the new one). --fp16 keeps the fp16 vectors for good (an index whose "
        "vectors are already codes cannot get them back) [default: the index's layout].",
    ),
    retrain: bool = typer.Option(
        False,
        "--retrain",
        help="Retrain the codes of an index without fp16 vectors even when its size does not "
        "call for it (re-encodes decoded vectors: a little precision is lost each time).",
    ),
    recall_target: float | None = typer.Option(
        None,
        "--recall-target",
        min=0.0,
        max=1.0,
        help="recall@10 against exact search the candidate index tunes its probes and rerank "
        "depth for, measured on pseudo-queries of the collection; kept in the index "
        "[default: the index's setting, 0.97]; 0: the fixed size rule.",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Compact an index and retrain its centroid candidate index (searches keep working).

    An index without fp16 vectors only compacts once its codes exist, unless it grew 4× since
    they were trained, --codes changes or --retrain asks. An index with the default layout
    switches to codes here once it holds 500,000 vectors."""
    if codes is not None and codes not in ("none", "4bit", "2bit", "1bit"):
        raise typer.BadParameter("use none, 4bit, 2bit or 1bit", param_hint="--codes")
    from vrag_compress.index import VisualIndexError
    from vrag_compress.store import StoreError

    with open_index(index_dir) as vindex:
        try:
            details = vindex.optimize(
                codes=codes, retrain=retrain, recall_target=recall_target, fp16=fp16
            )
        except (VisualIndexError, StoreError) as error:
            fail(str(error))
    if json_out:
        emit_json(details)
        return
    for key, value in details.items():
        out.print(f"[bold]{key}[/]: {escape(str(value))}")


def verify(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    json_out: bool = JsonOpt,
) -> None:
    """Check checksums and catalog/segment agreement; exit 1 when a problem is found."""
    from vrag_compress.store import StoreError

    with open_index(index_dir, readonly=True) as vindex:
        try:
            report = vindex.verify()
        except StoreError as error:
            fail(str(error))
    payload = {"ok": report.ok, "pages": report.pages, "problems": list(report.problems)}
    if json_out:
        emit_json(payload)
    elif report.ok:
        out.print(f"[green]ok[/]: {report.pages} pages verified")
    else:
        for problem in report.problems:
            err.print(f"[red]problem:[/] {escape(problem)}")
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


def delete(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    document: str = typer.Argument(
        ..., metavar="DOCUMENT", help="File name, source path or doc id (see `vrag info`)."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Delete one document's pages from an index."""
    with open_index(index_dir) as vindex:
        doc_id = find_document(vindex, document)
        label = document_label(vindex, doc_id, document)
        removed = vindex.delete(doc_id)
    if removed == 0:
        if json_out:
            emit_json({"doc_id": doc_id, "pages_deleted": 0})
        fail(f"no document {label} in {index_dir}")
    if json_out:
        emit_json({"doc_id": doc_id, "pages_deleted": removed})
    else:
        out.print(f"deleted {counted(removed, 'page')} of {label}", markup=False, soft_wrap=True)
