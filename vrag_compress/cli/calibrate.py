"""`vrag calibrate`: choose SAP's layer window for a model from unlabeled (page, query) pairs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from vrag_compress.cli.app import app
from vrag_compress.cli.options import check_plot_path, check_ratio, check_writable
from vrag_compress.ingest import display_path
from vrag_compress.progress import task_progress

out = Console()
err = Console(stderr=True, soft_wrap=True)  # messages keep whole paths on one line


@app.command("calibrate")
def calibrate(
    data: Path = typer.Argument(
        ...,
        help="BEIR folder (corpus.jsonl with images, queries.jsonl, qrels.tsv) or a JSONL "
        'file of {"image": path, "query": text}.',
    ),
    model: str = typer.Option(..., "--model", help="Model id, local folder or tiny-* name."),
    pairs: int = typer.Option(500, "--pairs", min=1, help="Use at most this many pairs."),
    ratio: float = typer.Option(0.1, "--ratio", help="Keep ratio gamma_cal for the SR curve."),
    rho: float = typer.Option(
        0.2, "--rho", help="Relative window width (the window spans ceil(rho * layers))."
    ),
    out_path: Path = typer.Option(Path("profile.json"), "--out", help="Profile JSON to write."),
    plot: Path | None = typer.Option(None, "--plot", help="Also write the SR curve as a PNG."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda[:N] or mps."),
    batch_size: int = typer.Option(4, "--batch-size", min=1, help="Pages per forward pass."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write a JSON summary here."),
) -> None:
    """Per-layer Score Retention of single-layer SAP, then the SAP layer window -> profile JSON."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vrag_compress.calibrate import (
        CalibrationError,
        build_profile,
        load_calibration_pairs,
        plot_sr_curve,
        select_window,
    )
    from vrag_compress.encoders.errors import StatsUnavailableError

    check_ratio(ratio)
    if plot is not None:
        check_plot_path(plot, "--plot")
    for path, option in ((out_path, "--out"), (plot, "--plot"), (json_out, "--json")):
        if path is not None:
            check_writable(path, option)  # before the model loads, not after the work
    try:
        select_window([1.0], rho)  # validate rho before loading a model
        chosen = load_calibration_pairs(data, limit=pairs)
        encoder = _load_encoder(model, device, batch_size)
        pages, queries = _encode_pairs(encoder, chosen, batch_size)
        profile = build_profile(pages, queries, encoder.model_id, ratio=ratio, rho=rho)
    except (CalibrationError, StatsUnavailableError) as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    profile.save(out_path)
    if plot is not None:
        plot_sr_curve(profile, plot)
    _print_profile(profile, out_path, plot)
    if json_out is not None:
        summary = {"profile": str(out_path), "plot": str(plot) if plot else None}
        summary.update(profile.to_dict())
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(summary, indent=2) + "\n")


def _load_encoder(model: str, device: str, batch_size: int):
    from vrag_compress.encoders import EncoderLoadError, load_encoder

    try:
        return load_encoder(model, device=device, batch_size=batch_size)
    except EncoderLoadError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1) from exc


def _encode_pairs(encoder, pairs, batch_size: int):
    """Encode pages (with attention statistics) and queries in batches, with a progress bar."""
    from PIL import Image

    pages, queries = [], []
    with task_progress(err) as progress:
        task = progress.add_task("calibrating", total=len(pairs))
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start : start + batch_size]
            images = []
            for pair in chunk:
                with Image.open(pair.image) as image:
                    images.append(image.convert("RGB"))
            pages.extend(encoder.encode_pages(images, with_stats=True))
            queries.extend(encoder.encode_queries([pair.query for pair in chunk]))
            progress.advance(task, len(chunk))
    return pages, queries


def _print_profile(profile, out_path: Path, plot: Path | None) -> None:
    table = Table(title=f"SR per decoder layer ({profile.model_id}, {profile.n_pairs} pairs)")
    table.add_column("layer", justify="right")
    table.add_column(f"SR @ γ={profile.gamma:g}", justify="right")
    table.add_column("window")
    for layer, value in enumerate(profile.sr_curve):
        table.add_row(str(layer), f"{value:.4f}", "●" if layer in profile.window else "")
    out.print(table)
    out.print(
        f"window: layers {min(profile.window)}..{max(profile.window)} of {profile.n_layers} "
        f"→ {display_path(out_path)}" + (f" (plot: {display_path(plot)})" if plot else "")
    )
