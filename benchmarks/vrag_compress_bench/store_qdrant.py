"""`vrag bench store --backend qdrant-local`: Qdrant prefetch + MaxSim rerank vs exact search.

For each candidate field (mean vector, binary-quantised multivector) and for Qdrant's own exact
scan, measures recall@10 against the embedded store's exact MaxSim and the median latency.
Qdrant's local mode is a pure-Python reimplementation (no HNSW, no SIMD): its latencies say
nothing about a Qdrant server's; the recalls are what the same fields give on a server up to
the server's HNSW approximation on the candidate field.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from vrag_compress_bench.paths import scratch_dir
from vrag_compress_bench.store_timing import add_all, timed_search

out = Console()
err = Console(stderr=True)


def run_qdrant_bench(
    data: dict[str, Any],
    dim: int,
    batch: int,
    variants: list[str],
    prefetch: int,
    workdir: Path | None,
    json_out: Path | None,
    config: dict[str, Any],
) -> dict[str, Any]:
    from vrag_compress.store import LocalStore
    from vrag_compress.store.qdrant.store import CANDIDATES, QdrantStore

    bad = [v for v in variants if v not in CANDIDATES or v == "none"]
    if bad:
        raise ValueError(f"unknown --variants {bad}; choose from mean, binary")
    root = scratch_dir("vrag-bench-qdrant-", workdir)
    store_config = {"dim": dim, "model_id": "synthetic/clustered"}
    qs = data["queries"]
    rows: dict[str, dict[str, Any]] = {}
    try:
        with LocalStore.create(root / "embedded", store_config) as local:
            add_all(local, data["compressed"], batch, "writing embedded store")
            truth, exact_ms = timed_search(local, qs, "exact", "embedded exact")
        rows["embedded exact"] = {"recall@10": 1.0, "latency_ms": round(exact_ms, 3)}
        for i, variant in enumerate(variants):
            url = f"qdrant+local://{root / 'qdrant'}?collection={variant}"
            with QdrantStore.create(
                url, store_config, candidate=variant, candidates=prefetch
            ) as store:
                t0 = time.perf_counter()
                add_s = add_all(store, data["compressed"], batch, f"writing qdrant ({variant})")
                wall = time.perf_counter() - t0
                got, ms = timed_search(store, qs, "two_stage", f"qdrant prefetch {variant}")
                rows[f"qdrant prefetch={variant}"] = {
                    "recall@10": _recall(truth, got),
                    "latency_ms": round(ms, 3),
                    "add_pages_per_s": round(len(data["compressed"]) / max(add_s, wall), 1),
                }
                if i == 0:
                    got, ms = timed_search(store, qs, "exact", "qdrant exact scan")
                    rows["qdrant exact scan"] = {
                        "recall@10": _recall(truth, got),
                        "latency_ms": round(ms, 3),
                    }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = {
        "backend": "qdrant-local",
        "results": rows,
        "config": config,
        "note": "Qdrant local mode is a Python reimplementation: latencies are not a "
        "server's; recall is against the embedded exact MaxSim.",
    }
    _print(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2))
        err.print(f"wrote {json_out}")
    return report


def _recall(truth: list[list[str]], got: list[list[str]]) -> float:
    return round(
        float(
            np.mean(
                [len(set(t) & set(g)) / max(1, len(t)) for t, g in zip(truth, got, strict=True)]
            )
        ),
        4,
    )


def _print(report: dict[str, Any]) -> None:
    cfg = report["config"]
    table = Table(
        title=f"vrag bench store --backend qdrant-local: {cfg['pages']} pages x "
        f"{cfg['tokens_compressed']} vectors, prefetch {cfg['prefetch']}"
    )
    for column in ("search", "recall@10", "median ms/query", "add pages/s"):
        table.add_column(column, justify="left" if column == "search" else "right")
    for name, row in report["results"].items():
        table.add_row(
            name,
            f"{row['recall@10']:.4f}",
            f"{row['latency_ms']:.2f}",
            str(row.get("add_pages_per_s", "")),
        )
    out.print(table)
    err.print(report["note"])
