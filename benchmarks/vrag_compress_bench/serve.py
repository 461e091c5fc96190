"""`vrag bench serve`: a bounded load test of `vrag serve` on loopback.

Builds an index of synthetic clustered pages (compressed-size multi-vectors, random text), starts
a real `vrag serve` process on a free loopback port, and in one run times ``searches``
``GET /api/search`` requests from one client, then from ``clients`` clients at once (each back
to back), and with ``--during-upload`` from one client while multi-page uploads are being
indexed. Reports latency percentiles (``p50_ms``, ``p99_ms``), throughput (``rps``), errors and
the ratios the targets are stated in. Every request encodes its text query with the index's
model and returns hits with their regions, as users get them.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer

from vrag_compress.serve.process import free_port, start_server
from vrag_compress_bench.app import bench_app
from vrag_compress_bench.paths import scratch_dir

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
    during_upload: bool = typer.Option(
        False,
        "--during-upload",
        help="Also time one client's searches while multi-page uploads are being indexed.",
    ),
    upload_pages: int = typer.Option(
        8, "--upload-pages", min=2, help="Pages of each uploaded PDF (--during-upload)."
    ),
    upload_pdf: Path | None = typer.Option(
        None,
        "--upload-pdf",
        exists=True,
        dir_okay=False,
        help="PDF whose pages are uploaded (--during-upload) [generated image-only pages].",
    ),
    workers: int = typer.Option(1, "--workers", min=1, help="`vrag serve --workers`."),
) -> None:
    """Latency (p50/p99), throughput and errors of 1 and N concurrent clients against a real
    server, and optionally of searches during an upload."""
    root = scratch_dir("vrag-bench-serve-", workdir)
    try:
        started = time.perf_counter()
        build_index(root / "load.vrag", pages, tokens, model, seed)
        build_s = time.perf_counter() - started
        port = free_port()
        options = ["--workers", str(workers)]
        if during_upload:
            options += ["--api-key", UPLOAD_KEY, "--max-pages", str(upload_pages)]
        server = start_server(root / "load.vrag", port, root / "server.log", *options, timeout=900)
        base = f"http://127.0.0.1:{port}"
        try:
            run_load(base, 1, min(searches, 5), k, seed + 999)  # warm-up, not timed
            one = run_load(base, 1, searches, k, seed)
            result = run_load(base, clients, searches, k, seed) if clients > 1 else dict(one)
            result["one_client"] = one
            result["throughput_ratio"] = _ratio(result["rps"], one["rps"])
            result["p50_ratio"] = _ratio(result["p50_ms"], one["p50_ms"])
            if during_upload:
                loaded = run_during_upload(
                    base, searches, k, seed, upload_pages, root, source=upload_pdf
                )
                loaded["p50_ratio_to_idle"] = _ratio(loaded["p50_ms"], one["p50_ms"])
                result["during_upload"] = loaded
        finally:
            server.terminate()
            server.wait(60)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result.update(
        pages=pages,
        tokens_per_page=tokens,
        model=model,
        workers=workers,
        build_seconds=round(build_s, 1),
        cpus=os.cpu_count(),
        load_average=[round(x, 2) for x in os.getloadavg()],
    )
    if json_out:
        typer.echo(json.dumps(result, indent=2))
        return
    one = result["one_client"]
    typer.echo(
        f"{pages} pages: 1 client p50 {one['p50_ms']} ms, p99 {one['p99_ms']} ms, "
        f"{one['rps']} req/s; {clients} clients p50 {result['p50_ms']} ms, "
        f"p99 {result['p99_ms']} ms, {result['rps']} req/s (throughput x"
        f"{result['throughput_ratio']}, p50 x{result['p50_ratio']}); "
        f"{result['errors'] + one['errors']} errors (load average {result['load_average']})"
    )
    busy: dict[str, Any] | None = result.get("during_upload")
    if busy:
        typer.echo(
            f"during upload: p50 {busy['p50_ms']} ms (x{busy['p50_ratio_to_idle']} idle), "
            f"p99 {busy['p99_ms']} ms, {busy['pages_indexed']} pages indexed, "
            f"{busy['searches_while_indexing']}/{busy['requests']} searches while indexing"
        )
    if result["errors"] or one["errors"] or (busy and busy["errors"]):
        raise typer.Exit(1)


UPLOAD_KEY = "bench-serve-upload-key"


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def upload_copy(source: Path, path: Path, n_pages: int, number: int) -> Path:
    """The first ``n_pages`` pages of ``source`` (repeated when it has fewer), marked with
    ``number`` so that every upload is new content (a duplicate would be skipped at once)."""
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(source)
    writer = PdfWriter()
    for i in range(n_pages):
        writer.add_page(reader.pages[i % len(reader.pages)])
    writer.add_metadata({"/Subject": f"vrag bench serve upload {number}"})
    with open(path, "wb") as out:
        writer.write(out)
    return path


def generated_pdf(path: Path, n_pages: int, seed: int) -> Path:
    """A PDF of ``n_pages`` image-only pages: text drawn over seeded noise."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    images = []
    for page in range(n_pages):
        pixels = rng.integers(200, 256, (792, 612, 3), dtype=np.uint8)
        image = Image.fromarray(pixels, "RGB")
        draw = ImageDraw.Draw(image)
        for line in range(30):
            draw.text((40, 30 + 24 * line), " ".join(rng.choice(WORDS, size=8)), fill="black")
        draw.text((40, 760), f"page {page + 1} seed {seed}", fill="black")
        images.append(image)
    images[0].save(path, "PDF", save_all=True, append_images=images[1:], resolution=72)
    return path


