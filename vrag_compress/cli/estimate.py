"""`vrag estimate`: what each compression method and ratio would keep, before indexing with it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from vrag_compress.cli.app import app
from vrag_compress.cli.fit import fit_table
from vrag_compress.progress import task_progress

out = Console()
err = Console(stderr=True, soft_wrap=True)


def split_list(text: str) -> list[str]:
    return [item for item in re.split(r"[,\s]+", text.strip()) if item]


def parse_ratios(text: str, option: str = "--ratios") -> list[float]:
    try:
        ratios = [float(v) for v in split_list(text)]
    except ValueError as exc:
        raise typer.BadParameter(
            f"numbers like 0.25,0.1 expected, got {text!r}", param_hint=option
        ) from exc
    if not ratios or any(not 0.0 < r <= 1.0 for r in ratios):
        raise typer.BadParameter(f"keep ratios must be in (0, 1], got {text!r}", param_hint=option)
    return ratios


def check_methods(text: str) -> list[str]:
    from vrag_compress.compress import list_compressors

    specs = split_list(text)
    unknown = [s for s in specs if s.partition(":")[0] not in list_compressors()]
    if not specs or unknown:
        raise typer.BadParameter(
            f"unknown method(s) {unknown}; choose from {', '.join(list_compressors())}",
            param_hint="--methods",
        )
    return specs


def print_estimate(result, target: float, console: Console) -> None:  # noqa: ANN001
    from vrag_compress.estimate import row_range

    samples = f" x {result.draws} samples" if result.draws > 1 else ""
    table = Table(
        title=f"estimated retention · {result.n_pages} pages{samples} · {result.n_queries} "
        f"pseudo-queries ({result.query_kind}) · {result.encoder}"
    )
    columns = ("method", "ratio", "vectors/page", "estimated retention@10", "90% interval")
    both = any(row.keyword is not None for row in result.rows)
    keyword = ("keyword lookups (90%)", "range: how users ask") if both else ()
    for col in (*columns, *keyword, "SR", "top-10 kept"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for row in result.rows:
        low, high = row_range(row)
        lookups = (
            (
                f"{row.keyword:.3f} ({row.keyword_low:.3f}-{row.keyword_high:.3f})",
                f"{low:.3f}-{high:.3f}",
            )
            if both
            else ()
        )
        table.add_row(
            row.method,
            f"{row.ratio:g}",
            f"{row.tokens_per_page:.1f}",
            f"{row.estimated:.3f}",
            f"{row.low:.3f}-{row.high:.3f}",
            *lookups,
            f"{row.sr:.3f}",
            f"{row.rank_agreement:.3f}",
        )
    console.print(fit_table(table, console))
    for note in result.notes:
        console.print(f"note: {note}")
    console.print(result.recommend(target))


def print_on_questions(result, target: float, console: Console) -> None:  # noqa: ANN001
    from vrag_compress.estimate.questions import JUDGED_LEVEL

    judged = result.n_judged > 0
    table = Table(
        title=f"on your questions · {result.n_pages} of {result.collection_pages} pages · "
        f"{result.n_queries} questions ({result.n_judged} judged) · {result.encoder}"
    )
    columns = ["method", "ratio", "vectors/page", "top-10 kept (90%)", "NDCG@10 vs uncompressed"]
    if judged:
        columns.append(f"judged retention@10 ({JUDGED_LEVEL:.0%})")
    for col in columns:
        table.add_column(col, justify="left" if col == "method" else "right")
    for row in result.rows:
        cells = [
            row.method,
            f"{row.ratio:g}",
            f"{row.tokens_per_page:.1f}",
            f"{row.overlap:.3f} ({row.overlap_low:.3f}-{row.overlap_high:.3f})",
            f"{row.ndcg:.3f} ({row.ndcg_low:.3f}-{row.ndcg_high:.3f})",
        ]
        if judged:
            cells.append(f"{row.judged:.3f} ({row.judged_low:.3f}-{row.judged_high:.3f})")
        table.add_row(*cells)
    console.print(fit_table(table, console))
    for note in result.notes:
        console.print(f"note: {note}")
    console.print(result.recommend(target))


@app.command("estimate")
def estimate(
    source: Path = typer.Argument(..., help="An index folder, or a folder / file of documents."),
    ratios: str = typer.Option("0.25,0.1,0.05", help="Keep ratios, comma separated."),
    methods: str = typer.Option(
        "sap,uot,random", help="Methods, comma separated, with parameters as name:key=value."
    ),
    sample: int | None = typer.Option(
        None,
        min=2,
        help="Pages to sample (default 300; 500 with --queries-file or --judged, which also "
        "take every judged page).",
    ),
    target: float = typer.Option(0.97, help="Retention to recommend a method and ratio for."),
    model: str | None = typer.Option(
        None, help="Encoder for a folder (default the index default); an index uses its own."
    ),
    seed: int = typer.Option(0, min=0, help="Seed of the page sample and the pseudo-queries."),
    draws: int = typer.Option(
        1,
        min=1,
        help="Page samples to pool (seeds SEED, SEED+1, ...): each figure is their mean and its "
        "interval includes how another sample moves it, at DRAWS times the cost. Worth 3 or "
        "more with --queries keyword, whose figure moves most between samples.",
    ),
    neighbours: int = typer.Option(
        5, min=0, help="Pages nearest a pseudo-query's own page that count as partly relevant."
    ),
    queries: str = typer.Option(
        "both",
        help="Label-free pseudo-queries: 'both' (the default: lead, with keyword beside it, the "
        "range between how topical questions and lookups fare), 'lead' (each page's title, "
        "heading or first sentence: topical questions), 'keyword' (the page's rarest word that "
        "another page shares, taken out of the page: name, tag and keyword lookups) or "
        "'sentence' (a random sentence).",
    ),
    queries_file: Path | None = typer.Option(
        None,
        "--queries-file",
        help="Your users' questions (one a line, or JSONL with 'text'): measure on them how "
        "much of the uncompressed top 10 each method keeps (overlap, and NDCG@10 with the "
        "uncompressed ranking as truth), instead of the label-free estimate.",
    ),
    judged: Path | None = typer.Option(
        None,
        "--judged",
        help="Judgments: a qrels TSV (query-id, corpus-id, score) with queries.jsonl beside it, "
        "or a BEIR folder; corpus ids are page ids (doc:page), document ids or file names. "
        "Adds the judged retention@10 on those questions; a few dozen are enough to choose.",
    ),
    relevance: str = typer.Option(
        "own",
        help="'own': a pseudo-query's own page counts as relevant (gain 2); 'away': it is left "
        "out, so the query must find the pages nearest its own.",
    ),
    sample_only: bool = typer.Option(
        False,
        "--sample-only",
        help="Rank within the sampled pages only, instead of predicting each ranking in the "
        "whole source (the sample-only figures run high on sources much larger than the sample).",
    ),
    device: str = typer.Option("auto", help="auto, cpu, cuda or mps."),
    json_out: bool = typer.Option(
        False, "--json", help="Print machine-readable JSON on stdout (no table, no progress)."
    ),
) -> None:
    """Estimate how much retrieval quality each method keeps at each ratio. Without labels:
    pseudo-queries from sampled pages, as a range between topical questions and lookups,
    compressed vs uncompressed MaxSim rankings; below 100 sampled pages it shows the table but
    recommends nothing (the intervals are too wide). With --queries-file: the agreement on
    your users' questions; with --judged: the judged retention@10 on judged questions."""
    from vrag_compress.estimate import BOTH, QUERY_CHOICES, RELEVANCE, estimate_retention

    ratio_list = parse_ratios(ratios)
    method_list = check_methods(methods)
    if queries not in QUERY_CHOICES:
        raise typer.BadParameter(
            f"choose {', '.join(QUERY_CHOICES)}, got {queries!r}", param_hint="--queries"
        )
    if relevance not in RELEVANCE:
        raise typer.BadParameter(
            f"choose {' or '.join(RELEVANCE)}, got {relevance!r}", param_hint="--relevance"
        )
    if not source.exists():
        raise typer.BadParameter(f"no such index, folder or file: {source}", param_hint="SOURCE")
    if queries_file is not None or judged is not None:
        _on_questions(
            source,
            queries_file,
            judged,
            method_list,
            ratio_list,
            sample,
            seed,
            model,
            device,
            target,
            json_out,
        )
        return
    kinds = 2 if queries == BOTH else 1
    steps = draws * kinds * (len(method_list) * len(ratio_list) + 1)
    with _errors_exit(), _steps(steps, enabled=not json_out) as step:
        result = estimate_retention(
            source,
            methods=method_list,
            ratios=ratio_list,
            sample=sample or 300,
            seed=seed,
            model=model,
            device=device,
            neighbours=neighbours,
            queries=queries,
            relevance=relevance,
            scale_to_collection=not sample_only,
            draws=draws,
            progress=step,
        )
    if json_out:
        typer.echo(result.to_json(target))
    else:
        print_estimate(result, target, out)


