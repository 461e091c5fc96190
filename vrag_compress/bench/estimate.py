"""`vrag bench estimate`: the label-free retention estimate against the judged retention@10."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

from vrag_compress.bench.app import bench_app
from vrag_compress.bench.retention import _Bar, _parse_window, _split_list


def compare(estimate: Any, measured: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (method, ratio): the estimate, the judged retention@10 and their difference."""
    judged = {(r["method"], float(r["ratio"])): r for r in measured["results"]}
    rows = []
    for row in estimate.rows:
        truth = judged[(row.method, row.ratio)]
        rows.append(
            {
                "method": row.method,
                "ratio": row.ratio,
                "estimated": row.estimated,
                "measured": truth["retention@10"],
                "error": row.estimated - truth["retention@10"],
                "sr": row.sr,
                "rank_agreement": row.rank_agreement,
                "measured_sr": truth["sr"],
                "tokens_per_doc": truth["tokens_per_doc"],
            }
        )
    return rows


def same_order(rows: list[dict[str, Any]]) -> dict[str, bool]:
    """Per ratio: whether the estimate ranks the methods as the judged retention@10 does."""
    out = {}
    for ratio in sorted({r["ratio"] for r in rows}, reverse=True):
        at = [r for r in rows if r["ratio"] == ratio]
        by_estimate = [r["method"] for r in sorted(at, key=lambda r: -r["estimated"])]
        by_measured = [r["method"] for r in sorted(at, key=lambda r: -r["measured"])]
        out[f"{ratio:g}"] = by_estimate == by_measured
    return out


def print_rows(rows: list[dict[str, Any]], order: dict[str, bool], console) -> None:  # noqa: ANN001
    from rich.table import Table

    table = Table(title="estimated vs judged retention@10")
    for col in ("method", "ratio", "estimated", "measured", "error", "SR (pseudo)", "top-10 kept"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in rows:
        table.add_row(
            r["method"],
            f"{r['ratio']:g}",
            f"{r['estimated']:.3f}",
            f"{r['measured']:.3f}",
            f"{r['error']:+.3f}",
            f"{r['sr']:.3f}",
            f"{r['rank_agreement']:.3f}",
        )
    console.print(table)
    console.print(
        "same method order as measured: "
        + ", ".join(f"γ={k}: {'yes' if v else 'no'}" for k, v in order.items())
    )


@bench_app.command("estimate")
def estimate(
    dataset: str = typer.Option(..., help="BEIR folder with judged queries (text corpus)"),
    encoder: str = typer.Option("minilm", help="text encoder: 'minilm' or an HF encoder folder"),
    methods: str = typer.Option("sap uot random", help="methods, space/comma separated"),
    ratios: str = typer.Option("0.25 0.1 0.05", help="keep ratios, space/comma separated"),
    sample: int = typer.Option(400, help="corpus pages the estimate samples"),
    neighbours: int = typer.Option(5, help="pages near a pseudo-query's page counted relevant"),
    window: str = typer.Option("auto", help="SAP window of the judged run: 'auto' or layers"),
    json_out: Path = typer.Option(..., "--json", help="write the rows here"),
    plot: Path | None = typer.Option(None, help="estimated-vs-judged plot (PNG)"),
    cache_dir: Path | None = typer.Option(None, help="reuse corpus encodings across runs"),
    threads: int = typer.Option(2, help="torch CPU threads"),
    seed: int = typer.Option(0, help="seed of the page sample, pseudo-queries and calibration"),
) -> None:
    """Estimate retention without labels on a sample of the corpus, then measure it with the
    judgments (as `vrag bench retention`), and compare."""
    import numpy as np
    import torch
    from rich.console import Console

    from vrag_compress.bench.eval.runner import encode_corpus, load_benchmark_encoder, run_retention
    from vrag_compress.bench.paths import load_dataset_option
    from vrag_compress.estimate import cloze_queries, estimate_pages
    from vrag_compress.progress import task_progress

    torch.set_num_threads(threads)
    console = Console(width=120)
    started = time.perf_counter()
    data = load_dataset_option(dataset)
    if data.kind != "text":
        raise typer.BadParameter("the estimate check needs a text corpus", param_hint="--dataset")
    model = load_benchmark_encoder(encoder, data.kind, num_threads=threads)
    method_list, ratio_list = _split_list(methods), [float(r) for r in _split_list(ratios)]
    bar = task_progress()
    with bar:
        corpus = encode_corpus(data, model, cache_dir=cache_dir, progress=_Bar(bar))
        measured = run_retention(
            data, corpus, method_list, ratio_list, window=_parse_window(window), seed=seed
        )
    measured_at = time.perf_counter()
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(corpus.doc_ids), min(sample, len(corpus.doc_ids)), False))
    pseudo = cloze_queries([data.docs[corpus.doc_ids[i]] for i in picked], model, seed)
    result = estimate_pages(
        pseudo,
        method_list,
        ratio_list,
        n_layers=corpus.n_layers,
        encoder_name=corpus.model_id,
        neighbours=neighbours,
    )
    rows = compare(result, measured)
    order = same_order(rows)
    print_rows(rows, order, console)
    out = {
        "dataset": data.name,
        "encoder": corpus.model_id,
        "rows": rows,
        "same_order": order,
        "estimate": {
            "n_pages": result.n_pages,
            "n_queries": result.n_queries,
            "query_kind": result.query_kind,
            "neighbours": neighbours,
            "recommendation": result.recommend(),
        },
        "measured": {"n_queries": measured["n_queries"], "window": measured["window"]},
        "timing_s": {
            "measured": round(measured_at - started, 1),
            "total": round(time.perf_counter() - started, 1),
        },
    }
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(out, indent=2))
    console.print(f"wrote {json_out}")
    if plot is not None:
        from vrag_compress.bench.eval.plot import plot_estimate

        title = f"{data.name} · {corpus.model_id} · {result.n_queries} pseudo-queries"
        console.print(f"wrote {plot_estimate(rows, plot, title)}")