def run_during_upload(
    base: str,
    searches: int,
    k: int,
    seed: int,
    upload_pages: int,
    workdir: Path,
    source: Path | None = None,
) -> dict[str, Any]:
    """One client's ``searches`` while a second thread keeps uploading ``upload_pages``-page
    PDFs (copies of ``source``, each indexed before the next is sent); timing starts once the
    first is indexing."""
    import httpx

    source = source or generated_pdf(workdir / "generated.pdf", upload_pages, seed)

    indexing = threading.Event()
    stop = threading.Event()
    indexed: list[int] = []
    problems: list[str] = []

    def uploader() -> None:
        headers = {"Authorization": f"Bearer {UPLOAD_KEY}"}
        with httpx.Client(base_url=base, timeout=600, headers=headers) as http:
            n = 0
            while not stop.is_set():
                pdf = upload_copy(source, workdir / f"upload-{n}.pdf", upload_pages, n)
                with open(pdf, "rb") as file:
                    sent = http.post("/api/documents", files={"file": (pdf.name, file)})
                if sent.status_code != 202:
                    problems.append(f"upload {sent.status_code}: {sent.text[:200]}")
                    indexing.set()
                    return
                job = sent.json()["job"]
                while True:
                    state = http.get(f"/api/jobs/{job}").json()
                    if state["state"] == "running":
                        indexing.set()
                    if state["state"] in ("done", "failed"):
                        indexed.append(int(state["pages_done"]))
                        break
                    time.sleep(0.1)
                indexing.clear()
                n += 1

    thread = threading.Thread(target=uploader, daemon=True)
    thread.start()
    if not indexing.wait(600):
        raise RuntimeError("the upload never started indexing")
    result = run_load(base, 1, searches, k, seed + 500, busy=indexing)
    stop.set()
    thread.join(600)
    if problems:
        result["errors"] += len(problems)
        result["error_examples"] = (problems + result["error_examples"])[:3]
    result["pages_indexed"] = sum(indexed)
    result["upload_pages"] = upload_pages
    return result


def build_index(path: Path, pages: int, tokens: int, model: str, seed: int) -> None:
    """An index whose pages hold synthetic clustered vectors of the model's dimension."""
    from vrag_compress.index import VisualIndex
    from vrag_compress.store import DocumentRecord, PageRecord
    from vrag_compress_bench.synthetic import clustered_pages

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


def run_load(
    base: str,
    clients: int,
    searches: int,
    k: int,
    seed: int,
    busy: threading.Event | None = None,
) -> dict[str, Any]:
    """``clients`` threads x ``searches`` sequential searches; latencies in milliseconds
    (``busy``: count the searches that started while it was set)."""
    import httpx

    started_busy = 0
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(number: int) -> None:
        rng = np.random.default_rng(seed + number)
        with httpx.Client(base_url=base, timeout=120) as http:
            for _ in range(searches):
                query = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 7))))
                was_busy = busy is not None and busy.is_set()
                began = time.perf_counter()
                try:
                    response = http.get("/api/search", params={"q": query, "k": k})
                    ok = response.status_code == 200 and len(response.json()["hits"]) == k
                    problem = None if ok else f"{response.status_code}: {response.text[:200]}"
                except (httpx.HTTPError, ValueError, KeyError) as error:
                    problem = f"{type(error).__name__}: {error}"
                elapsed = (time.perf_counter() - began) * 1000
                with lock:
                    nonlocal started_busy
                    started_busy += was_busy
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
    extra = {} if busy is None else {"searches_while_indexing": started_busy}
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
        "rps": round(len(latencies) / wall, 2),
        **extra,
    }
