"""`vrag bench compress`: time per page of every compression method on synthetic pages, next to
colpali-engine's pooler and the literal per-page UOT loop, all with the same thread count."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from vrag_compress.progress import task_progress
from vrag_compress_bench.app import bench_app

out = Console()
err = Console(stderr=True)

SLOW = {"cluster", "pool", "colpali-engine pooler", "uot literal loop"}


@bench_app.command("compress")
def bench_compress(
    tokens: int = typer.Option(1024, "--tokens", min=2, help="Visual tokens per page (N)."),
    dim: int = typer.Option(128, "--dim", min=2, help="Vector dimension (D)."),
    pages: int = typer.Option(256, "--pages", min=1, help="Pages for the fast methods."),
    slow_pages: int = typer.Option(
        16, "--slow-pages", min=1, help="Pages for the slow ones (cluster, pool, literal loop)."
    ),
    layers: int = typer.Option(28, "--layers", min=1, help="Decoder layers in the statistics."),
    ratio: float = typer.Option(0.1, "--ratio", help="Keep ratio gamma."),
    device: str = typer.Option("cpu", "--device", help="Device for UOT: cpu, cuda, ..."),
    threads: int = typer.Option(1, "--threads", min=1, help="Threads for torch and BLAS."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="UOT pages per batch."),
    seed: int = typer.Option(0, "--seed"),
    json_out: Path | None = typer.Option(None, "--json", help="Write the results as JSON here."),
) -> None:
    """ms/page of identity, sap, uot (fp32, bf16), random, eos, adaptive-eos, cluster, pool,
    colpali-engine's pooler and the literal UOT loop; checks the speed targets."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    with threadpool_limits(limits=threads):
        data = synthetic_pages(pages, tokens, dim, layers, seed)
        results, outputs = run_methods(data, slow_pages, ratio, device, batch_size)
    diff = uot_agreement(outputs)
    report = {
        "config": {
            "tokens": tokens,
            "dim": dim,
            "pages": pages,
            "slow_pages": min(slow_pages, pages),
            "layers": layers,
            "ratio": ratio,
            "k": int(np.ceil(ratio * tokens - 1e-9)),
            "device": device,
            "threads": threads,
            "batch_size": batch_size,
            "seed": seed,
        },
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
        },
        "methods": results,
        "uot_vs_literal": diff,
        "targets": targets(results, diff),
    }
    print_report(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2) + "\n")


