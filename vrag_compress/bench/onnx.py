"""`vrag bench onnx`: the exported ONNX query path against torch, on one index, in one run.

Measured per backend: a fresh process that opens the index and answers one query, end to end
(`first_query_s`: what a `vrag search` user waits for), and the query-encoding latency in a warm
process. Agreement: the top-k pages of each query under both backends (`overlap@10`) and the
largest score difference over the hits both return.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer

from vrag_compress.bench.app import bench_app
from vrag_compress.bench.paths import data_dir

BACKENDS = ("onnx", "torch")


def first_query_seconds(index: Path, query: str, backend: str) -> float:
    """Wall time of a fresh Python process that opens `index` and answers `query`."""
    code = (
        "from vrag_compress import VisualIndex\n"
        f"with VisualIndex.open({str(index)!r}, readonly=True) as ix:\n"
        f"    ix.search({query!r}, k=10)\n"
    )
    env = {**os.environ, "VRAG_QUERY_BACKEND": backend, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def warm_run(index: Path, queries: list[str], backend: str, k: int) -> dict[str, Any]:
    """Encoding latency per query and the ranked hits, in this process."""
    from vrag_compress import VisualIndex

    previous = os.environ.get("VRAG_QUERY_BACKEND")
    os.environ["VRAG_QUERY_BACKEND"] = backend
    try:
        with VisualIndex.open(index, readonly=True) as ix:
            encoder = ix.query_encoder
            if backend == "onnx" and type(encoder).__name__ != "OnnxTextQueryEncoder":
                raise typer.BadParameter(
                    f"{index} (model {ix.model_id}) has no ONNX query export: run "
                    f"`vrag export-onnx {index}` first",
                    param_hint="--index",
                )
            encoder.encode_queries(queries[:1])  # warm-up
            times, hits = [], []
            for query in queries:
                started = time.perf_counter()
                encoder.encode_queries([query])
                times.append((time.perf_counter() - started) * 1000)
                hits.append({h.page_id: h.score for h in ix.search(query, k=k)})
    finally:
        if previous is None:
            os.environ.pop("VRAG_QUERY_BACKEND", None)
        else:
            os.environ["VRAG_QUERY_BACKEND"] = previous
    ordered = sorted(times)
    return {
        "encode_p50_ms": round(statistics.median(times), 2),
        "encode_p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
        "hits": hits,
    }


def agreement(a: list[dict[str, float]], b: list[dict[str, float]], k: int) -> dict[str, float]:
    pairs = list(zip(a, b, strict=True))
    overlap = [len(set(x) & set(y)) / max(1, min(k, len(x), len(y))) for x, y in pairs]
    diffs = [abs(x[p] - y[p]) for x, y in pairs for p in set(x) & set(y)]
    return {
        f"overlap@{k}": round(statistics.mean(overlap), 4),
        "max_score_diff": float(max(diffs, default=0.0)),
    }


@bench_app.command("onnx")
def onnx(
    index: Path = typer.Option(..., "--index", help="an index of a text model with an export"),
    n_queries: int = typer.Option(50, "--queries", min=1, help="real Cranfield questions"),
    k: int = typer.Option(10, "-k", min=1, help="hits compared per query"),
    starts: int = typer.Option(3, min=1, help="fresh processes timed per backend"),
    json_out: Path | None = typer.Option(None, "--json", help="also write the results here"),
) -> None:
    """Time ONNX against torch query encoding (fresh process and warm) and check agreement."""
    from rich.console import Console

    from vrag_compress.beir import load_beir

    queries = list(load_beir(data_dir() / "cranfield").queries.values())[:n_queries]
    result: dict[str, Any] = {"index": str(index), "queries": len(queries), "k": k}
    for backend in BACKENDS:
        warm = warm_run(index, queries, backend, k)
        cold = [first_query_seconds(index, queries[0], backend) for _ in range(starts)]
        result[backend] = {
            "first_query_s": round(statistics.median(cold), 3),
            "encode_p50_ms": warm["encode_p50_ms"],
            "encode_p95_ms": warm["encode_p95_ms"],
        }
        result[f"_{backend}_hits"] = warm["hits"]
    result.update(agreement(result.pop("_onnx_hits"), result.pop("_torch_hits"), k))
    Console().print_json(json.dumps(result))
    if json_out:
        json_out.write_text(json.dumps(result, indent=2))
