"""`vrag bench encode`: pages/s and peak memory of real-size Col* encoders on this machine.

The architectures are built from their published configs with random weights
(`encode_archs`), so the cost is real without downloading any weights. Each batch size is
timed over the same synthetic A4 page (150 dpi); the process's resident-set high-water mark
(VmHWM, reset after the model is built) is the peak memory, weights included. The table also
shows process CPU seconds per page, which a machine shared with other jobs distorts less
than wall time (the JSON rows keep the fixed keys).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import typer

from vrag_compress.encoders.speedups import DTYPES, SPEEDUPS
from vrag_compress_bench.app import bench_app
from vrag_compress_bench.capture import _reset_peak, _rss_mb

ROW_KEYS = (
    "model",
    "params_m",
    "dtype",
    "batch",
    "capture",
    "pages_per_s",
    "peak_mb",
    "visual_tokens",
)


@bench_app.command("encode")
def bench_encode(
    arch: str = typer.Option(
        ..., "--arch", help="colqwen2, colpali, colsmol-256m, colsmol-500m or colmodernvbert"
    ),
    random_weights: bool = typer.Option(
        False,
        "--random-weights",
        help="Build the architecture from its published config with random weights (required: "
        "the cost does not depend on the weight values).",
    ),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 or bf16"),
    batch: list[int] = typer.Option(
        [1], "--batch", help="Pages per forward pass; repeat for several (--batch 1 --batch 2)."
    ),
    capture: bool = typer.Option(
        False, "--capture", help="Also capture the attention statistics SAP needs."
    ),
    pages: int | None = typer.Option(
        None, "--pages", min=1, help="Pages timed per batch size (default: one batch)."
    ),
    max_visual_tokens: int | None = typer.Option(
        None,
        "--max-visual-tokens",
        min=4,
        help="colqwen2 only: cap on visual tokens per page (the checkpoint's is 768).",
    ),
    threads: int | None = typer.Option(None, "--threads", min=1, help="torch CPU threads."),
    speedup: str = typer.Option(
        "none", "--speedup", help="CPU option: none or int8 (dynamic int8 linear layers)."
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the rows here (JSON list)."),
) -> None:
    """Pages/s and peak memory of a real-size encoder (random weights) on this CPU."""
    from vrag_compress_bench.encode_archs import ARCHS

    if arch not in ARCHS:
        raise typer.BadParameter(f"unknown arch {arch!r}; choose one of {sorted(ARCHS)}")
    if not random_weights:
        raise typer.BadParameter(
            "pass --random-weights: this benchmark builds the architecture from its published "
            "config (no weights are downloaded); cost does not depend on the weight values"
        )
    if dtype not in DTYPES:
        raise typer.BadParameter(f"--dtype must be fp32 or bf16, got {dtype!r}")
    if speedup not in SPEEDUPS:
        raise typer.BadParameter(f"--speedup must be one of {list(SPEEDUPS)}, got {speedup!r}")
    if speedup != "none" and dtype != "fp32":
        raise typer.BadParameter(f"--speedup {speedup} applies to --dtype fp32 models")
    if any(size < 1 for size in batch):
        raise typer.BadParameter(f"--batch sizes must be >= 1, got {batch}")
    try:
        rows, conditions = run_encode_bench(
            arch, dtype, batch, capture, pages, max_visual_tokens, threads, speedup
        )
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    _print_table(rows, conditions)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(rows, indent=2) + "\n")


def run_encode_bench(
    arch: str,
    dtype: str,
    batches: list[int],
    capture: bool,
    pages: int | None,
    max_visual_tokens: int | None,
    threads: int | None,
    speedup: str = "none",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Build ``arch`` once, then time each batch size; returns (rows, run conditions).

    The row's ``dtype`` names the speed option when one is used ("int8").
    """
    import numpy as np
    import torch
    from PIL import Image

    from vrag_compress.encoders.colpali import ColEncoder, detect_family_of_model
    from vrag_compress_bench.encode_archs import ARCHS, PAGE_SIZE

    if threads is not None:
        torch.set_num_threads(threads)
    spec = ARCHS[arch]
    torch.manual_seed(0)
    model, processor = spec.build(getattr(torch, DTYPES[dtype]), max_visual_tokens)
    family = detect_family_of_model(model)
    encoder = ColEncoder(
        model, processor, model_id=arch, family=family, device="cpu", speedup=speedup
    )
    params_m = sum(p.numel() for p in model.parameters()) / 1e6
    rng = np.random.default_rng(0)
    width, height = PAGE_SIZE
    page = Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8))
    label = dtype if speedup == "none" else speedup
    rows, cpu_seconds = [], []
    for size in batches:
        images = [page] * (pages or size)
        _reset_peak()
        start, cpu_start = time.perf_counter(), time.process_time()
        encodings = encoder.encode_pages(images, with_stats=capture, batch_size=size)
        seconds = time.perf_counter() - start
        cpu_seconds.append((time.process_time() - cpu_start) / len(images))
        rows.append(
            {
                "model": arch,
                "params_m": round(params_m, 1),
                "dtype": label,
                "batch": size,
                "capture": capture,
                "pages_per_s": len(images) / seconds,
                "peak_mb": round(_rss_mb("VmHWM"), 1),
                "visual_tokens": encodings[0].n_tokens,
            }
        )
    conditions = {
        "checkpoint": spec.checkpoint,
        "config_source": spec.config_source,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "page_px": list(PAGE_SIZE),
        "pages_per_batch_size": pages,
        "cpu_s_per_page": cpu_seconds,
    }
    return rows, conditions


def _print_table(rows: list[dict[str, Any]], conditions: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"encode: {rows[0]['model']} ({conditions['checkpoint']} architecture, random "
        f"weights), {rows[0]['params_m']:.0f}M params, {rows[0]['visual_tokens']} visual "
        "tokens/page"
    )
    for key in (*ROW_KEYS[2:], "cpu_s_per_page"):
        table.add_column(key, justify="right")
    for row, cpu in zip(rows, conditions["cpu_s_per_page"], strict=True):
        table.add_row(
            row["dtype"],
            str(row["batch"]),
            "yes" if row["capture"] else "no",
            f"{row['pages_per_s']:.4f}",
            f"{row['peak_mb']:.0f}",
            str(row["visual_tokens"]),
            f"{cpu:.1f}",
        )
    console = Console()
    console.print(table)
    console.print(
        f"{conditions['threads']} torch threads on {conditions['cpus']} CPUs, 1-min load "
        f"average {conditions['load_avg_1m']:.1f} at the end; peak = process VmHWM (weights "
        "included); cpu_s_per_page = process CPU time (all threads), less sensitive to other "
        "jobs than pages_per_s"
    )