def synthetic_pages(count: int, tokens: int, dim: int, layers: int, seed: int) -> list:
    """Random unit vectors with attention-like statistics (positive, heavy-tailed)."""
    from vrag_compress.encoders.base import PageEncoding

    rng = np.random.default_rng(seed)
    pages = []
    for _ in range(count):
        x = rng.standard_normal((tokens, dim)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        centrality = rng.lognormal(0.0, 1.0, (layers, tokens)).astype(np.float32)
        eos = rng.dirichlet(np.full(tokens, 0.5), layers).astype(np.float32)
        pages.append(PageEncoding(x, centrality=centrality, eos_attention=eos))
    return pages


def _timed(fn, items: list) -> tuple[float, Any]:
    fn(items[:1])  # warm-up: lazy imports, allocator, thread pools
    start = time.perf_counter()
    result = fn(items)
    return (time.perf_counter() - start) * 1000.0 / len(items), result


def _candidates(ratio: float, device: str, batch_size: int, pages: list) -> dict[str, Any]:
    """Every method at ``ratio``; SAP at the uncalibrated fallback window (timing only)."""
    from vrag_compress.compress import compressor_for, fallback_window

    n_layers = pages[0].centrality.shape[0]

    def build(name: str, **params: Any) -> Any:
        window = fallback_window(n_layers)
        return compressor_for(
            name, n_layers=n_layers, ratio=ratio, window=window, fit_pages=pages[:32], **params
        )

    uot = {"device": device, "batch_size": batch_size}
    return {
        "identity": build("identity"),
        "sap": build("sap"),
        "uot": build("uot", **uot),
        "uot-bf16": build("uot", precision="bf16", **uot),
        "random": build("random"),
        "eos": build("eos"),
        "adaptive-eos": build("adaptive-eos"),
        "cluster": build("cluster"),
        "pool": build("pool"),
    }


def run_methods(pages: list, slow_pages: int, ratio: float, device: str, batch_size: int):
    """Time every method; returns ({name: stats}, {name: outputs on the slow subset})."""
    slow = pages[:slow_pages]
    jobs = [
        (name, c.compress_many, c.name)
        for name, c in _candidates(ratio, device, batch_size, pages).items()
    ]
    jobs.insert(2, ("sap selection only", sap_selection_job(ratio), "sap"))
    jobs.append(("colpali-engine pooler", pooler_job(ratio), "pool"))
    jobs.append(("uot literal loop", literal_uot_job(ratio), "uot"))
    results: dict[str, dict] = {}
    outputs: dict[str, list] = {}
    with task_progress(err) as progress:
        task = progress.add_task("methods", total=len(jobs))
        for name, fn, method in jobs:
            progress.update(task, description=name)
            subset = slow if name in SLOW else pages
            ms, result = _timed(fn, subset)
            kept = [len(r.vectors) if hasattr(r, "vectors") else len(r) for r in result]
            results[name] = {
                "ms_per_page": ms,
                "pages": len(subset),
                "method": method,
                "mean_vectors": float(np.mean(kept)),
            }
            if name.startswith("uot"):
                outputs[name] = [r.vectors if hasattr(r, "vectors") else r for r in result]
                outputs[name] = outputs[name][: len(slow)]
            progress.advance(task)
        progress.update(task, description="uot literal loop, float64 (untimed)")
        outputs["uot literal fp64"] = literal_uot_job(ratio, "float64")(slow)
    return results, outputs


def sap_selection_job(ratio: float):
    """SAP's scoring and top-k alone (no input validation, no copy of the kept vectors)."""

    def run(pages: list) -> list:
        from vrag_compress.compress import budget, fallback_window
        from vrag_compress.compress.common import top_k_positions
        from vrag_compress.compress.sap import sap_scores

        rows = list(fallback_window(pages[0].centrality.shape[0]))
        stats = np.stack([page.centrality[rows] for page in pages])
        k = budget(pages[0].n_tokens, ratio)
        return list(top_k_positions(sap_scores(stats, range(len(rows))), k))

    return run


def pooler_job(ratio: float):
    """colpali-engine's HierarchicalTokenPooler called directly, as its users would."""

    def run(pages: list) -> list:
        import torch

        from vrag_compress.compress.baselines import _import_pooler

        pooler = _import_pooler()()
        tensors = [torch.from_numpy(p.vectors) for p in pages]
        return pooler.pool_embeddings(tensors, pool_factor=max(1, round(1 / ratio)))

    return run


def literal_uot_job(ratio: float, dtype: str = "float32"):
    """UOT one page at a time: k-means++ then the log-domain EM loop (`uot_reference`)."""

    def run(pages: list) -> list:
        import torch

        from vrag_compress.compress import budget, uot_reference
        from vrag_compress.compress.common import page_seed
        from vrag_compress.compress.uot import kmeanspp_init, kmeanspp_uniforms, source_marginal

        result = []
        for page in pages:
            k = budget(page.n_tokens, ratio)
            draws = torch.as_tensor(kmeanspp_uniforms(page_seed(0, page), k))[None]
            mask = torch.ones(1, page.n_tokens, dtype=torch.bool)
            init = kmeanspp_init(torch.from_numpy(page.vectors)[None], mask, k, draws)[0]
            x, start = page.vectors.astype(dtype), init.numpy().astype(dtype)
            y, _ = uot_reference(x, source_marginal(page), start, dtype=dtype)
            result.append(y)
        return result

    return run


def uot_agreement(outputs: dict[str, list]) -> dict[str, float]:
    """How close batched UOT is to the literal loop on the slow subset, next to how far the
    literal loop itself moves between float32 and float64 (the problem's rounding floor)."""
    literal, exact = outputs["uot literal loop"], outputs["uot literal fp64"]

    def diffs(name: str, against: list) -> np.ndarray:
        pairs = zip(outputs[name], against, strict=False)
        return np.array([np.abs(a - b).max() for a, b in pairs])

    fast = diffs("uot", literal)
    cosine = [
        np.sum(a * b, axis=1).mean() for a, b in zip(outputs["uot-bf16"], literal, strict=False)
    ]
    return {
        "fp32_max_abs_diff": float(fast.max()),
        "fp32_median_abs_diff": float(np.median(fast)),
        "fp32_pages_within_1e-4": float(np.mean(fast <= 1e-4)),
        "fp32_vs_fp64_max_abs_diff": float(diffs("uot", exact).max()),
        "literal_fp32_vs_fp64_max_abs_diff": float(diffs("uot literal loop", exact).max()),
        "bf16_max_abs_diff": float(diffs("uot-bf16", literal).max()),
        "bf16_mean_cosine": float(np.mean(cosine)),
    }


def targets(results: dict, diff: dict) -> dict[str, dict]:
    """The speed targets, each with value, goal and whether it was met."""
    ms = {name: r["ms_per_page"] for name, r in results.items()}
    literal, pooler = ms["uot literal loop"], ms["colpali-engine pooler"]
    rows = {
        "sap selection ms/page < 0.05": (ms["sap selection only"], ms["sap selection only"] < 0.05),
        "sap ms/page (validation + copy included) < 0.05": (ms["sap"], ms["sap"] < 0.05),
        "uot fp32 equals literal (max abs diff <= 1e-4)": (
            diff["fp32_max_abs_diff"],
            diff["fp32_max_abs_diff"] <= 1e-4,
        ),
        "uot fp32 speed-up vs literal loop >= 2x": (literal / ms["uot"], literal / ms["uot"] >= 2),
        "uot fp32 speed-up vs colpali-engine pooler >= 8x": (
            pooler / ms["uot"],
            pooler / ms["uot"] >= 8,
        ),
        "uot bf16 speed-up vs literal loop >= 4x": (
            literal / ms["uot-bf16"],
            literal / ms["uot-bf16"] >= 4,
        ),
    }
    return {name: {"value": float(value), "met": bool(met)} for name, (value, met) in rows.items()}


def print_report(report: dict) -> None:
    cfg = report["config"]
    table = Table(
        title=f"compression, N={cfg['tokens']} D={cfg['dim']} γ={cfg['ratio']} "
        f"(k={cfg['k']}), {cfg['threads']} thread(s), UOT on {cfg['device']}"
    )
    table.add_column("method")
    table.add_column("ms/page", justify="right")
    table.add_column("pages", justify="right")
    table.add_column("vectors/page", justify="right")
    for name, row in report["methods"].items():
        table.add_row(
            name, f"{row['ms_per_page']:.4f}", str(row["pages"]), f"{row['mean_vectors']:.1f}"
        )
    out.print(table)
    agreement = Table(title="UOT vs the literal loop (slow subset)")
    agreement.add_column("measure")
    agreement.add_column("value", justify="right")
    for name, value in report["uot_vs_literal"].items():
        agreement.add_row(name, f"{value:.3g}")
    out.print(agreement)
    checks = Table(title="targets")
    checks.add_column("target")
    checks.add_column("value", justify="right")
    checks.add_column("met")
    for name, row in report["targets"].items():
        checks.add_row(name, f"{row['value']:.4g}", "yes" if row["met"] else "[red]no[/]")
    out.print(checks)
