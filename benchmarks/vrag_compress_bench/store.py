"""`vrag bench store`: size and query latency of the local store on generated pages.

Compares (a) brute-force MaxSim over uncompressed pages with colpali-engine's
`score_multi_vector` (what byaldi does), (b) the store's exact search over compressed pages,
(c) its two-stage search (centroid-code candidates + exact rerank), `auto` (what the cost
model picks), and the floor: one BLAS product of a query against the same compressed token
matrix. Pages are either resampled real MiniLM token vectors of a BEIR corpus with its real
queries (``--data real``, see `real_pages`) or synthetic topic mixtures (``--data synthetic``, a
stress test whose ranks 2–10 are near-ties). Recall of (c) is measured against (b) on every query.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from vrag_compress_bench.app import bench_app
from vrag_compress_bench.paths import scratch_dir
from vrag_compress_bench.plaid_exchange import recall_at_10
from vrag_compress_bench.store_timing import (
    add_all,
    first_query_cost,
    page_batches,
    peak_rss_mb,
    progress,
    query_process_cost,
    search_times,
    timed_search,
)

out = Console()
err = Console(stderr=True)
FULL_STORE_MAX_BYTES = 4 << 30


@bench_app.command("store")
def bench_store(
    pages: int = typer.Option(3006, "--pages", min=10, help="Pages in the collection."),
    tokens_full: int = typer.Option(1030, "--tokens-full", min=2, help="Vectors per full page."),
    ratio: float = typer.Option(0.1, "--ratio", help="Keep ratio of the compressed pages."),
    queries: int = typer.Option(200, "--queries", min=1, help="Queries for (b) and (c)."),
    query_tokens: int = typer.Option(20, "--query-tokens", min=1, help="Vectors per query."),
    dim: int = typer.Option(128, "--dim", min=2, help="Vector dimension."),
    bruteforce_queries: int = typer.Option(
        5, "--bruteforce-queries", min=0, help="Queries for (a), which takes seconds each."
    ),
    exact_queries: int | None = typer.Option(
        None, "--exact-queries", help="Queries for (b) [default: all up to 1M tokens, else 20]."
    ),
    full_store: bool | None = typer.Option(
        None,
        "--full-store/--no-full-store",
        help="Also write the uncompressed pages to a store to measure its size "
        "[default: when it needs < 4 GiB]; otherwise the size is computed.",
    ),
    batch: int = typer.Option(256, "--batch", min=1, help="Pages per add() call."),
    candidates_per_token: int = typer.Option(64, "--candidates-per-token", min=1),
    nprobe: int = typer.Option(32, "--nprobe", min=1),
    threads_list: str = typer.Option(
        str(os.cpu_count() or 1),
        "--threads",
        help="Threads for BLAS, torch and FAISS (the largest of a list); a list such as 1,2 also "
        "times two-stage search with each count as the store's threads option "
        "(latency_ms_by_threads, queries_per_s_by_threads).",
    ),
    seed: int = typer.Option(0, "--seed"),
    data_kind: str = typer.Option(
        "synthetic",
        "--data",
        help="real: resampled MiniLM token vectors of --source-dataset with its real queries; "
        "skewed: the same resampler over a synthetic Zipf vocabulary whose cell occupancy "
        "--skew sets (0 uniform, 1.5 heavy); synthetic: topic mixtures (a stress test).",
    ),
    skew: float = typer.Option(
        1.0, "--skew", min=0.0, help="--data skewed: Zipf exponent of the word frequencies."
    ),
    source_dataset: Path | None = typer.Option(
        None,
        "--source-dataset",
        help="BEIR folder, or a folder of PDFs (their page text; queries drawn from it), "
        "for --data real [default: the shared Cranfield].",
    ),
    cache_dir: Path | None = typer.Option(
        None, "--cache-dir", help="Where --data real caches its encodings [~/.cache/vrag]."
    ),
    codes: str | None = typer.Option(
        None,
        "--codes",
        help="Residual codes kept by the candidate index: none, 4bit, 2bit, 1bit "
        "[default: the store's layout by size].",
    ),
    fp16: bool | None = typer.Option(
        None,
        "--fp16/--no-fp16",
        help="--no-fp16: the compressed store keeps only the --codes (4bit/2bit/1bit), no fp16 "
        "vectors; its exact and two-stage searches score the decoded vectors. --fp16 keeps fp16 "
        "vectors. Neither: the default layout by size (fp16 below 500,000 vectors, 4bit codes "
        "only from there; store/local/layout.py).",
    ),
    workdir: Path | None = typer.Option(None, "--dir", help="Where to build the stores [tmp]."),
    keep_store: bool = typer.Option(
        False,
        "--keep-store",
        help="Keep the compressed store (its path is printed and in the JSON as store_path), "
        "e.g. to time queries on stores of two sizes side by side later.",
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the results as JSON here."),
    backend: str = typer.Option(
        "embedded",
        "--backend",
        help="embedded (LocalStore) or qdrant-local (Qdrant's local "
        "mode: prefetch + MaxSim rerank recall against the embedded exact search).",
    ),
    variants: str = typer.Option(
        "mean,binary", "--variants", help="qdrant-local: candidate fields to compare."
    ),
    prefetch: int = typer.Option(
        100, "--prefetch", min=1, help="qdrant-local: pages prefetched for the rerank."
    ),
    against: str | None = typer.Option(
        None,
        "--against",
        help="Peers run on the same pages and queries and scored against the same exact "
        "reference: muvera, fast-plaid, or both (muvera,fast-plaid); JSON peers.<name>.",
    ),
    peer_timeout: float = typer.Option(
        1800.0,
        "--peer-timeout",
        min=0.0,
        help="Seconds each peer may take (build + queries); past it: status timeout.",
    ),
    plaid_python: Path | None = typer.Option(
        None,
        "--plaid-python",
        help="fast-plaid's Python for --against fast-plaid "
        "[env VRAG_FAST_PLAID_PYTHON, else /tmp/fastplaid/bin/python].",
    ),
    muvera_candidates: int = typer.Option(
        100, "--muvera-candidates", min=1, help="Pages MUVERA's HNSW hands to the exact rerank."
    ),
) -> None:
    """On-disk size full vs compressed, latency of (a) (b) (c) and the BLAS floor, recall@10 of
    (c) against (b), add throughput; with --against, MUVERA and fast-plaid on the same pages.
    With --backend qdrant-local: recall@10 and latency of each Qdrant candidate variant against
    the embedded exact search."""
    from threadpoolctl import threadpool_limits

    from vrag_compress.compress.base import budget
    from vrag_compress.store.local.layout import choose_layout
    from vrag_compress_bench import peers as peer_runs

    peers = peer_runs.parse_peers(against)
    if peers and backend != "embedded":
        raise typer.BadParameter("peers run with --backend embedded", param_hint="--against")
    thread_counts = _thread_counts(threads_list)
    threads = max(thread_counts)
    if backend not in ("embedded", "qdrant-local"):
        raise typer.BadParameter("use embedded or qdrant-local", param_hint="--backend")
    if data_kind not in ("synthetic", "real", "skewed"):
        raise typer.BadParameter("use real, skewed or synthetic", param_hint="--data")
    if codes not in (None, "none", "4bit", "2bit", "1bit"):
        raise typer.BadParameter("use none, 4bit, 2bit or 1bit", param_hint="--codes")
    if fp16 is False and codes == "none":
        raise typer.BadParameter("needs --codes 4bit, 2bit or 1bit", param_hint="--no-fp16")
    codes, fp16, layout_rule = choose_layout(codes, fp16)
    pool, source = _pool(data_kind, source_dataset, dim, skew, cache_dir, seed)
    k_tokens = budget(tokens_full, ratio)
    if backend == "qdrant-local":
        from vrag_compress_bench.store_qdrant import run_qdrant_bench

        with threadpool_limits(limits=threads):
            data = _generate(
                pages, tokens_full, k_tokens, dim, queries, query_tokens, batch, False, seed, pool
            )
            run_qdrant_bench(
                data,
                dim,
                batch,
                [v.strip() for v in variants.split(",")],
                prefetch,
                workdir,
                json_out,
                {
                    "pages": pages,
                    "tokens_full": tokens_full,
                    "tokens_compressed": k_tokens,
                    "queries": queries,
                    "query_tokens": query_tokens,
                    "dim": dim,
                    "prefetch": prefetch,
                    "threads": threads,
                    "seed": seed,
                },
            )
        return
    full_bytes = pages * tokens_full * dim * 2
    if full_store is None:
        full_store = full_bytes <= FULL_STORE_MAX_BYTES
    keep_full = full_store or bruteforce_queries > 0
    if keep_full and full_bytes > FULL_STORE_MAX_BYTES:
        raise typer.BadParameter(
            "full pages would need > 4 GiB; use --no-full-store and "
            "--bruteforce-queries 0 at this size"
        )
    root = scratch_dir("vrag-bench-store-", workdir)
    try:
        with threadpool_limits(limits=threads):
            _set_threads(threads)
            data = _generate(
                pages,
                tokens_full,
                k_tokens,
                dim,
                queries,
                query_tokens,
                batch,
                keep_full,
                seed,
                pool,
            )
            if peers:  # the exchange folder the peers read, written before _run frees the pages
                peer_runs.write_pages(root / "peers", data["compressed"], data["queries"], threads)
            report = _run(
                root,
                data,
                pages,
                k_tokens,
                dim,
                batch,
                full_store,
                full_bytes,
                bruteforce_queries,
                exact_queries,
                candidates_per_token,
                nprobe,
                thread_counts,
                codes,
                fp16,
                layout_rule,
                Milestones(None if json_out is None else json_out.with_suffix(".partial.json")),
            )
            if peers:
                report["peers"] = peer_runs.run_peers(
                    peers,
                    root / "peers",
                    data["queries"],
                    data["reference"],
                    timeout_s=peer_timeout,
                    plaid_python=plaid_python or peer_runs.default_plaid_python(),
                    muvera_candidates=muvera_candidates,
                )
    finally:
        if keep_store:
            shutil.rmtree(root / "full", ignore_errors=True)
            shutil.rmtree(root / "peers", ignore_errors=True)
            err.print(f"kept the compressed store at {root / 'compressed'}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if keep_store:
        report["store_path"] = str(root / "compressed")
    report["config"] = {
        "pages": pages,
        "tokens_full": tokens_full,
        "tokens_compressed": k_tokens,
        "ratio": ratio,
        "queries": queries,
        "query_tokens": query_tokens,
        "dim": dim,
        "candidates_per_token": candidates_per_token,
        "nprobe": nprobe,
        "threads": thread_counts if len(thread_counts) > 1 else threads,
        "seed": seed,
        "bruteforce_queries": bruteforce_queries,
        "data": data_kind,
        "source_dataset": None if source is None else str(source),
        "skew": skew if data_kind == "skewed" else None,
        "codes": codes,
        "fp16": fp16,
        "layout": layout_rule,
        "against": peers,
        "peer_timeout_s": peer_timeout if peers else None,
        "muvera_candidates": muvera_candidates if "muvera" in peers else None,
    }
    report["machine"] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    _print(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2))
        err.print(f"wrote {json_out}")


def _thread_counts(text: str) -> list[int]:
    """``--threads 1,2`` as ``[1, 2]`` (each at least 1)."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise typer.BadParameter(
            f"{text!r}: use a count or a list such as 1,2", param_hint="--threads"
        )
    return counts


