"""`vrag bench lexical`: what the text side of hybrid search costs per query, at a given size.

Pages of real-length text are built from a real corpus (Cranfield by default): each page joins
random documents until it holds ``--words`` words (about a printed page). They go into an
embedded store (one tiny vector each: only the text index matters here), and the corpus's real
questions are searched in ``text`` mode, the exact code path of the lexical side of
``mode="hybrid"``. Prints build time, index size, the time to open the store and answer the
first query (``open_s``) and per-query latency (mean, p50, p95).

``--against bm25s`` times the same queries on bm25s (a sparse-matrix BM25, same tokens, same
k1 and b) in the same run and reports its p50/p95 and the top-10 agreement (``overlap@10``);
``--against fts5`` does the same for the store's FTS5 path (``text_engine="fts5"``).
``--judged`` adds NDCG@10 of text mode on the dataset's own documents and judgments, for both
engines, and their top-10 overlap.
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

from vrag_compress.shared_data import data_dir
from vrag_compress_bench.app import bench_app


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


def time_queries(
    path: Path, queries: list[str], k: int, repeat: int, engine: str = "tantivy"
) -> tuple[dict[str, Any], list[list[int]]]:
    """Per-query latency of text-mode search (warm: one untimed pass first) and each query's
    hits (page numbers). ``open_s``: opening the store and answering the first query."""
    from vrag_compress.store import LocalStore

    started = time.perf_counter()
    with LocalStore.open(path, readonly=True, text_engine=engine) as store:
        store.search(None, k, mode="text", text=queries[0])
        open_s = time.perf_counter() - started
        found = [
            [int(h.page_id[1:]) for h in store.search(None, k, mode="text", text=q)]
            for q in queries
        ]  # warm-up
        times = []
        cpu_started = time.process_time()
        for _ in range(repeat):
            for q in queries:
                started = time.perf_counter()
                store.search(None, k, mode="text", text=q)
                times.append((time.perf_counter() - started) * 1000)
        cpu_ms = (time.process_time() - cpu_started) * 1000 / len(times)
    return {
        "queries": len(queries),
        "repeat": repeat,
        "open_s": round(open_s, 3),
        "mean_ms": round(statistics.fmean(times), 3),
        "cpu_ms": round(cpu_ms, 3),  # this process's CPU time: robust to a loaded machine
        **percentiles(times),
        "max_ms": round(max(times), 3),
        "mean_hits": round(statistics.fmean(len(f) for f in found), 2),
    }, found


def percentiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50_ms": round(ordered[len(ordered) // 2], 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95)], 3),
    }


def time_bm25s(
    texts: list[str], queries: list[str], k: int, repeat: int
) -> tuple[dict[str, Any], list[list[int]]]:
    """The same queries on bm25s (Lucene BM25, k1 1.2, b 0.75) over the same tokens as the
    store's (the shared tokenizer), one thread: build seconds, p50/p95 and each query's hits."""
    try:
        import bm25s
    except ImportError:
        raise typer.BadParameter(
            "--against bm25s needs bm25s: pip install 'vrag-compress[bench]'",
            param_hint="--against",
        ) from None
    from vrag_compress.store.lexical import query_terms, terms

    started = time.perf_counter()
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    retriever.index([terms(t) for t in texts], show_progress=False)
    build_s = time.perf_counter() - started
    vocab = retriever.vocab_dict
    tokens = [[t for t in query_terms(q) if t in vocab] for q in queries]
    depth = min(k, len(texts))

    def search(words: list[str]) -> list[int]:
        if not words:
            return []
        docs, scores = retriever.retrieve([words], k=depth, show_progress=False, n_threads=1)
        return [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    found = [search(t) for t in tokens]  # warm-up
    times = []
    for _ in range(repeat):
        for t in tokens:
            started = time.perf_counter()
            search(t)
            times.append((time.perf_counter() - started) * 1000)
    return {"build_s": round(build_s, 1), **percentiles(times)}, found


def overlap_at_10(ours: list[list[int]], theirs: list[list[int]]) -> float:
    """Mean share of the other engine's top 10 that ours has in its top 10 (queries where
    the other found nothing are skipped)."""
    shares = [
        len(set(a[:10]) & set(b[:10])) / len(b[:10]) for a, b in zip(ours, theirs, strict=True) if b
    ]
    return round(statistics.fmean(shares), 4) if shares else 1.0


def judged(dataset: Any) -> dict[str, Any]:
    """NDCG@10 of text mode on the dataset's own documents (one page each) with the tantivy
    engine and with FTS5, and the top-10 overlap of the two."""
    from vrag_compress_bench.eval.hybrid import RUN_DEPTH, bm25_rankings
    from vrag_compress_bench.eval.metrics import evaluate

    doc_ids = list(dataset.docs)
    query_ids = dataset.judged_queries()
    out: dict[str, Any] = {"documents": len(doc_ids), "queries": len(query_ids)}
    runs = {}
    for engine in ("tantivy", "fts5"):
        ranked = bm25_rankings(dataset, doc_ids, query_ids, RUN_DEPTH, text_engine=engine)
        runs[engine] = ranked
        run = {q: dict(ranked[q]) or {doc_ids[0]: 0.0} for q in query_ids}
        out[f"{engine}_ndcg@10"] = round(evaluate(dataset.qrels, run, ["ndcg@10"])["ndcg@10"], 4)
    top = {e: [[d for d, _ in runs[e][q][:10]] for q in query_ids] for e in runs}
    shares = [
        len(set(a) & set(b)) / len(b) for a, b in zip(top["tantivy"], top["fts5"], strict=True) if b
    ]
    out["overlap@10"] = round(statistics.fmean(shares), 4)
    return out


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
    against: str = typer.Option(
        "",
        help="also time the same queries on: bm25s (needs the bench extra) and/or fts5 (the "
        "store's FTS5 path), comma separated",
    ),
    judged_run: bool = typer.Option(
        False, "--judged", help="also NDCG@10 of both engines on the dataset's own documents"
    ),
    json_out: Path | None = typer.Option(None, "--json", help="also write the results here"),
) -> None:
    """Build stores of real-length page text and time BM25 text-mode queries."""
    from rich.console import Console
    from rich.table import Table

    from vrag_compress.beir import load_beir

    sizes = [int(s) for s in pages.replace(",", " ").split()]
    if not sizes or min(sizes) < 1:
        raise typer.BadParameter(f"--pages must be positive page counts, got {pages!r}")
    others = [a for a in against.replace(",", " ").split() if a]
    if set(others) - {"bm25s", "fts5"}:
        raise typer.BadParameter(
            f"--against takes bm25s and/or fts5, got {against!r}", param_hint="--against"
        )
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
            timing, found = time_queries(path, queries, k, repeat)
            row: dict[str, Any] = {
                "pages": n,
                "words_per_page": words,
                "build_s": round(build_s, 1),
                "store_mb": round(size_mb, 1),
                **timing,
            }
            if "fts5" in others:
                fts5, fts5_found = time_queries(path, queries, k, repeat, engine="fts5")
                row["fts5"] = {key: fts5[key] for key in ("open_s", "p50_ms", "p95_ms")}
                row["fts5"]["overlap@10"] = overlap_at_10(found, fts5_found)
        if "bm25s" in others:
            row["bm25s"], bm25s_found = time_bm25s(texts, queries, k, repeat)
            row["overlap@10"] = overlap_at_10(found, bm25s_found)
        rows.append(row)
    table = Table(title=f"lexical side (text mode, BM25) · {data.name} text · k={k}")
    cols = ("pages", "words/page", "build s", "store MB", "open s", "p50 ms", "p95 ms", "CPU ms")
    for col in cols:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['pages']:,}",
            str(r["words_per_page"]),
            f"{r['build_s']:.1f}",
            f"{r['store_mb']:.1f}",
            f"{r['open_s']:.2f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p95_ms']:.2f}",
            f"{r['cpu_ms']:.2f}",
        )
    console.print(table)
    for r in rows:
        for name in ("bm25s", "fts5"):
            if name in r:
                other = r[name]
                console.print(
                    f"{r['pages']:,} pages · {name}: p50 {other['p50_ms']:.2f} ms, p95 "
                    f"{other['p95_ms']:.2f} ms; text mode p50 is "
                    f"{r['p50_ms'] / max(other['p50_ms'], 1e-9):.2f}x; top-10 overlap "
                    f"{other.get('overlap@10', r.get('overlap@10'))}"
                )
    result: dict[str, Any] = {"dataset": data.name, "k": k, "rows": rows}
    if judged_run:
        result["judged"] = judged(data)
        console.print(f"judged ({data.name}): {result['judged']}")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2))
        console.print(f"wrote {json_out}")
