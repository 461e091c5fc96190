"""`vrag bench ingest`: rendering throughput per renderer, and proof that long PDFs stream."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import typer

from vrag_compress_bench.app import bench_app
from vrag_compress_bench.paths import require_data_dir


@bench_app.command("ingest")
def bench_ingest(
    paths: list[Path] = typer.Argument(None, help="Files or folders (default: shared data pdfs/)."),
    dpi: float = typer.Option(150, help="Render resolution."),
    renderer: list[str] = typer.Option(["pypdfium2", "pdf2image"], help="Renderers to time."),
    long_pages: int = typer.Option(1000, help="Pages of the generated long PDF (0 skips it)."),
    json_out: Path = typer.Option(None, "--json", help="Write the results here as JSON."),
    data: Path | None = typer.Option(
        None, "--data", help="Shared data folder (default: $VRAG_DATA_DIR or ../shared/data)."
    ),
) -> None:
    """Pages per second for each renderer, and resident memory while streaming a long PDF."""
    from rich.console import Console
    from rich.table import Table

    from vrag_compress.ingest import find_documents

    files, errors = find_documents(paths or [require_data_dir(data) / "pdfs"])
    results: dict = {"dpi": dpi, "files": len(files), "renderers": {}, "errors": []}
    for name in renderer:
        results["renderers"][name] = _time_renderer(files, dpi, name, results["errors"])
    results["errors"] = sorted(set(results["errors"]))
    if long_pages > 0:
        results["streaming"] = _stream_long_pdf(long_pages, dpi, require_data_dir(data))

    table = Table(title=f"ingest at {dpi:g} dpi, {len(files)} files")
    for column in ("renderer", "pages", "seconds", "pages/s"):
        table.add_column(column, justify="right")
    for name, row in results["renderers"].items():
        table.add_row(name, str(row["pages"]), f"{row['seconds']:.2f}", f"{row['pages_per_s']:.1f}")
    console = Console()
    console.print(table)
    if "streaming" in results:
        s = results["streaming"]
        console.print(
            f"streamed {s['pages']} pages ({s['page_mb']:.1f} MB each as RGB, "
            f"{s['all_pages_mb']:.0f} MB if held at once): RSS {s['rss_start_mb']:.0f} MB -> "
            f"peak {s['rss_peak_mb']:.0f} MB (+{s['rss_growth_mb']:.0f} MB)"
        )
    for error in results["errors"]:
        console.print(f"[yellow]skipped[/] {error}")
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(results, indent=2))


def _time_renderer(files: list[Path], dpi: float, renderer: str, errors: list[str]) -> dict:
    """Render every page of ``files`` (images included) and time it end to end."""
    from rich.progress import track

    from vrag_compress.ingest import IngestError, iter_pages

    found: list[IngestError] = []
    start = time.perf_counter()
    pages = 0
    for _page in track(
        iter_pages(files, dpi=dpi, renderer=renderer, errors=found),
        description=renderer,
        transient=True,
    ):
        pages += 1
    seconds = time.perf_counter() - start
    errors.extend(str(error) for error in found)
    return {"pages": pages, "seconds": seconds, "pages_per_s": pages / seconds if seconds else 0.0}


def _stream_long_pdf(n_pages: int, dpi: float, data: Path) -> dict:
    """Build an ``n_pages`` PDF from a real 15-page report and sample RSS after every page."""
    import pypdfium2 as pdfium

    try:
        import psutil
    except ImportError as exc:
        raise typer.BadParameter(
            "the streaming check needs psutil: pip install psutil (or pass --long-pages 0)",
            param_hint="--long-pages",
        ) from exc

    from vrag_compress.ingest import open_document

    source = pdfium.PdfDocument(data / "pdfs" / "gov" / "federal-register-2020-17221.pdf")
    long_pdf = pdfium.PdfDocument.new()
    while len(long_pdf) < n_pages:
        count = min(len(source), n_pages - len(long_pdf))
        long_pdf.import_pages(source, list(range(count)))
    process = psutil.Process()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "long.pdf"
        long_pdf.save(path)
        long_pdf.close()
        source.close()
        rss_start = peak = process.memory_info().rss
        start = time.perf_counter()
        with open_document(path, dpi=dpi) as doc:
            for page in doc.iter_pages():
                peak = max(peak, process.memory_info().rss)
                page_bytes = page.width * page.height * 3
        seconds = time.perf_counter() - start
    mb = 1 << 20
    return {
        "pages": n_pages,
        "seconds": seconds,
        "page_mb": page_bytes / mb,
        "all_pages_mb": page_bytes * n_pages / mb,
        "rss_start_mb": rss_start / mb,
        "rss_peak_mb": peak / mb,
        "rss_growth_mb": (peak - rss_start) / mb,
    }
