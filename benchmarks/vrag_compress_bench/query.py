"""`vrag bench query STORE`: time searches on a store that already exists (one kept by
`vrag bench store --keep-store`, or your own), so two versions of the code, two thread counts
or two stores can be compared without building anything again.

Queries are the real ones of a BEIR corpus (``--data real``: its MiniLM token vectors, as
`vrag bench store --data real` uses, for stores that benchmark built) or pseudo-queries cut
from the store's own pages (``--data pages``: any store, no model). Reports the open time, the
first answer, p50/p95 per thread count and, with ``--recall``, recall@10 against exact search.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from vrag_compress_bench.app import bench_app
from vrag_compress_bench.store_timing import peak_rss_mb, search_times

out = Console()


@bench_app.command("query")
def bench_query(
    store_path: Path = typer.Argument(..., help="A store folder (vrag bench store --keep-store)."),
    queries: int = typer.Option(100, "--queries", min=1, help="Queries timed."),
    data: str = typer.Option(
        "pages", "--data", help="pages: pseudo-queries from the store's pages; real: a corpus's."
    ),
    source_dataset: Path | None = typer.Option(
        None, "--source-dataset", help="--data real: BEIR folder [the shared Cranfield]."
    ),
    threads: str = typer.Option("2", "--threads", help="Thread counts to time, e.g. 1,2."),
    mode: str = typer.Option("two_stage", "--mode", help="auto, exact or two_stage."),
    recall: bool = typer.Option(False, "--recall", help="Also recall@10 against exact search."),
    seed: int = typer.Option(0, "--seed"),
    json_out: Path | None = typer.Option(None, "--json", help="Write the results as JSON here."),
) -> None:
    """p50/p95 of searches on an existing store, per thread count, and its first answer (open
    + one search in this process; with --data pages, reading the queries from the store has
    already loaded the compiled decoder and warmed the page cache)."""
    from vrag_compress.store import LocalStore
    from vrag_compress.store.local.catalog import CATALOG_NAME
    from vrag_compress.store.validate import check_mode
    from vrag_compress_bench.store import _thread_counts

    counts = _thread_counts(threads)
    try:
        check_mode(mode)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--mode") from None
    if not (store_path / CATALOG_NAME).is_file():
        raise typer.BadParameter(f"{store_path} is not a store folder", param_hint="STORE_PATH")
    report: dict[str, Any] = {"store": str(store_path), "mode": mode, "data": data}
    store: Any
    with LocalStore.open(store_path, readonly=True) as store:  # the queries, before timing
        qs = _queries(store, data, source_dataset, queries, seed)
        report["pages"] = store.count()
    began = time.perf_counter()
    with LocalStore.open(store_path, readonly=True, threads=counts[0]) as store:
        report["open_s"] = round(time.perf_counter() - began, 3)
        store.search(qs[0], k=10, mode=mode)
        report["first_query_s"] = round(time.perf_counter() - began, 3)
    report["latency_ms_by_threads"] = {}
    for n in counts:
        with LocalStore.open(store_path, readonly=True, threads=n) as store:
            store.search(qs[0], k=10, mode=mode)  # warm: what is mapped and compiled
            ids, times = search_times(store, qs, mode, f"{mode} search, {n} threads")
            report["latency_ms_by_threads"][str(n)] = {
                "p50": round(float(np.percentile(times, 50)), 3),
                "p95": round(float(np.percentile(times, 95)), 3),
            }
            if recall and n == counts[0]:
                exact = store.search_many(qs, k=10, mode="exact")
                found = [set(i) for i in ids]
                shares = [
                    len(f & {h.page_id for h in e}) / 10 for f, e in zip(found, exact, strict=True)
                ]
                report["recall@10"] = round(float(np.mean(shares)), 4)
    report["queries"] = len(qs)
    report["peak_rss_mb"] = round(peak_rss_mb(), 1)
    _print(report)
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2))


def _queries(store: Any, data: str, source: Path | None, n: int, seed: int) -> list[np.ndarray]:
    if data == "real":
        from vrag_compress_bench.real_pages import load_pool, queries
        from vrag_compress_bench.store import _default_cache, _real_source

        pool = load_pool(_real_source(source), store.config["dim"], _default_cache(), seed=seed)
        return queries(pool, n)
    if data != "pages":
        raise typer.BadParameter("use pages or real", param_hint="--data")
    from vrag_compress.scoring.packed import pack_pages
    from vrag_compress.store.candidates.tuning import pseudo_queries

    ids = store.page_ids()
    picked = np.random.default_rng(seed).choice(len(ids), size=min(n, len(ids)), replace=False)
    tokens, bounds = pack_pages([r.vectors for r in store.get([ids[i] for i in picked])])
    _, qs = pseudo_queries(tokens, bounds, n, seed=seed)
    return qs


def _print(report: dict[str, Any]) -> None:
    table = Table(title=f"vrag bench query: {report['pages']:,} pages, {report['mode']}")
    table.add_column("threads")
    table.add_column("p50 ms", justify="right")
    table.add_column("p95 ms", justify="right")
    for n, lat in report["latency_ms_by_threads"].items():
        table.add_row(n, f"{lat['p50']:.1f}", f"{lat['p95']:.1f}")
    out.print(table)
    extra = f", recall@10 {report['recall@10']}" if "recall@10" in report else ""
    out.print(f"open {report['open_s']} s, first answer {report['first_query_s']} s{extra}")
