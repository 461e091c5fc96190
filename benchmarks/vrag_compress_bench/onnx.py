"""`vrag bench onnx`: the exported ONNX query path against torch, on one index, in one run.

Measured per backend: a fresh process that opens the index and answers one query, end to end
(`first_query_s`: what a `vrag search` user waits for), and the query-encoding latency in a warm
process. Agreement: the top-k pages of each query under both backends (`overlap@10`) and the
largest score difference over the hits both return.

``--arch colsmol-256m --random-weights`` measures a real-size Col* model without downloading
weights: the architecture is built from its published config with random weights (as `vrag bench
encode` does) and saved under ``--work``; its index holds Cranfield documents as pages, each
encoded through the same model's torch text path (encoding real page images takes minutes per
page on a CPU, and the query path, which is what this measures, is the same either way); the
model is then exported with `vrag export-onnx`, and both backends answer the same questions.
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

from vrag_compress.shared_data import data_dir
from vrag_compress_bench.app import bench_app

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
            if backend == "onnx" and not type(encoder).__name__.startswith("Onnx"):
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


def arch_index(arch: str, work: Path, n_pages: int) -> tuple[Path, dict[str, Any]]:
    """A real-size random-weight `arch` saved under `work`, an index of Cranfield documents
    encoded by it, and its ONNX export (each step reused when already there)."""
    from vrag_compress.beir import load_beir
    from vrag_compress.encoders.onnx_query import has_export

    model, index = work / "model", work / "index"
    if not (model / "config.json").is_file():
        save_random_arch(arch, model)
    if not index.is_dir():
        docs = dict(list(load_beir(data_dir() / "cranfield").docs.items())[:n_pages])
        text_index(model, docs, index)
    export: dict[str, Any] = {"reused": True}
    if not has_export(str(model)):
        done = subprocess.run(
            [sys.executable, "-m", "vrag_compress", "export-onnx", str(index), "--json"],
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            check=True,
            capture_output=True,
            text=True,
        )
        export = json.loads(done.stdout)
    return index, export


def text_index(model: Path, docs: dict[str, str], out: Path) -> None:
    """An index of `model` whose pages are `docs`, each encoded by the model's torch text path
    (its first 48 words); the model is freed on return, before the export loads it again."""
    from vrag_compress import VisualIndex

    texts = [" ".join(text.split()[:48]) for text in docs.values()]
    ids = [f"cranfield-{doc_id}" for doc_id in docs]
    staging = out.with_name(out.name + ".partial")
    with VisualIndex.create(staging, model=str(model), compressor="identity", device="cpu") as ix:
        vectors = ix.encoder.encode_queries(texts)
        ix.upsert_vectors(vectors, page_ids=ids, doc_ids=ids, texts=texts)
    staging.rename(out)


def save_random_arch(arch: str, out: Path) -> None:
    """Build `arch` (`bench.encode_archs`) with seed-0 random weights and save model + processor."""
    import torch

    from vrag_compress_bench.encode_archs import ARCHS

    if arch not in ARCHS:
        raise typer.BadParameter(f"unknown arch {arch!r}; choose one of {sorted(ARCHS)}")
    torch.manual_seed(0)
    model, processor = ARCHS[arch].build(torch.float32, None)
    staging = out.with_name(out.name + ".partial")
    model.save_pretrained(staging)
    processor.save_pretrained(staging)
    staging.rename(out)


@bench_app.command("onnx")
def onnx(
    index: Path | None = typer.Option(None, "--index", help="an index whose model has an export"),
    arch: str | None = typer.Option(
        None, "--arch", help="or a real-size Col* architecture (colsmol-256m, ...), random weights"
    ),
    random_weights: bool = typer.Option(False, "--random-weights", help="required with --arch"),
    work: Path = typer.Option(
        Path("/tmp/vrag-bench-onnx"), "--work", help="--arch: where model, index and cache go"
    ),
    n_pages: int = typer.Option(100, "--pages", min=10, help="--arch: Cranfield documents"),
    n_queries: int = typer.Option(50, "--queries", min=1, help="real Cranfield questions"),
    k: int = typer.Option(10, "-k", min=1, help="hits compared per query"),
    starts: int = typer.Option(3, min=1, help="fresh processes timed per backend"),
    json_out: Path | None = typer.Option(None, "--json", help="also write the results here"),
) -> None:
    """Time ONNX against torch query encoding (fresh process and warm) and check agreement."""
    from rich.console import Console

    from vrag_compress.beir import load_beir

    if (index is None) == (arch is None):
        raise typer.BadParameter("give --index or --arch (not both)")
    result: dict[str, Any] = {}
    if arch is not None:
        if not random_weights:
            raise typer.BadParameter(
                "pass --random-weights: --arch builds the architecture from its published "
                "config (no weights are downloaded); query cost does not depend on their values"
            )
        work = work / arch
        work.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("VRAG_CACHE_DIR", str(work / "cache"))
        index, export = arch_index(arch, work, n_pages)
        result |= {"arch": arch, "random_weights": True, "pages": n_pages, "export": export}
    assert index is not None
    queries = list(load_beir(data_dir() / "cranfield").queries.values())[:n_queries]
    result |= {"index": str(index), "queries": len(queries), "k": k}
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