def _set_threads(threads: int) -> None:
    import faiss

    faiss.omp_set_num_threads(threads)


def _pool(
    data_kind: str,
    source_dataset: Path | None,
    dim: int,
    skew: float,
    cache_dir: Path | None,
    seed: int,
) -> tuple[Any, Path | None]:
    """The token pool pages are resampled from (None: synthetic topic mixtures) and, for
    ``--data real``, its source folder."""
    if data_kind not in ("synthetic", "real", "skewed"):
        raise typer.BadParameter("use real, skewed or synthetic", param_hint="--data")
    if data_kind == "skewed":
        from vrag_compress_bench.skewed import skewed_pool

        return skewed_pool(dim, skew, seed=seed), None
    if data_kind == "synthetic":
        return None, None
    from vrag_compress_bench.real_pages import load_pool

    source = _real_source(source_dataset)
    err.print(f"encoding/loading real token vectors of {source} ...")
    return load_pool(source, dim, cache_dir or _default_cache(), seed=seed), source


def _real_source(source: Path | None) -> Path:
    from vrag_compress.shared_data import data_dir

    path = source or data_dir() / "cranfield"
    if not (path / "corpus.jsonl").is_file() and not any(path.rglob("*.pdf")):
        raise typer.BadParameter(
            f"{path} is neither a BEIR folder (no corpus.jsonl) nor a folder of PDFs",
            param_hint="--source-dataset",
        )
    return path


