"""`vrag bench rerank`: another retriever's hits reranked by our MaxSim (what the LlamaIndex
`VragRerank` and the LangChain `VragReranker` do), against that retriever alone.

On a BEIR-layout text corpus (Cranfield) as the text-to-page proxy of the retention benchmark:
each document is one page of an index built with the offline MiniLM page-text encoder and the
index's compressor; BM25 (`bm25s`, over the store's own tokens) returns its top ``--depth``
documents for each judged query, and `VisualIndex.score_pages` reranks them on their stored
compressed vectors. NDCG@10 (and NDCG@5, MRR, R@10) of BM25 alone, of the reranked list, and of
late interaction over the whole index for reference. ``--on-the-fly N`` also scores the first N
queries' candidates as pages outside the index (encoded and compressed per call, as a hit of
another store is) and reports how far those scores are from the stored ones, and both times.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import typer
from PIL import Image
from rich.console import Console
from rich.table import Table

from vrag_compress.progress import task_progress
from vrag_compress_bench.app import bench_app

METRICS = ["ndcg@10", "ndcg@5", "mrr", "recall@10"]
PLACEHOLDER = (8, 8)
"""The image of a text page: the text encoder reads the text, never the pixels."""


def bm25_top(texts: list[str], queries: list[str], depth: int) -> list[list[tuple[int, float]]]:
    """Each query's best ``depth`` documents by bm25s (Lucene BM25, k1 1.2, b 0.75) over the
    store's tokens, as (position in ``texts``, score); documents scoring 0 are left out."""
    try:
        import bm25s
    except ImportError:
        raise typer.BadParameter(
            "needs bm25s: pip install 'vrag-compress[bench]'", param_hint="--dataset"
        ) from None
    from vrag_compress.store.lexical import query_terms, terms

    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    retriever.index([terms(t) for t in texts], show_progress=False)
    vocab = retriever.vocab_dict
    out: list[list[tuple[int, float]]] = []
    for query in queries:
        words = [t for t in query_terms(query) if t in vocab]
        if not words:
            out.append([])
            continue
        docs, scores = retriever.retrieve(
            [words], k=min(depth, len(texts)), show_progress=False, n_threads=1
        )
        out.append([(int(d), float(s)) for d, s in zip(docs[0], scores[0], strict=True) if s > 0])
    return out


def text_page(doc_id: str, text: str) -> Any:
    """A one-page document whose page is ``text`` (for the MiniLM page-text encoder)."""
    from vrag_compress.ingest import Page

    return Page(doc_id, 1, Image.new("RGB", PLACEHOLDER, "white"), text, Path(f"{doc_id}.txt"))


def build_index(
    path: Path, docs: dict[str, str], method: str, ratio: float, progress: bool
) -> tuple[Any, float]:
    """The corpus as an index (one page per document), or the one already at ``path``."""
    from vrag_compress.index import VisualIndex

    if VisualIndex.exists(path):
        return VisualIndex.open(path, model="minilm"), 0.0
    started = time.perf_counter()
    index = VisualIndex.create(
        path, model="minilm", compressor=method, ratio=ratio, store_images=False
    )
    pages = [text_page(d, t) for d, t in docs.items() if t.strip()]  # no text: nothing to encode
    report = index.add(pages, progress=progress, ocr="never")
    if report.failures:
        raise typer.BadParameter(
            f"{len(report.failures)} documents could not be indexed, first: {report.failures[0]}",
            param_hint="--dataset",
        )
    return index, time.perf_counter() - started


def rounded(values: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in values.items()}


