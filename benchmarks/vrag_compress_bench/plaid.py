"""`vrag bench plaid`: fast-plaid and our store side by side on the same vectors, in one run.

The pages and queries are `vrag bench store`'s (``--data real``: resampled MiniLM token vectors
of a corpus and its real queries; ``skewed``; ``synthetic``). Our store is built and searched
here; fast-plaid runs in a subprocess under its own Python (``--python``: a virtual
environment with fast-plaid and the torch it pins, never imported into ours), which reads the
same vectors from an exchange folder (`write_exchange`) and writes back its build time, its
per-query latencies and each query's top 10 (`read_results`, run by `plaid_runner`). Recall@10
of both is measured against one reference: our store's exact search over the same fp16 vectors.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from vrag_compress_bench.app import bench_app
from vrag_compress_bench.paths import scratch_dir
from vrag_compress_bench.plaid_exchange import (
    RUNNER,
    _positions,
    read_results,
    recall_at_10,
    write_exchange,
)
from vrag_compress_bench.store_timing import add_all, timed_search

out = Console()
err = Console(stderr=True)


@bench_app.command("plaid")
def bench_plaid(
    python: Path = typer.Option(
        ...,
        "--python",
        help="Python of a virtual environment with fast-plaid (e.g. /tmp/fastplaid/bin/python "
        "after `pip install torch==2.11.0 fast-plaid==1.7.0.2110`).",
    ),
    pages: int = typer.Option(2000, "--pages", min=10, help="Pages in the collection."),
    tokens_full: int = typer.Option(1030, "--tokens-full", min=2, help="Vectors per full page."),
    ratio: float = typer.Option(0.1, "--ratio", help="Keep ratio of the compressed pages."),
    queries: int = typer.Option(200, "--queries", min=1, help="Queries timed and scored."),
    data_kind: str = typer.Option("real", "--data", help="real, skewed or synthetic."),
    source_dataset: Path | None = typer.Option(
        None, "--source-dataset", help="--data real: BEIR folder or folder of PDFs [Cranfield]."
    ),
    threads: int = typer.Option(2, "--threads", min=1, help="Threads for both engines."),
    nbits: int = typer.Option(4, "--nbits", help="fast-plaid's residual bits (its default 4)."),
    codes: str = typer.Option(
        "none", "--codes", help="Our residual codes: none, 4bit, 2bit, 1bit."
    ),
    fp16: bool = typer.Option(True, "--fp16/--no-fp16", help="Our store keeps fp16 vectors."),
    seed: int = typer.Option(0, "--seed"),
    workdir: Path | None = typer.Option(None, "--dir", help="Where to build both [tmp]."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the results as JSON here."),
) -> None:
    """Recall@10 against the same exact reference, p50 latency, build time and bytes/page of
    our store (two-stage search) and of fast-plaid (CPU), on the same vectors."""
    from threadpoolctl import threadpool_limits

    from vrag_compress.compress.base import budget
    from vrag_compress_bench.store import _generate, _pool, _set_threads

    if not python.is_file():
        raise typer.BadParameter(f"{python}: no such Python", param_hint="--python")
    if nbits not in (1, 2, 4, 8):
        raise typer.BadParameter("use 1, 2, 4 or 8", param_hint="--nbits")
    if not fp16 and codes == "none":
        raise typer.BadParameter("needs --codes 4bit, 2bit or 1bit", param_hint="--no-fp16")
    pool, source = _pool(data_kind, source_dataset, 128, 1.0, None, seed)
    k_tokens = budget(tokens_full, ratio)
    root = scratch_dir("vrag-bench-plaid-", workdir)
    try:
        with threadpool_limits(limits=threads):
            _set_threads(threads)
            data = _generate(pages, tokens_full, k_tokens, 128, queries, 20, 256, False, 0, pool)
            qs = data["queries"]
            ours, exact = _ours(root / "ours", data["compressed"], qs, threads, codes, fp16)
        write_exchange(root / "exchange", data["compressed"], qs, threads=threads, nbits=nbits)
        err.print("fast-plaid: building and searching in its own Python ...")
        done = subprocess.run(
            [str(python), str(RUNNER), str(root / "exchange")],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"fast-plaid's run failed: {done.stderr.strip()[-2000:]}")
        plaid = read_results(root / "exchange", len(qs), pages)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ours["recall@10"] = recall_at_10(exact, ours.pop("top"))
    report = {
        "pages": pages,
        "ours": ours,
        "fast_plaid": {
            "build_s": round(plaid["build_s"], 3),
            "p50_ms": round(float(np.median(plaid["latency_ms"])), 3),
            "bytes_per_page": round(plaid["index_bytes"] / pages, 1),
            "recall@10": recall_at_10(exact, plaid["top"]),
            "versions": plaid["versions"],
            "settings": plaid["settings"],
        },
        "config": {
            "pages": pages,
            "tokens_compressed": k_tokens,
            "queries": len(qs),
            "data": data_kind,
            "source_dataset": None if source is None else str(source),
            "threads": threads,
            "codes": codes,
            "fp16": fp16,
            "seed": seed,
        },
        "reference": "our store's exact MaxSim over the same fp16 vectors",
        "load_avg": list(os.getloadavg()),
    }
    _print(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2))
        err.print(f"wrote {json_out}")


def _ours(
    path: Path, compressed: Any, qs: list[np.ndarray], threads: int, codes: str, fp16: bool
) -> tuple[dict[str, Any], list[list[int]]]:
    """Our store built from the pages (add + candidate index, timed together as the build),
    its two-stage answers and median latency, and the exact reference (page positions)."""
    from vrag_compress.store import LocalStore
    from vrag_compress_bench.store import _dir_mb

    config: dict[str, Any] = {"dim": 128, "model_id": "synthetic/clustered", "codes": codes}
    if not fp16:
        config["fp16"] = False
    options: dict[str, Any] = {"segment_max_bytes": 1 << 40, "centroid_min_tokens": -1}
    options["codes_min_tokens"] = 0
    t0 = time.perf_counter()
    with LocalStore.create(path, config, **options) as store:
        add_all(store, compressed, 256, "writing our store")
        store.optimize()
    build_s = time.perf_counter() - t0
    n_pages = len(compressed)
    with LocalStore.open(path, readonly=True, threads=threads) as store:
        two, two_ms = timed_search(store, qs, "two_stage", "ours: two-stage search")
        exact = [[h.page_id for h in hits] for hits in store.search_many(qs, 10, mode="exact")]
        params = {k: (store.index_info() or {}).get(k) for k in ("k", "nprobe", "rerank")}
    ours = {
        "build_s": round(build_s, 3),
        "p50_ms": round(two_ms, 3),
        "bytes_per_page": round(_dir_mb(path) * 2**20 / n_pages, 1),
        "params": params,
        "top": [_positions(ids) for ids in two],
    }
    return ours, [_positions(ids) for ids in exact]


def _print(report: dict[str, Any]) -> None:
    table = Table(title=f"vrag bench plaid: {report['pages']} pages, same vectors")
    for column in ("engine", "recall@10", "p50 ms", "build s", "bytes/page"):
        table.add_column(column, justify="right" if column != "engine" else "left")
    for name, key in (("vrag (two-stage)", "ours"), ("fast-plaid (CPU)", "fast_plaid")):
        r = report[key]
        table.add_row(
            name,
            f"{r['recall@10']:.4f}",
            f"{r['p50_ms']:.1f}",
            f"{r['build_s']:.1f}",
            f"{r['bytes_per_page']:.0f}",
        )
    out.print(table)