def _default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vrag" / "bench"


def _generate(
    pages: int,
    tokens_full: int,
    k: int,
    dim: int,
    n_queries: int,
    query_tokens: int,
    batch: int,
    keep_full: bool,
    seed: int,
    pool: Any = None,
) -> dict[str, Any]:
    """Compressed pages (random kept subsets of full pages) and queries.

    Synthetic queries are noisy copies of a full page's tokens (without full pages, its kept
    tokens plus as many unkept ones, in the full page's proportion). Real pages come from
    ``pool`` and the queries are the corpus's real ones."""
    if pool is not None:
        return _generate_real(pool, pages, tokens_full, k, n_queries, batch, keep_full, seed)
    from vrag_compress_bench.synthetic import clustered_pages, queries_for, topic_centres

    rng = np.random.default_rng(seed)
    centres = topic_centres(256, dim, seed)
    targets = np.sort(rng.integers(0, pages, size=n_queries))
    compressed = np.empty((pages, k, dim), dtype=np.float16)
    full = np.empty((pages, tokens_full, dim), dtype=np.float16) if keep_full else None
    qs: list[np.ndarray] = []
    with progress() as bar:
        task = bar.add_task("generating pages", total=pages)
        for start in range(0, pages, batch):
            n = min(batch, pages - start)
            width = tokens_full if keep_full else min(tokens_full, k + query_tokens)
            chunk = clustered_pages(n, width, dim, seed=seed + start, centres=centres)
            if full is not None:
                full[start : start + n] = chunk
                kept = np.sort(rng.random((n, tokens_full)).argsort(axis=1)[:, :k], axis=1)
                chunk_c = np.take_along_axis(chunk, kept[:, :, None], axis=1)
            else:
                chunk_c = chunk[:, :k]
            compressed[start : start + n] = chunk_c
            for t in targets[(targets >= start) & (targets < start + n)]:
                source = chunk[t - start]
                if not keep_full:  # draw from the full page: kept rows with the kept share only
                    n_kept = int(rng.binomial(query_tokens, k / tokens_full))
                    rows = np.concatenate(
                        [rng.integers(0, k, n_kept), np.arange(k, k + query_tokens - n_kept)]
                    )
                    source = source[np.minimum(rows, width - 1)]
                    source = source[rng.permutation(len(source))]
                qs.extend(queries_for(source[None], 1, query_tokens, seed=seed + int(t)))
            bar.advance(task, n)
    return {"compressed": compressed, "full": full, "queries": qs}


