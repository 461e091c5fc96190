"""`vrag bench retention`: how much retrieval quality each compression method keeps."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import typer

from vrag_compress_bench.app import bench_app


def _split_list(text: str) -> list[str]:
    return [item for item in re.split(r"[,\s]+", text.strip()) if item]


def _parse_ratios(text: str) -> list[float]:
    try:
        return [float(v) for v in _split_list(text)]
    except ValueError as exc:
        raise typer.BadParameter(f"--ratios must be numbers like '0.5,0.25', got {text!r}") from exc


def _parse_codes(text: str) -> list[str]:
    items = _split_list(text)
    bad = [c for c in items if c not in ("fp16", "4bit", "2bit", "1bit")]
    if bad or not items:
        raise typer.BadParameter(f"--codes takes fp16, 4bit, 2bit, 1bit; got {text!r}")
    return items


def _parse_window(text: str) -> list[int] | str:
    if text.strip() == "auto":
        return "auto"
    try:
        return [int(v) for v in _split_list(text)]
    except ValueError as exc:
        raise typer.BadParameter(
            f"--window must be 'auto' or layers like '3,4', got {text!r}"
        ) from exc


class _Bar:
    """The runner's progress callback on a rich progress bar (one task per stage)."""

    def __init__(self, progress) -> None:  # noqa: ANN001
        self.progress = progress
        self.tasks: dict[str, int] = {}

    def __call__(self, stage: str, n: int) -> None:
        if stage.startswith("start:"):
            name = stage.removeprefix("start:")
            self.tasks[name] = self.progress.add_task(name, total=n)
        else:
            self.progress.advance(self.tasks[stage], n)


def _versus_fixed(versus: dict | None) -> str:
    """An adaptive row's difference from its fixed twin, with the paired 90% interval."""
    if not versus:
        return ""
    return f"{versus['difference']:+.3f} ({versus['low']:+.3f}, {versus['high']:+.3f})"


def print_table(result: dict, console) -> None:  # noqa: ANN001
    from rich.table import Table

    full = result["full"]
    table = Table(
        title=f"retention · {result['dataset']} · {result['encoder']} · "
        f"{result['n_queries']} queries · {result['n_docs']} docs · window {result['window']}"
    )
    with_codes = any("codes" in row for row in result["results"])
    cols = ["method", "ratio", "tokens/doc", "NDCG@10", "NDCG@5", "R@1", "retention@10", "SR"]
    if with_codes:
        cols[1:1] = ["codes"]
        cols.append("size/fp16 full")
    with_budgets = any("vs_fixed" in row for row in result["results"])
    if with_budgets:
        cols.append("vs fixed (90%)")
    for col in cols:
        table.add_column(col, justify="left" if col == "method" else "right")
    first = ["uncompressed", "fp16", "1"] if with_codes else ["uncompressed", "1"]
    table.add_row(
        *first,
        f"{result['tokens_per_doc_full']:.1f}",
        f"{full['ndcg@10']:.4f}",
        f"{full['ndcg@5']:.4f}",
        f"{full['recall@1']:.4f}",
        "1.000",
        "1.000",
        *(["1.000"] if with_codes else []),
        *([""] if with_budgets else []),
    )
    for row in result["results"]:
        head = [row["method"], row.get("codes", "fp16")] if with_codes else [row["method"]]
        table.add_row(
            *head,
            f"{row['ratio']:g}",
            f"{row['tokens_per_doc']:.1f}",
            f"{row['ndcg@10']:.4f}",
            f"{row['ndcg@5']:.4f}",
            f"{row['recall@1']:.4f}",
            f"{row['retention@10']:.3f}",
            f"{row['sr']:.3f}",
            *([f"1/{1 / row['size_vs_fp16_full']:.0f}"] if with_codes else []),
            *([_versus_fixed(row.get("vs_fixed"))] if with_budgets else []),
        )
    console.print(table)


