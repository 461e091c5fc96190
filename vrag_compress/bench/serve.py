"""`vrag bench serve`: a bounded load test of `vrag serve` on loopback.

Builds an index of synthetic clustered pages (compressed-size multi-vectors, random text), starts
a real `vrag serve` process on a free loopback port, and lets ``clients`` threads each send
``searches`` ``GET /api/search`` requests back to back. Reports latency percentiles, throughput
and errors. Every request encodes its text query with the index's model and returns hits with
their regions, as users get them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import typer

from vrag_compress.bench.app import bench_app

WORDS = (
    "budget revenue court argument firearm background checks layoffs aviation maintenance "
    "handbook transcript expenditures senate register weather storm table figure chart total "
    "annual report operating costs state federal notice employer aircraft engine inspection"
).split()


@bench_app.command("serve")
def bench_serve(
    pages: int = typer.Option(3006, "--pages", min=1, help="Synthetic pages in the index."),
    tokens: int = typer.Option(103, "--tokens", min=1, help="Stored vectors per page."),
    clients: int = typer.Option(8, "--clients", min=1, help="Concurrent clients."),
    searches: int = typer.Option(200, "--searches", min=1, help="Searches per client."),
    k: int = typer.Option(5, "-k", min=1, help="Hits per search."),
    model: str = typer.Option("tiny-colqwen2", help="Query encoder (the index's model)."),
    seed: int = typer.Option(0, "--seed"),
    workdir: Path | None = typer.Option(None, "--dir", help="Where to build the index [tmp]."),
    json_out: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Latency (p50/p90/p99) and errors of concurrent searches against a real server."""
    root = Path(tempfile.mkdtemp(prefix="vrag-bench-serve-", dir=workdir))
    try:
        started = time.perf_counter()
        build_index(root / "load.vrag", pages, tokens, model, seed)
        build_s = time.perf_counter() - started
        port = free_port()
        server = start_server(root / "load.vrag", port, root / "server.log")
        try:
            result = run_load(f"http://127.0.0.1:{port}", clients, searches, k, seed)
        finally:
            server.terminate()
            server.wait(30)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result.update(
        pages=pages,
        tokens_per_page=tokens,
        model=model,
        build_seconds=round(build_s, 1),
        cpus=os.cpu_count(),
        load_average=[round(x, 2) for x in os.getloadavg()],
    )
    if json_out:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(
        f"{result['requests']} searches ({clients} clients x {searches}) over {pages} pages: "
        f"p50 {result['p50_ms']} ms, p90 {result['p90_ms']} ms, p99 {result['p99_ms']} ms, "
        f"max {result['max_ms']} ms, {result['requests_per_s']} req/s, "
        f"{result['errors']} errors (load average {result['load_average']})"
    )
    if result["errors"]:
        raise typer.Exit(1)


def build_index(path: Path, pages: int, tokens: int, model: str, seed: int) -> None:
    """An index whose pages hold synthetic clustered vectors of the model's dimension."""
    from vrag_compress.bench.synthetic import clustered_pages
    from vrag_compress.index import VisualIndex
    from vrag_compress.store import DocumentRecord, PageRecord

    rng = np.random.default_rng(seed)
    with VisualIndex.create(path, model=model, compressor="identity") as index:
        dim = index.config.dim
        for start in range(0, pages, 256):
            count = min(256, pages - start)
            vectors = clustered_pages(count, tokens, dim, seed=seed + start)
            records, documents = [], {}
            for i in range(count):
                number = start + i
                doc_id = f"synthetic-{number // 10:05d}"
                documents[doc_id] = DocumentRecord(doc_id, n_pages=10, complete=True)
                text = " ".join(rng.choice(WORDS, size=12))
                records.append(
                    PageRecord(
                        page_id=f"{doc_id}:{number % 10 + 1}",
                        doc_id=doc_id,
                        page_no=number % 10 + 1,
                        vectors=vectors[i],
                        metadata={"filename": f"{doc_id}.pdf"},
                        text=text,
                    )
                )
            index.store.add(records, documents=list(documents.values()))


def run_load(base: str, clients: int, searches: int, k: int, seed: int) -> dict[str, Any]:
    """``clients`` threads x ``searches`` sequential searches; latencies in milliseconds."""
    import httpx

    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(number: int) -> None:
        rng = np.random.default_rng(seed + number)
        with httpx.Client(base_url=base, timeout=120) as http:
            for _ in range(searches):
                query = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 7))))
                began = time.perf_counter()
                try:
                    response = http.get("/api/search", params={"q": query, "k": k})
                    ok = response.status_code == 200 and len(response.json()["hits"]) == k
                    problem = None if ok else f"{response.status_code}: {response.text[:200]}"
                except (httpx.HTTPError, ValueError, KeyError) as error:
                    problem = f"{type(error).__name__}: {error}"
                elapsed = (time.perf_counter() - began) * 1000
                with lock:
                    latencies.append(elapsed)
                    if problem:
                        errors.append(problem)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    values = np.asarray(latencies)
    return {
        "clients": clients,
        "searches_per_client": searches,
        "requests": len(latencies),
        "errors": len(errors),
        "error_examples": errors[:3],
        "p50_ms": round(float(np.percentile(values, 50)), 1),
        "p90_ms": round(float(np.percentile(values, 90)), 1),
        "p99_ms": round(float(np.percentile(values, 99)), 1),
        "max_ms": round(float(values.max()), 1),
        "wall_seconds": round(wall, 1),
        "requests_per_s": round(len(latencies) / wall, 1),
    }


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve an ASGI ``app`` with uvicorn on a free loopback port, in a thread, for the block;
    yields its base URL (tests that need a real socket but not a second process)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.1)
    if not server.started:
        raise RuntimeError("uvicorn did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def start_server(
    index_dir: Path, port: int, log: Path, *options: str, timeout: float = 300
) -> subprocess.Popen:
    """A real `vrag serve INDEX --port PORT [options]` process, returned once /api/info answers
    (the load test and the kill -9 test drive the server exactly as users start it)."""
    import httpx

    command = [sys.executable, "-m", "vrag_compress", "serve", str(index_dir)]
    command += ["--port", str(port), *options]
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vrag serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/info", timeout=5).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(
        f"vrag serve did not start within {timeout:.0f} s: {log.read_text()[-2000:]}"
    )