def _generate_real(
    pool: Any,
    pages: int,
    tokens_full: int,
    k: int,
    n_queries: int,
    batch: int,
    keep_full: bool,
    seed: int,
) -> dict[str, Any]:
    """Resampled real pages (compressed = random kept subsets) and the corpus's real queries.

    Without full pages the compressed ones are a `PageStream`: generated batch by batch while
    they are written, never all in memory (a million pages are 26 GB of fp16)."""
    from vrag_compress_bench.real_pages import pages as real_pages
    from vrag_compress_bench.real_pages import queries as real_queries

    if not keep_full:
        stream = PageStream(lambda: real_pages(pool, pages, k, seed=seed, batch=batch), pages, k)
        return {"compressed": stream, "full": None, "queries": real_queries(pool, n_queries)}
    rng = np.random.default_rng(seed)
    compressed = np.empty((pages, k, pool.dim), dtype=np.float16)
    full = np.empty((pages, tokens_full, pool.dim), dtype=np.float16) if keep_full else None
    width = tokens_full if keep_full else k
    with progress() as bar:
        task = bar.add_task("resampling real pages", total=pages)
        start = 0
        for chunk in real_pages(pool, pages, width, seed=seed, batch=batch):
            n = len(chunk)
            if full is not None:
                full[start : start + n] = chunk
                kept = np.sort(rng.random((n, tokens_full)).argsort(axis=1)[:, :k], axis=1)
                chunk = np.take_along_axis(chunk, kept[:, :, None], axis=1)
            compressed[start : start + n] = chunk
            start += n
            bar.advance(task, n)
    return {"compressed": compressed, "full": full, "queries": real_queries(pool, n_queries)}