@bench_app.command("retention")
def retention(
    dataset: str = typer.Option(..., help="BEIR folder (text or image corpus) or a hub dataset id"),
    encoder: str = typer.Option(
        "minilm", help="text: 'minilm' or an HF encoder folder; images: a Col* model or tiny name"
    ),
    methods: str = typer.Option(
        "sap uot random eos adaptive-eos cluster pool",
        help="methods, space/comma separated; parameters as name:key=value:key=value",
    ),
    ratios: str = typer.Option("0.5 0.25 0.1 0.05", help="keep ratios, space/comma separated"),
    window: str = typer.Option("auto", help="SAP layer window: 'auto' (SR-guided) or layers"),
    limit_queries: int | None = typer.Option(None, help="evaluate only the first N queries"),
    calibration_queries: int | None = typer.Option(
        None, help="queries held out for --window auto (default 20%, at most 500; 0 = none)"
    ),
    json_out: Path = typer.Option(..., "--json", help="write the results here"),
    plot: Path | None = typer.Option(None, help="retention-vs-ratio plot (PNG)"),
    sr_plot: Path | None = typer.Option(None, help="per-layer SR curve plot (PNG, --window auto)"),
    kept_tokens: bool = typer.Option(
        False, help="text corpora: report which tokens each pruning method keeps (in the JSON)"
    ),
    cache_dir: Path | None = typer.Option(None, help="reuse corpus encodings across runs"),
    codes: str = typer.Option(
        "fp16",
        help="how compressed vectors are stored when scored: fp16, 4bit, 2bit, 1bit (centroid + "
        "residual codes, decoded), space/comma separated",
    ),
    threads: int = typer.Option(2, help="torch CPU threads"),
    seed: int = typer.Option(0, help="seed of the calibration split"),
    mode: str = typer.Option(
        "visual",
        help="visual (MaxSim of each method); hybrid (also BM25 over the text corpus and its "
        "fusion with the uncompressed and every compressed ranking: RRF and an alpha sweep)",
    ),
    hybrid_plot: Path | None = typer.Option(
        None, help="--mode hybrid: NDCG@10 against alpha, with BM25 / visual / RRF (PNG)"
    ),
) -> None:
    """Encode the corpus once, compress it with every method and ratio, score exact MaxSim."""
    if mode not in ("visual", "hybrid"):
        raise typer.BadParameter(f"--mode must be visual or hybrid, got {mode!r}")
    code_list = _parse_codes(codes)  # before the corpus is encoded: a bad list fails at once
    import torch
    from rich.console import Console

    from vrag_compress.progress import task_progress
    from vrag_compress_bench.eval.analysis import kept_token_report
    from vrag_compress_bench.eval.plot import plot_retention, plot_sr_curve
    from vrag_compress_bench.eval.runner import encode_corpus, load_benchmark_encoder, run_retention
    from vrag_compress_bench.paths import load_dataset_option

    torch.set_num_threads(threads)
    console = Console()
    if not console.is_terminal:  # logs and pipes: do not squeeze the table to 80 columns
        console = Console(width=120)
    started = time.perf_counter()
    data = load_dataset_option(dataset)
    if mode == "hybrid" and data.kind != "text":
        raise typer.BadParameter(
            f"--mode hybrid needs a text corpus (BM25 over its documents); {dataset} holds images"
        )
    options = {"num_threads": threads} if data.kind == "text" else {}
    model = load_benchmark_encoder(encoder, data.kind, **options)
    reports: dict[str, dict] = {}
    tokens = None
    bar = task_progress()
    with bar:
        corpus = encode_corpus(data, model, cache_dir=cache_dir, progress=_Bar(bar))
        encoded_at = time.perf_counter()
        if kept_tokens and data.kind == "text":
            tokens = model.document_tokens([data.docs[d] for d in corpus.doc_ids])

        rankings: dict[str, Any] = {}
        evaluated: list[str] = []

        def keep_scores(name: str, scored: Any, query_ids: list[str]) -> None:
            rankings[name] = scored.scores
            evaluated[:] = query_ids

        def inspect(label: str, ratio: float, compressed: list) -> None:
            report = kept_token_report(tokens, compressed) if tokens is not None else None
            if report is not None:
                reports[f"{label}@{ratio:g}"] = report

        result = run_retention(
            data,
            corpus,
            _split_list(methods),
            _parse_ratios(ratios),
            window=_parse_window(window),
            limit_queries=limit_queries,
            calibration_queries=calibration_queries,
            seed=seed,
            progress=_Bar(bar),
            keep_kept=inspect,
            codes=code_list,
            keep_scores=keep_scores if mode == "hybrid" else None,
        )
    result["timing_s"] = {
        "encode": round(encoded_at - started, 1),
        "total": round(time.perf_counter() - started, 1),
    }
    result["skipped_docs"] = data.empty_docs()
    if reports:
        result["kept_tokens"] = reports
    if mode == "hybrid":
        from vrag_compress_bench.eval.hybrid import print_hybrid_table, run_hybrid

        qrels = {q: data.qrels[q] for q in evaluated}
        result["hybrid"] = run_hybrid(data, corpus.doc_ids, evaluated, qrels, rankings)
        result["timing_s"]["total"] = round(time.perf_counter() - started, 1)
    print_table(result, console)
    if mode == "hybrid":
        print_hybrid_table(result, console)
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(result, indent=2))
    console.print(f"wrote {json_out}")
    if plot is not None:
        console.print(f"wrote {plot_retention(result, plot)}")
    if hybrid_plot is not None and "hybrid" in result:
        from vrag_compress_bench.eval.hybrid import plot_hybrid

        console.print(f"wrote {plot_hybrid(result, hybrid_plot)}")
    curve = result["calibration"]["sr_curve"]
    if sr_plot is not None and curve:
        title = f"SR per layer · {result['encoder']} · {result['dataset']}"
        console.print(f"wrote {plot_sr_curve(curve, result['window'], sr_plot, title)}")
