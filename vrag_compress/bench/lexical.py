"""`vrag bench lexical`: what the text side of hybrid search costs per query, at a given size.

Pages of real-length text are built from a real corpus (Cranfield by default): each page joins
random documents until it holds ``--words`` words (about a printed page). They go into an
embedded store (one tiny vector each: only the text index matters here), and the corpus's real
questions are searched in ``text`` mode, the exact code path of the lexical side of
``mode="hybrid"``. Prints build time, index size and per-query latency (mean, p50, p95).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer

from vrag_compress.bench.app import bench_app
from vrag_compress.bench.paths import data_dir


def page_texts(docs: list[str], n_pages: int, words: int, seed: int) -> list[str]:
    """``n_pages`` texts of about ``words`` words, each a run of random corpus documents."""
    rng = np.random.default_rng(seed)
    split = [d.split() for d in docs if d.strip()]
    pages = []
    for _ in range(n_pages):
        out: list[str] = []
        while len(out) < words:
            out += split[int(rng.integers(len(split)))]
        pages.append(" ".join(out[:words]))
    return pages


def build_store(path: Path, texts: list[str], batch: int = 2000) -> float:
    """A store holding ``texts`` as pages; returns the seconds the writes took."""
    from vrag_compress.store import LocalStore, PageRecord

    one = np.ones((1, 1), dtype=np.float32)
    started = time.perf_counter()
    with LocalStore.create(path, {"dim": 1, "model_id": "bench/lexical"}) as store:
        for start in range(0, len(texts), batch):
            store.add(
                [
                    PageRecord(f"p{i:07d}", f"d{i // 10}", i % 10 + 1, one, text=texts[i])
                    for i in range(start, min(start + batch, len(texts)))
                ]
            )
    return time.perf_counter() - started


def time_queries(path: Path, queries: list[str], k: int, repeat: int) -> dict[str, Any]:
    """Per-query latency of text-mode search (warm: one untimed pass first)."""
    from vrag_compress.store import LocalStore

    with LocalStore.open(path, readonly=True) as store:
        hits = [len(store.search(None, k, mode="text", text=q)) for q in queries]  # warm-up
        times = []
        cpu_started = time.process_time()
        for _ in range(repeat):
            for q in queries:
                started = time.perf_counter()
                store.search(None, k, mode="text", text=q)
                times.append((time.perf_counter() - started) * 1000)
        cpu_ms = (time.process_time() - cpu_started) * 1000 / len(times)
    times.sort()
    return {
        "queries": len(queries),
        "repeat": repeat,
        "mean_ms": round(statistics.fmean(times), 3),
        "cpu_ms": round(cpu_ms, 3),  # this process's CPU time: robust to a loaded machine
        "p50_ms": round(times[len(times) // 2], 3),
        "p95_ms": round(times[int(len(times) * 0.95)], 3),
        "max_ms": round(times[-1], 3),
        "mean_hits": round(statistics.fmean(hits), 2),
    }


@bench_app.command("lexical")
def lexical(
    pages: str = typer.Option("3006 100000", help="store sizes in pages, space/comma separated"),
    words: int = typer.Option(450, min=1, help="words of text per page"),
    dataset: Path | None = typer.Option(
        None, help="BEIR text folder for page text and queries (default: shared Cranfield)"
    ),
    n_queries: int = typer.Option(200, "--queries", min=1, help="real queries searched"),
    k: int = typer.Option(10, "-k", min=1, help="hits per query"),
    repeat: int = typer.Option(3, min=1, help="timed passes over the queries"),
    seed: int = typer.Option(0, help="seed of the page assembly"),
    json_out: Path | None = typer.Option(None, "--json", help="also write the results here"),
) -> None:
    """Build stores of real-length page text and time BM25 (FTS5) text-mode queries."""
    from rich.console import Console
    from rich.table import Table

    from vrag_compress.beir import load_beir

    sizes = [int(s) for s in pages.replace(",", " ").split()]
    if not sizes or min(sizes) < 1:
        raise typer.BadParameter(f"--pages must be positive page counts, got {pages!r}")
    data = load_beir(dataset or data_dir() / "cranfield")
    queries = list(data.queries.values())[:n_queries]
    console = Console()
    rows = []
    for n in sizes:
        texts = page_texts(list(data.docs.values()), n, words, seed)
        with tempfile.TemporaryDirectory(prefix="vrag-lexical-") as tmp:
            path = Path(tmp) / "store"
            build_s = build_store(path, texts)
            size_mb = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20
            timing = time_queries(path, queries, k, repeat)
        rows.append(
            {
                "pages": n,
                "words_per_page": words,
                "build_s": round(build_s, 1),
                "store_mb": round(size_mb, 1),
                **timing,
            }
        )
    table = Table(title=f"lexical side (FTS5 BM25) · {data.name} text · k={k}")
    cols = ("pages", "words/page", "build s", "store MB", "mean ms", "p50 ms", "p95 ms", "CPU ms")
    for col in cols:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['pages']:,}",
            str(r["words_per_page"]),
            f"{r['build_s']:.1f}",
            f"{r['store_mb']:.1f}",
            f"{r['mean_ms']:.2f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p95_ms']:.2f}",
            f"{r['cpu_ms']:.2f}",
        )
    console.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"dataset": data.name, "k": k, "rows": rows}, indent=2))
        console.print(f"wrote {json_out}")