class PageStream:
    """Compressed pages generated on demand, batch by batch (``len`` pages of
    ``tokens_per_page`` vectors); iterating again regenerates the same pages (seeded)."""

    def __init__(
        self, batches: Callable[[], Iterator[np.ndarray]], n_pages: int, tokens_per_page: int
    ):
        self.batches = batches
        self.n_pages = n_pages
        self.tokens_per_page = tokens_per_page

    def __len__(self) -> int:
        return self.n_pages

    def __iter__(self) -> Iterator[np.ndarray]:
        for chunk in self.batches():
            yield chunk.astype(np.float16)

    def head(self, rows: int) -> np.ndarray:
        """The first pages' vectors ``[≤ rows, D]`` (whole batches)."""
        parts, got = [], 0
        for chunk in self:
            parts.append(chunk.reshape(-1, chunk.shape[-1]))
            got += len(parts[-1])
            if got >= rows:
                break
        return np.concatenate(parts)[:rows]


def _run(
    root: Path,
    data: dict[str, Any],
    pages: int,
    k_tokens: int,
    dim: int,
    batch: int,
    full_store: bool,
    full_bytes: int,
    bruteforce_queries: int,
    exact_queries: int | None,
    candidates_per_token: int,
    nprobe: int,
    thread_counts: list[int],
    codes: str = "none",
    fp16: bool = True,
    layout_rule: str = "fixed",
    milestones: Milestones | None = None,
) -> dict[str, Any]:
    from vrag_compress.store import LocalStore

    note = milestones or Milestones(None)

    threads = max(thread_counts)
    written = data["compressed"]  # the fp16 pages, for the reference of a store without them

    config: dict[str, Any] = {"dim": dim, "model_id": "synthetic/clustered", "codes": codes}
    full_config = dict(config)  # the full pages' size is that of fp16 rows
    if not fp16:
        config["fp16"] = False
    if layout_rule == "auto":  # fp16 rows, or codes once `optimize` finds 500,000 vectors
        config["layout"] = "auto"
    # one segment in page order: the search matrix can then be the memory map itself (no copy);
    # the candidate index is trained once after the adds (timed as build_s), not while adding;
    # without fp16 the pages stay staged as fp16 rows until then, so the codes are trained on all
    options: dict[str, Any] = {
        "candidates_per_token": candidates_per_token,
        "nprobe": nprobe,
        "segment_max_bytes": 1 << 40,
        "centroid_min_tokens": -1,
        "codes_min_tokens": 0,
    }
    size_full = full_bytes / 2**20
    if full_store:
        with LocalStore.create(root / "full", full_config) as store:
            add_all(store, data["full"], batch, "writing full store")
        size_full = _dir_mb(root / "full")
        shutil.rmtree(root / "full")
    with LocalStore.create(root / "compressed", config, **options) as store:
        add_s = add_all(store, data["compressed"], batch, "writing compressed store")
        note(add_s=add_s)
        err.print("training the candidate index ...")
        t0 = time.perf_counter()
        store.optimize()
        build_s = time.perf_counter() - t0
    size_compressed = _dir_mb(root / "compressed")
    note(add_s=add_s, build_s=build_s, bytes_per_page=size_compressed * 2**20 / pages)
    qs = data["queries"]
    first_query_s, first_rss_mb, first_file_mb = first_query_cost(root / "compressed", qs[0])
    note(first_query_s=first_query_s, first_query_rss_mb=first_rss_mb)
    # a fresh process answering every query two-stage: the memory a query server needs
    _, query_rss_mb, query_file_mb = query_process_cost(root / "compressed", qs)
    note(query_peak_rss_mb=query_rss_mb, load_avg_before=os.getloadavg())
    load_before = os.getloadavg()
    blas_ms, blas_extrapolated = _blas_floor(data.pop("compressed"), qs[: min(len(qs), 50)])
    n_tokens = pages * k_tokens
    n_exact = exact_queries or (len(qs) if n_tokens <= 1_000_000 else min(10, len(qs)))
    t0 = time.perf_counter()
    with LocalStore.open(root / "compressed", readonly=True, **options) as store:
        store.search(qs[0], k=10, mode="two_stage")  # open + first answer: nothing is rebuilt
        open_s = time.perf_counter() - t0
        info = store.index_info() or {}
        note(params={k: info.get(k) for k in ("k", "nprobe", "rerank")}, tuned=info.get("tuned"))
        load_queries = os.getloadavg()
        two, two_times = search_times(store, qs, "two_stage", "two-stage search (c)")
        two_ms, two_p95 = float(np.median(two_times)), float(np.percentile(two_times, 95))
        _, auto_ms = timed_search(store, qs, "auto", "auto search")
        note(open_s=open_s, two_stage_ms=two_ms, auto_ms=auto_ms, load_avg_queries=load_queries)
        t0 = time.perf_counter()
        store.search(qs[0], k=10, mode="exact")  # loads the token matrix
        load_s = time.perf_counter() - t0
        _, exact_ms = timed_search(store, qs[:n_exact], "exact", "exact search (b)")
        note(load_s=load_s, exact_ms=exact_ms, exact_queries=n_exact)
        t0 = time.perf_counter()
        exact = _exact_top10(store, qs)  # every query in one pass: the recall reference
        data["reference"] = exact  # the peers (--against) are scored against it too
        reference_s = time.perf_counter() - t0
        note(reference_s=reference_s)
        # after the exact passes, which left every row converted: each count sees the same cache
        by_threads = _by_threads(store, qs, thread_counts) if len(thread_counts) > 1 else {}
    recall = recall_at_10(exact, two)
    vs_fp16: dict[str, float | None] = {"two_stage": None, "exact": None}
    if not fp16 and pages * k_tokens <= FP16_REFERENCE_MAX_VECTORS:
        truth = _fp16_top10(written, qs)
        vs_fp16 = {"two_stage": recall_at_10(truth, two), "exact": recall_at_10(truth, exact)}
        note(recall_vs_fp16=vs_fp16)
    size_index = info.get("bytes", 0) / 2**20
    brute_ms = (
        _bruteforce(data["full"], qs[:bruteforce_queries], threads) if bruteforce_queries else None
    )
    latency = {
        "bruteforce_full": brute_ms,
        "exact": exact_ms,
        "two_stage": two_ms,
        "two_stage_p95": two_p95,
        "auto": auto_ms,
        "blas_floor": blas_ms,
    }
    return {
        "pages": pages,
        "size_mb": {"full": round(size_full, 2), "compressed": round(size_compressed, 2)},
        "latency_ms": {k: (None if v is None else round(v, 3)) for k, v in latency.items()},
        "recall@10_two_stage": round(recall, 4),
        # a store without fp16 vectors: its answers against exact MaxSim over the fp16 vectors
        # it was given (what its codes lose), up to FP16_REFERENCE_MAX_VECTORS; else null
        "recall@10_vs_fp16": {k: None if v is None else round(v, 4) for k, v in vs_fp16.items()},
        "add_pages_per_s": round(pages / add_s, 1),
        "full_size_measured": full_store,
        "queries_timed": {
            "bruteforce_full": min(bruteforce_queries, len(qs)),
            "exact": n_exact,
            "two_stage": len(qs),
        },
        "load_s": round(load_s, 3),
        "token_index_build_s": round(build_s, 3),
        "build_s": round(build_s, 3),
        "open_s": round(open_s, 3),
        "first_query_s": round(first_query_s, 3),
        **by_threads,
        "load_avg": {
            "before": list(load_before),
            "queries": list(load_queries),
            "after": list(os.getloadavg()),
        },
        "first_query_rss_mb": round(first_rss_mb, 1),
        "first_query_rss_file_mb": round(first_file_mb, 1),
        "query_peak_rss_mb": round(query_rss_mb, 1),
        "query_peak_rss_file_mb": round(query_file_mb, 1),
        "bench_peak_rss_mb": round(peak_rss_mb(), 1),
        "reference_s": round(reference_s, 3),
        "add_s": round(add_s, 3),
        "bytes_per_page": round(size_compressed * 2**20 / pages, 1),
        "size_mb_index": round(size_index, 2),
        "params": {k: info.get(k) for k in ("k", "nprobe", "rerank", "codes", "params_from")},
        "tuned": info.get("tuned"),
        "index_bytes_per_page": info.get("bytes_per_page"),
        "recall_queries": len(qs),
        "speedup_exact_vs_bruteforce": None if brute_ms is None else round(brute_ms / exact_ms, 1),
        "exact_over_blas_floor": round(exact_ms / blas_ms, 2),
        "blas_floor_extrapolated": blas_extrapolated,
        "compressed_over_full_size": round(size_compressed / size_full, 4),
    }


