"""`vrag migrate SRC DST`: copy an index's vectors between the embedded store and Qdrant.

No re-encoding: the stored compressed vectors, payloads and document rows are copied, then the
same exact searches run on both stores and must agree before the command reports success. A
source without fp16 vectors is copied as its decoded vectors, kept in full by the destination
(``fp16`` true, no codes) unless ``--keep-codes`` asks for its codes-only layout.

Pages are copied in batches; a migration that was killed (even ``kill -9``) resumes when the same
command runs again: the pages already in DST are kept and only the missing ones are copied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from vrag_compress.cli.app import app
from vrag_compress.cli.options import check_writable
from vrag_compress.progress import task_progress
from vrag_compress.store import StoreError, user_input

out = Console()
err = Console(stderr=True, soft_wrap=True)  # messages keep whole paths on one line


def resolve_target(target: str) -> str:
    """A store URL as given; an index folder that points at a store becomes that URL; any other
    path is an embedded store folder."""
    from vrag_compress.store.open import is_store_url, read_store_pointer

    if is_store_url(target):
        return target
    return read_store_pointer(target) or target


def source_name(src: str) -> str:
    """How a migration's destination names its source: the URL, or the absolute folder, so
    the same command run again from anywhere resumes it."""
    from vrag_compress.store.open import backend, is_store_url

    target = resolve_target(src)
    return (
        backend(target).pointer_url(target) if is_store_url(target) else str(Path(target).resolve())
    )


@app.command("migrate")
def migrate(
    src: str = typer.Argument(..., help="Index folder, embedded store folder or store URL."),
    dst: str = typer.Argument(
        ...,
        help="New store: qdrant://host:port/collection, qdrant+local://PATH, or a new "
        "folder for an embedded store (a migration that was killed resumes there).",
    ),
    candidate: str = typer.Option(
        "mean", help="Qdrant prefetch field: mean, binary or none (exact only)."
    ),
    batch: int = typer.Option(256, min=1, help="Pages per copy batch."),
    verify_queries: int = typer.Option(
        20, "--verify-queries", min=0, help="Probe queries compared on both stores."
    ),
    repoint: Path | None = typer.Option(
        None,
        "--repoint",
        help="After a verified copy to a URL, point this index folder "
        "(images, layouts) at DST so `VisualIndex.open` / `vrag search` use it.",
    ),
    keep_codes: bool = typer.Option(
        False,
        "--keep-codes",
        help="A source without fp16 vectors: give an embedded DST the same codes-only layout "
        "(trained again on the decoded vectors, so it answers a little differently and the "
        "check may fail) instead of keeping the decoded vectors in full.",
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the report as JSON here."),
) -> None:
    """Copy SRC's pages and documents into a new store DST, then compare search results.

    Run the same command again after a kill: it resumes, copying only the pages DST lacks."""
    from vrag_compress.store.migrate import (
        compare_stores,
        copy_store,
        destination_config,
        finish_migration,
        open_destination,
    )
    from vrag_compress.store.open import is_store_url, open_store

    check_targets(src, dst, repoint, json_out)
    options = {"candidate": candidate} if is_store_url(dst) else {}
    try:
        with open_store(resolve_target(src), readonly=True) as source:
            config = destination_config(source.config, keep_codes=keep_codes)
            origin = source_name(src)
            target, there = open_destination(dst, config, source, origin, **options)
            with target:
                total = source.count()
                if there:
                    err.print(f"resuming: {len(there)} of {total} pages are already in {dst}")
                with _progress() as bar:
                    task = bar.add_task("copying pages", total=total, completed=len(there))
                    copied = copy_store(
                        source,
                        target,
                        batch=batch,
                        progress=lambda n: bar.advance(task, n),
                        skip=there,
                    )
                check = compare_stores(source, target, queries=verify_queries)
                if check.ok:
                    finish_migration(target, origin)
    except StoreError as error:
        err.print(f"[bold red]error:[/] {escape(str(error))}")
        raise typer.Exit(1) from error
    report = {
        "src": src,
        "dst": dst,
        "pages_copied": copied,
        "pages_resumed": len(there),
        "ok": check.ok,
        "pages_src": check.pages_src,
        "pages_dst": check.pages_dst,
        "documents_equal": check.documents_equal,
        "queries_compared": check.queries,
        "rank_mismatches": check.rank_mismatches,
        "max_score_diff": check.max_score_diff,
    }
    _print(report)
    if json_out is not None:
        _write_report(json_out, report)
    if not check.ok:
        err.print(
            "[bold red]error:[/] the copy does not answer like the source; "
            "DST was left in place for inspection"
        )
        raise typer.Exit(1)
    if repoint is not None:
        from vrag_compress.store.open import write_store_pointer

        write_store_pointer(repoint, dst)
        out.print(f"{repoint} now uses {dst}")


def check_targets(src: str, dst: str, repoint: Path | None, json_out: Path | None) -> None:
    """Refuse, before anything is copied, what the migration could not finish with: a SRC or
    DST that no file system takes or whose URL scheme no store has, ``--repoint`` to a folder
    that is not an index (or with a DST that is not a URL), a ``--json`` file that cannot be
    written. Each is a usage error (exit 2) naming the argument."""
    from vrag_compress.store.local.catalog import CATALOG_NAME
    from vrag_compress.store.open import POINTER_NAME, check_target, is_store_url

    for text, hint in ((src, "SRC"), (dst, "DST")):
        try:
            user_input.check_path_text(text, hint)
            check_target(text)
        except StoreError as error:
            raise typer.BadParameter(str(error), param_hint=hint) from None
    if repoint is not None:
        if not is_store_url(dst):
            raise typer.BadParameter("--repoint needs a store URL as DST", param_hint="--repoint")
        if not any((repoint / name).is_file() for name in (CATALOG_NAME, POINTER_NAME)):
            raise typer.BadParameter(
                f"{repoint} is not an index folder (no {CATALOG_NAME} or {POINTER_NAME}); "
                "give the folder of the index whose store was copied",
                param_hint="--repoint",
            )
    if json_out is not None:
        check_writable(json_out, "--json")  # before the copy, not after it


def _write_report(path: Path, report: dict[str, Any]) -> None:
    try:
        path.write_text(json.dumps(report, indent=2))
    except OSError as error:
        err.print(
            f"[bold red]error:[/] the copy finished, but the report could not be written to "
            f"{escape(str(path))}: {escape(error.strerror or str(error))}"
        )
        raise typer.Exit(1) from None


def _progress() -> Progress:
    return task_progress(err)


def _print(report: dict[str, Any]) -> None:
    table = Table(title=f"vrag migrate {report['src']} -> {report['dst']}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name in (
        "pages_copied",
        "pages_resumed",
        "pages_src",
        "pages_dst",
        "documents_equal",
        "queries_compared",
        "max_score_diff",
        "ok",
    ):
        table.add_row(name, str(report[name]))
    table.add_row("rank_mismatches", str(len(report["rank_mismatches"])))
    out.print(table)