@bench_app.command("rerank")
def rerank(
    dataset: Path = typer.Option(
        ..., help="BEIR-layout folder with a text corpus (e.g. ../shared/data/cranfield)."
    ),
    depth: int = typer.Option(50, min=1, help="BM25 candidates reranked per query."),
    queries: int = typer.Option(0, min=0, help="Judged queries to run (0: all)."),
    method: str = typer.Option("sap", help="Compressor of the index (its --method)."),
    ratio: float = typer.Option(0.1, min=0.0, max=1.0, help="Its keep ratio."),
    on_the_fly: int = typer.Option(
        5, "--on-the-fly", min=0, help="Queries whose candidates are also scored as new pages."
    ),
    index_dir: Path | None = typer.Option(
        None, "--index", help="Keep the index here (reused when it exists) [default: a temp dir]."
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the results here."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
) -> None:
    """BM25's top --depth reranked by MaxSim over stored compressed pages, vs BM25 alone."""
    from vrag_compress.beir import DatasetError, load_beir
    from vrag_compress_bench.eval.metrics import evaluate

    try:
        data = load_beir(dataset)
    except (DatasetError, OSError) as error:
        raise typer.BadParameter(str(error), param_hint="--dataset") from error
    if data.kind != "text":
        raise typer.BadParameter(
            "needs a text corpus (corpus.jsonl with text)", param_hint="--dataset"
        )
    doc_ids = list(data.docs)
    judged = data.judged_queries()[: queries or None]
    texts = [data.queries[q] for q in judged]
    with tempfile.TemporaryDirectory(prefix="vrag-rerank-") as scratch:
        index, build_s = build_index(
            index_dir or Path(scratch) / "corpus.vrag", data.docs, method, ratio, progress
        )
        with index:
            started = time.perf_counter()
            found = bm25_top(list(data.docs.values()), texts, depth)
            bm25_s = time.perf_counter() - started
            runs, times, fly = _run_queries(
                index, judged, texts, found, data.docs, on_the_fly, progress
            )
    result: dict[str, Any] = {
        "dataset": str(dataset),
        "documents": len(doc_ids),
        "queries": len(judged),
        "depth": depth,
        "index": {"model": "minilm", "method": method, "ratio": ratio, "build_s": round(build_s)},
        "bm25_s": round(bm25_s, 2),
        "rerank_ms_p50": round(statistics.median(times) * 1000, 2) if times else None,
    }
    for name, run in runs.items():  # a query BM25 found nothing for keeps an empty ranking
        filled = {q: r or {doc_ids[0]: 0.0} for q, r in run.items()}
        result[name] = rounded(evaluate(data.qrels, filled, METRICS))
    if fly:
        result["on_the_fly"] = {
            "queries": len(fly),
            "max_abs_diff": round(max(f["diff"] for f in fly), 5),
            "ms_per_query_p50": round(statistics.median(f["ms"] for f in fly), 1),
        }
    _report(result, json_out)


def _run_queries(
    index: Any,
    judged: list[str],
    texts: list[str],
    found: list[list[tuple[int, float]]],
    docs: dict[str, str],
    on_the_fly: int,
    progress: bool,
) -> tuple[dict[str, dict[str, dict[str, float]]], list[float], list[dict[str, float]]]:
    """The three runs (BM25, reranked, MaxSim over the index), the rerank times and the
    on-the-fly checks."""
    from vrag_compress.ingest import page_id

    doc_ids = list(docs)
    runs: dict[str, dict[str, dict[str, float]]] = {"bm25": {}, "reranked": {}, "maxsim": {}}
    times: list[float] = []
    fly: list[dict[str, float]] = []
    with task_progress(Console(stderr=True), disable=not progress) as bars:
        task = bars.add_task("reranking", total=len(judged))
        for n, (query_id, text) in enumerate(zip(judged, texts, strict=True)):
            candidates = [doc_ids[i] for i, _ in found[n]]
            runs["bm25"][query_id] = {doc_ids[i]: s for i, s in found[n]}
            started = time.perf_counter()
            scores = index.score_pages(text, [page_id(d, 1) for d in candidates])
            times.append(time.perf_counter() - started)
            runs["reranked"][query_id] = dict(zip(candidates, scores, strict=True))
            hits = index.search(text, k=10, mode="exact")
            runs["maxsim"][query_id] = {h.doc_id: h.score for h in hits}
            if n < on_the_fly and candidates:
                fly.append(_on_the_fly(index, text, candidates, docs, scores))
            bars.advance(task)
    return runs, times, fly


def _on_the_fly(
    index: Any, query: str, candidates: list[str], docs: dict[str, str], stored: list[float]
) -> dict[str, float]:
    """The same candidates as pages outside the index: their largest score difference from the
    stored ones (fp16 storage) and the time to encode, compress and score them."""
    started = time.perf_counter()
    fresh = index.score_pages(query, [text_page(d, docs[d]) for d in candidates])
    ms = (time.perf_counter() - started) * 1000
    return {"diff": max(abs(a - b) for a, b in zip(fresh, stored, strict=True)), "ms": ms}


def _report(result: dict[str, Any], json_out: Path | None) -> None:
    console = Console()
    table = Table(f"run ({result['queries']} queries, depth {result['depth']})", *METRICS)
    labels = {
        "bm25": "BM25 alone (bm25s)",
        "reranked": f"BM25 top {result['depth']} reranked by MaxSim",
        "maxsim": "MaxSim over the whole index",
    }
    for key, label in labels.items():
        table.add_row(label, *(f"{result[key][m]:.4f}" for m in METRICS))
    console.print(table)
    console.print(f"rerank p50 {result['rerank_ms_p50']} ms per query (stored vectors)")
    if "on_the_fly" in result:
        fly = result["on_the_fly"]
        console.print(
            f"on the fly ({fly['queries']} queries): {fly['ms_per_query_p50']} ms per query, "
            f"largest score difference from the stored vectors {fly['max_abs_diff']}"
        )
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {json_out}")