class Milestones:
    """Each measure as soon as it is taken, written to ``path`` (JSON, with the time of each):
    a long run (a million pages) that is stopped or fails late still leaves what it measured,
    apart from the final report."""

    def __init__(self, path: Path | None):
        self.path = path
        self.seen: dict[str, Any] = {}

    def __call__(self, **measures: Any) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.seen.update({k: {"value": v, "at": stamp} for k, v in measures.items()})
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.seen, indent=2, default=float))


def _by_threads(store: Any, qs: list[np.ndarray], counts: list[int]) -> dict[str, Any]:
    """Two-stage search with each thread count as the store's ``threads`` option (BLAS and
    FAISS limited to it too): the median latency of single queries, their throughput, and the
    throughput of `search_many` batches of 8 (one query per thread). Counts take turns over two
    rounds, so a change in the machine's load hits each alike."""
    from threadpoolctl import threadpool_limits

    latencies: dict[int, list[float]] = {n: [] for n in counts}
    batch_s: dict[int, float] = dict.fromkeys(counts, 0.0)
    for _ in range(2):
        for n in counts:
            store.options.threads = n
            with threadpool_limits(limits=n):
                _set_threads(n)
                for q in qs:
                    t0 = time.perf_counter()
                    store.search(q, k=10, mode="two_stage")
                    latencies[n].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                for start in range(0, len(qs), 8):
                    store.search_many(qs[start : start + 8], k=10, mode="two_stage")
                batch_s[n] += time.perf_counter() - t0
    store.options.threads = 1
    return {
        "latency_ms_by_threads": {
            str(n): round(float(np.median(v)) * 1000, 3) for n, v in latencies.items()
        },
        "queries_per_s_by_threads": {
            str(n): round(len(v) / sum(v), 1) for n, v in latencies.items()
        },
        "batch_queries_per_s_by_threads": {
            str(n): round(2 * len(qs) / t, 1) for n, t in batch_s.items()
        },
    }


