"""`vrag bench ocr`: OCR seconds per page at the index DPI, and its share of total indexing time."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from vrag_compress_bench.app import bench_app
from vrag_compress_bench.paths import require_data_dir

DEFAULT_FILES = (
    "pdfs/edge/ocr_test.pdf",  # a real scan without a text layer
    "pdfs/gov/scotus-transcript-p1.pdf",  # a dense page of text
    "pdfs/edge/multi_page.pdf",  # five ordinary pages
)

COLUMNS = ("pages", "OCR'd", "OCR s/page", "median", "max", "OCR s", "index s", "OCR share")


@bench_app.command("ocr")
def bench_ocr(
    paths: list[Path] = typer.Argument(
        None, help="PDFs, images or folders (default: a scan, a dense page, a 5-page PDF)."
    ),
    dpi: int = typer.Option(150, help="Render resolution of the index (OCR reads these images)."),
    model: str = typer.Option("tiny-colqwen2", help="Col* model for the indexing run."),
    ocr: str = typer.Option("always", help="OCR mode: always times every page; auto only scans."),
    threads: int = typer.Option(2, help="CPU threads for onnxruntime and torch."),
    json_out: Path = typer.Option(None, "--json", help="Write the results here as JSON."),
    data: Path | None = typer.Option(
        None, "--data", help="Shared data folder (default: $VRAG_DATA_DIR or ../shared/data)."
    ),
) -> None:
    """Index the pages with OCR and report OCR time per page and its share of indexing time."""
    import torch
    from rich.console import Console

    from vrag_compress.ingest.ocr import OcrUnavailableError, PageOcr

    torch.set_num_threads(threads)
    files = paths or [require_data_dir(data) / f for f in DEFAULT_FILES]
    page_ocr = PageOcr(ocr, threads=threads)
    started = time.perf_counter()
    try:
        page_ocr.engine()  # load the ONNX sessions outside the timed run
    except OcrUnavailableError as error:
        raise typer.BadParameter(str(error), param_hint="--ocr") from error
    results: dict[str, Any] = {
        "dpi": dpi,
        "model": model,
        "ocr_mode": ocr,
        "threads": threads,
        "engine_load_s": round(time.perf_counter() - started, 3),
        **_index_with_ocr(files, dpi, model, page_ocr),
    }
    console = Console()
    console.print(_table(results))
    console.print(f"engine load (not timed above): {results['engine_load_s']:.2f}s")
    for failure in results["failures"] + results["ocr_failures"]:
        console.print(f"[yellow]failed[/] {failure}")
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(results, indent=2))


def _index_with_ocr(files: list[Path], dpi: int, model: str, page_ocr: Any) -> dict[str, Any]:
    """One indexing run into a temporary index; the report carries the per-page OCR timings."""
    from vrag_compress.index import VisualIndex

    with tempfile.TemporaryDirectory() as folder:
        index = VisualIndex.create(Path(folder) / "bench.vrag", model=model, dpi=dpi)
        with index:
            report = index.add(files, ocr=page_ocr, progress=True)
    per_page = report.ocr_pages
    seconds = [p["seconds"] for p in per_page]
    ocr_total = sum(seconds)
    return {
        "pages_indexed": report.pages_indexed,
        "pages_ocrd": len(per_page),
        "index_s": round(report.seconds, 3),
        "ocr_s": round(ocr_total, 3),
        "ocr_share": round(ocr_total / report.seconds, 4) if report.seconds else 0.0,
        "ocr_s_per_page_mean": round(statistics.fmean(seconds), 3) if seconds else None,
        "ocr_s_per_page_median": round(statistics.median(seconds), 3) if seconds else None,
        "ocr_s_per_page_max": round(max(seconds), 3) if seconds else None,
        "chars_per_page_mean": round(statistics.fmean(p["chars"] for p in per_page), 1)
        if per_page
        else None,
        "per_page": per_page,
        "failures": report.failures,
        "ocr_failures": report.ocr_failures,
    }


def _table(results: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(
        title=f"OCR at {results['dpi']} dpi ({results['ocr_mode']}, {results['threads']} threads, "
        f"model {results['model']})"
    )
    for column in COLUMNS:
        table.add_column(column, justify="right")

    def num(key: str) -> str:
        value = results[key]
        return "-" if value is None else f"{value:.2f}"

    table.add_row(
        str(results["pages_indexed"]),
        str(results["pages_ocrd"]),
        num("ocr_s_per_page_mean"),
        num("ocr_s_per_page_median"),
        num("ocr_s_per_page_max"),
        num("ocr_s"),
        num("index_s"),
        f"{results['ocr_share']:.0%}",
    )
    return table
