"""`vrag bench ray`: indexing pages/s on Ray with 1, 2, ... encoder actors, in one run.

A local Ray instance gets as many CPU slots as the largest actor count; each count indexes the
same files into a fresh index. Actor start-up (a Python process importing torch and loading the
model) is timed apart from the pages, so ``pages_per_s`` is the steady rate and ``ratio`` the
speed-up over the first count. Every actor has one CPU (Ray gives it one torch thread), so a
CPU-bound stage should scale with the free cores: say how loaded the machine was (``load``).
``driver_write_s`` is the time the driver spent writing (files, the store transaction), and
``driver_cpu_s`` the CPU time the driver's process used while the pages ran: its serial part,
which bounds the rate however many actors there are (``pages / driver_cpu_s`` at most, on a
free core). CPU time, unlike wall time, hardly depends on how loaded the machine is.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from vrag_compress_bench.app import bench_app
from vrag_compress_bench.paths import require_data_dir

DEFAULT_FOLDER = "pdfs/icdar2013"


@bench_app.command("ray")
def bench_ray(
    paths: list[Path] = typer.Argument(None, help="PDFs or folders (default: the ICDAR PDFs)."),
    workers: str = typer.Option("1,2", help="Actor counts to compare, comma-separated."),
    model: str = typer.Option("tiny-colqwen2", help="Col* model the actors load."),
    batch_size: int = typer.Option(2, help="Pages per batch sent to an actor."),
    limit: int = typer.Option(40, help="Index only the first N files (0: all)."),
    images: bool = typer.Option(
        True, "--images/--no-images", help="Store page images (the actors encode them)."
    ),
    json_out: Path = typer.Option(None, "--json", help="Write the results here as JSON."),
    data: Path | None = typer.Option(
        None, "--data", help="Shared data folder (default: $VRAG_DATA_DIR or ../shared/data)."
    ),
) -> None:
    """Index the same files with each actor count on a local Ray instance; print pages/s."""
    from vrag_compress.distributed import import_ray
    from vrag_compress.ingest import find_documents

    counts = [int(n) for n in workers.split(",") if n.strip()]
    files, _ = find_documents(paths or [require_data_dir(data) / DEFAULT_FOLDER])
    files = files[:limit] if limit else files
    if not ({"RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"} & set(os.environ)):
        # a token for this run only: Ray would otherwise write one into ~/.ray for good
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    ray = import_ray()
    ray.init(num_cpus=max(counts), include_dashboard=False, log_to_driver=False)
    try:
        runs = [_run(ray, files, model, batch_size, n, images) for n in counts]
    finally:
        ray.shutdown()
    base = runs[0]["pages_per_s"]
    for run in runs:
        run["ratio"] = round(run["pages_per_s"] / base, 3) if base else None
    results = {
        "files": len(files),
        "model": model,
        "batch_size": batch_size,
        "images": images,
        "cpus": os.cpu_count(),
        "load": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
    }
    for run in runs:
        typer.echo(
            f"{run['actors']} actors: {run['pages']} pages in {run['seconds']:.1f}s = "
            f"{run['pages_per_s']:.2f} pages/s (x{run['ratio']}; actor start "
            f"{run['startup_s']:.1f}s; driver writing {run['driver_write_s']:.1f}s, "
            f"driver CPU {run['driver_cpu_s']:.1f}s)"
        )
    typer.echo(f"load average before the runs: {results['load']} on {results['cpus']} CPUs")
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(results, indent=2))


def _run(
    ray: Any, files: list[Path], model: str, batch_size: int, actors: int, images: bool
) -> dict[str, Any]:
    """One fresh index, ``actors`` actors: the start-up and the pages timed apart."""
    from vrag_compress.distributed import RayOptions, run_units, start_actors, units
    from vrag_compress.index import VisualIndex
    from vrag_compress.indexing import AddReport
    from vrag_compress.progress import IndexProgress

    with tempfile.TemporaryDirectory() as folder:
        index = VisualIndex.create(
            Path(folder) / "bench.vrag",
            model=model,
            batch_size=batch_size,
            device="cpu",
            store_images=images,
        )
        with index, IndexProgress(0, enabled=False) as bar:
            started = time.perf_counter()
            pool = start_actors(ray, index.store.config, RayOptions(actors=actors), "never")
            ready, cpu = time.perf_counter(), time.process_time()
            indexer, report = index.indexer(), AddReport()
            writing = _timed(indexer)
            planned = indexer.plan(files, {}, report, bar)
            run_units(indexer, pool, units(planned, batch_size), 2 * actors, report, bar)
            done, cpu = time.perf_counter(), time.process_time() - cpu
            for actor in pool.actors:
                ray.kill(actor)
    seconds = done - ready
    return {
        "actors": actors,
        "pages": report.pages_indexed,
        "failures": len(report.failures),
        "startup_s": round(ready - started, 3),
        "seconds": round(seconds, 3),
        "driver_write_s": round(writing[0], 3),
        "driver_cpu_s": round(cpu, 3),
        "pages_per_s": round(report.pages_indexed / seconds, 3) if seconds else 0.0,
    }


def _timed(indexer: Any) -> list[float]:
    """Time spent in ``indexer.write`` (the driver's serial part), summed into the list."""
    spent = [0.0]
    write = indexer.write

    def timed_write(*args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        try:
            write(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    indexer.write = timed_write
    return spent