FP16_REFERENCE_MAX_VECTORS = 20_000_000  # one more pass over the pages: ~200k pages at most


def _fp16_top10(pages: Any, qs: list[np.ndarray], batch: int = 4096) -> list[list[str]]:
    """Exact top-10 page ids of every query over the fp16 pages as written (``add_all``'s
    ids): the truth a store that keeps only codes is measured against."""
    from vrag_compress.scoring.packed import maxsim_scores, top_k

    best_ids = np.zeros((len(qs), 0), dtype=np.int64)
    best = np.zeros((len(qs), 0), dtype=np.float32)
    start = 0
    for chunk in page_batches(pages, batch):
        n, k, dim = chunk.shape
        bounds = np.arange(n + 1, dtype=np.int64) * k
        scores = maxsim_scores(qs, np.asarray(chunk, np.float32).reshape(-1, dim), bounds)
        best = np.concatenate([best, scores.astype(np.float32)], axis=1)
        ids = np.broadcast_to(start + np.arange(n), scores.shape)
        best_ids = np.concatenate([best_ids, ids], axis=1)
        keep = np.stack([top_k(row, 10) for row in best])
        best = np.take_along_axis(best, keep, axis=1)
        best_ids = np.take_along_axis(best_ids, keep, axis=1)
        start += n
    return [[f"page-{i:07d}" for i in row] for row in best_ids]


def _exact_top10(store: Any, qs: list[np.ndarray], batch: int = 1000) -> list[list[str]]:
    """Exact top-10 page ids of every query, scored in batches: one pass over the collection
    per batch (the exact kernel blocks the query tokens itself), so at a million pages the
    reference costs one pass, not one per 50 queries."""
    ids: list[list[str]] = []
    with progress() as bar:
        task = bar.add_task("exact reference for recall", total=len(qs))
        for start in range(0, len(qs), batch):
            part = qs[start : start + batch]
            ids.extend(
                [h.page_id for h in hits] for hits in store.search_many(part, 10, mode="exact")
            )
            bar.advance(task, len(part))
    return ids