def _on_questions(
    source: Path,
    queries_file: Path | None,
    judged: Path | None,
    methods: list[str],
    ratios: list[float],
    sample: int | None,
    seed: int,
    model: str | None,
    device: str,
    target: float,
    json_out: bool,
) -> None:
    """`vrag estimate --queries-file / --judged`: the figures on the user's own questions."""
    from vrag_compress.estimate.questions import DEFAULT_QUERY_SAMPLE, estimate_on_queries

    with _errors_exit(), _steps(len(methods) * len(ratios) + 1, enabled=not json_out) as step:
        result = estimate_on_queries(
            source,
            queries_file=queries_file,
            judged=judged,
            methods=methods,
            ratios=ratios,
            sample=sample or DEFAULT_QUERY_SAMPLE,
            seed=seed,
            model=model,
            device=device,
            progress=step,
        )
    if json_out:
        typer.echo(json.dumps(result.to_dict(target), indent=2))
    else:
        print_on_questions(result, target, out)


@contextmanager
def _errors_exit() -> Iterator[None]:
    """What an estimate can meet on the user's input (an unreadable source or questions file, a
    model that cannot load, a damaged index) as one error line and exit 1."""
    from vrag_compress.compress import CompressionError
    from vrag_compress.encoders import EncoderLoadError
    from vrag_compress.estimate import EstimateError
    from vrag_compress.index import VisualIndexError
    from vrag_compress.store import StoreError

    try:
        yield
    except (
        EstimateError,
        CompressionError,
        EncoderLoadError,  # a model that cannot load (missing, a bad st: folder, no such device)
        VisualIndexError,
        StoreError,
    ) as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(1) from exc


@contextmanager
def _steps(total: int, *, enabled: bool) -> Iterator[Callable[[str], None]]:
    """A bar on stderr over the estimate's steps (encoding the sample, then each method and
    ratio), showing the step just done and the time so far; a no-op when not enabled."""
    with task_progress(err, disable=not enabled) as bar:
        task = bar.add_task("estimate: loading the model and encoding the sample", total=total)

        def step(done: str) -> None:
            bar.update(task, advance=1, description=f"estimate: {done}")

        yield step