def _blas_floor(compressed: Any, qs: list[np.ndarray]) -> tuple[float, bool]:
    """Median time of one ``q @ T.T`` over the compressed token matrix in fp32.

    Above 2 GiB of fp32 the product runs on the first 2 GiB and is scaled by size (flagged)."""
    if isinstance(compressed, PageStream):
        dim = qs[0].shape[1]
        total = len(compressed) * compressed.tokens_per_page
        flat = compressed.head((2 << 30) // (dim * 4))
    else:
        flat = compressed.reshape(-1, compressed.shape[-1])
        total = len(flat)
    rows = min(len(flat), (2 << 30) // (flat.shape[1] * 4))
    tokens = flat[:rows].astype(np.float32)
    times = []
    for q in qs:
        t0 = time.perf_counter()
        q @ tokens.T
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1000) * total / rows, rows < total


def _bruteforce(full: np.ndarray, qs: list[np.ndarray], threads: int) -> float:
    """colpali-engine's `score_multi_vector` over all full pages (fp32 tensors), per query."""
    import torch

    from vrag_compress.compat import ensure_torchvision_importable

    ensure_torchvision_importable()  # must run before colpali-engine imports transformers
    from colpali_engine.utils.processing_utils import BaseVisualRetrieverProcessor

    torch.set_num_threads(threads)
    ps = [torch.from_numpy(page.astype(np.float32)) for page in full]
    times = []
    with progress() as bar:
        task = bar.add_task("brute force (a)", total=len(qs))
        for q in qs:
            t0 = time.perf_counter()
            BaseVisualRetrieverProcessor.score_multi_vector([torch.from_numpy(q)], ps, device="cpu")
            times.append(time.perf_counter() - t0)
            bar.advance(task)
    return float(np.median(times) * 1000)


def _dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def _print(report: dict[str, Any]) -> None:
    lat = report["latency_ms"]
    table = Table(
        title=f"vrag bench store: {report['pages']} pages "
        f"({report['config']['tokens_full']} -> {report['config']['tokens_compressed']}"
        f" vectors/page, {_query_kind(report['config'])})"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        (
            "size full (MB)",
            f"{report['size_mb']['full']:.1f}"
            + ("" if report["full_size_measured"] else " (computed)"),
        ),
        ("size compressed (MB)", f"{report['size_mb']['compressed']:.1f}"),
        ("(a) brute force full, colpali-engine (ms/query)", _fmt(lat["bruteforce_full"])),
        ("(b) exact, compressed (ms/query)", _fmt(lat["exact"])),
        ("(c) two-stage, compressed (ms/query)", _fmt(lat["two_stage"])),
        ("(c) two-stage p95 (ms/query)", _fmt(lat["two_stage_p95"])),
        ("auto mode, compressed (ms/query)", _fmt(lat["auto"])),
        ("BLAS floor, one q @ T.T (ms)", _fmt(lat["blas_floor"])),
        ("recall@10 (c) vs (b)", f"{report['recall@10_two_stage']:.4f}"),
        ("add throughput (pages/s)", f"{report['add_pages_per_s']:.1f}"),
        ("speed-up (a)/(b)", _fmt(report["speedup_exact_vs_bruteforce"])),
        ("(b) / BLAS floor", _fmt(report["exact_over_blas_floor"])),
        ("candidate index build (s)", f"{report['build_s']:.2f}"),
        ("open + first two-stage answer (s)", f"{report['open_s']:.3f}"),
        ("fresh process: open + first answer (s)", f"{report['first_query_s']:.3f}"),
        ("fresh process: peak RSS (MB)", f"{report['first_query_rss_mb']:.0f}"),
        ("bytes per page (segments + index)", f"{report['bytes_per_page']:.0f}"),
        ("index parameters", json.dumps(report["params"])),
    ]
    for n, ms in report.get("latency_ms_by_threads", {}).items():
        rows.append(
            (
                f"two-stage with {n} thread(s): ms / queries/s / batched queries/s",
                f"{ms:.2f} / {report['queries_per_s_by_threads'][n]:.1f} / "
                f"{report['batch_queries_per_s_by_threads'][n]:.1f}",
            )
        )
    for name, value in rows:
        table.add_row(name, value)
    out.print(table)
    if "peers" in report:
        from vrag_compress_bench.peers import print_peers

        print_peers(report, out)


def _query_kind(config: dict[str, Any]) -> str:
    if config.get("data") == "real":
        return f"real pages and queries of {Path(config['source_dataset']).name}"
    if config.get("data") == "skewed":
        return f"Zipf-skewed pages and queries, skew {config['skew']}"
    return f"{config['query_tokens']}-vector synthetic queries"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"
