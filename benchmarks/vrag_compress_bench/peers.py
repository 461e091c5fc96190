"""Peers in the same run: ``vrag bench store --against muvera,fast-plaid``.

Other multi-vector engines run on the very pages and queries our store was just measured on, and
are scored against the same exact reference (our store's exact MaxSim over the same fp16
vectors), so their recall@10 and latency compare with ours without a second run at another load.
The pages reach the peers through `vrag bench plaid`'s exchange folder (`write_exchange`): one
fp16 ``[T, D]`` matrix and its bounds, which fast-plaid's own Python reads and MUVERA memory-maps.

Every requested peer is reported under ``peers.<name>``: ``status`` ``ok`` with ``p50_ms``,
``recall@10``, ``build_s`` and ``bytes_per_page``; or ``timeout`` (with ``timeout_s``),
``unavailable`` (with a one-line ``reason`` saying how to make it available) or ``failed``
(with the error), the four measures then ``null``: a peer is never dropped from the report.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from vrag_compress.extras import install_command
from vrag_compress_bench.plaid_exchange import (
    RUNNER,
    _positions,
    read_results,
    recall_at_10,
    write_exchange,
)

err = Console(stderr=True)
PEERS = ("muvera", "fast-plaid")
MEASURES = ("p50_ms", "recall@10", "build_s", "bytes_per_page")
PLAID_SETUP = (
    "python -m venv /tmp/fastplaid && /tmp/fastplaid/bin/pip install torch==2.11.0 "
    "fast-plaid==1.7.0.2110, then pass --plaid-python or set VRAG_FAST_PLAID_PYTHON"
)
# MUVERA's FDE as in the paper's main experiments (Dhulipala et al. 2024): 20 repetitions of
# 2^5 SimHash partitions, each vector AMS-sketched to 16 dimensions: 10,240 floats per page.
FDE_REPETITIONS = 20
FDE_SIMHASH = 5
FDE_PROJECTION = 16
HNSW_M = 32  # faiss's usual graph degree; efConstruction stays faiss's default (40)
ENCODE_BATCH = 256  # pages per FDE batch (and per HNSW add): the timeout is checked between


class PeerTimeout(Exception):
    """A peer ran past ``--peer-timeout``; ``stage`` says where it was."""

    def __init__(self, stage: str):
        super().__init__(stage)
        self.stage = stage


class Deadline:
    """``--peer-timeout`` for a peer run in this process: checked between batches and queries
    (nothing can stop a running faiss call), so it is overrun by one batch at most."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def check(self, stage: str) -> None:
        if time.monotonic() > self.end:
            raise PeerTimeout(stage)


def parse_peers(text: str | None) -> list[str]:
    """``--against muvera,fast-plaid`` as a list (an unknown name is a usage error, exit 2)."""
    names = [part.strip() for part in (text or "").split(",") if part.strip()]
    unknown = [name for name in names if name not in PEERS]
    if unknown:
        raise typer.BadParameter(
            f"unknown peer {unknown[0]!r}: use {', '.join(PEERS)}", param_hint="--against"
        )
    return list(dict.fromkeys(names))


def default_plaid_python() -> Path:
    """fast-plaid's Python: ``VRAG_FAST_PLAID_PYTHON``, else the venv the docs create."""
    return Path(os.environ.get("VRAG_FAST_PLAID_PYTHON", "/tmp/fastplaid/bin/python"))


def write_pages(folder: Path, pages: Any, queries: list[np.ndarray], threads: int) -> None:
    """The exchange folder every peer reads (written before our store's run consumes
    ``pages``; fast-plaid's default 4-bit residuals)."""
    write_exchange(folder, pages, queries, threads=threads, nbits=4)


def run_peers(
    names: list[str],
    folder: Path,
    queries: list[np.ndarray],
    reference: list[list[str]],
    *,
    timeout_s: float,
    plaid_python: Path,
    muvera_candidates: int,
) -> dict[str, dict[str, Any]]:
    """Each peer in turn on the exchange ``folder``, scored against ``reference`` (our exact
    top-10 page ids per query); a peer that times out, cannot run or fails says so."""
    exact = [_positions(ids) for ids in reference]
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "muvera": lambda: muvera_peer(folder, queries, exact, muvera_candidates, timeout_s),
        "fast-plaid": lambda: plaid_peer(folder, exact, plaid_python, timeout_s),
    }
    report: dict[str, dict[str, Any]] = {}
    for name in names:
        err.print(f"peer {name}: building and searching ...")
        try:
            report[name] = runs[name]()
        except PeerTimeout as stop:
            report[name] = not_run(
                "timeout", f"stopped after {timeout_s:g} s ({stop.stage})", timeout_s=timeout_s
            )
        except Exception as error:  # a late failure must not lose our store's measures
            report[name] = not_run("failed", f"{type(error).__name__}: {error}"[:500])
    return report


def not_run(status: str, reason: str, **extra: Any) -> dict[str, Any]:
    """A peer with no measures: why, and the four measures as ``null`` (never dropped)."""
    return {"status": status, "reason": reason, **extra, **dict.fromkeys(MEASURES)}


def muvera_peer(
    folder: Path,
    queries: list[np.ndarray],
    exact: list[list[int]],
    candidates: int,
    timeout_s: float,
) -> dict[str, Any]:
    """MUVERA: a document FDE per page in a faiss inner-product `IndexHNSWFlat`, each query's
    FDE retrieves ``candidates`` pages, reranked by exact MaxSim over the same fp16 vectors our
    store scores. p50 is the whole query (FDE + HNSW + rerank); build is FDE + HNSW."""
    try:
        from muvera import Muvera
    except ImportError:
        return not_run("unavailable", f"muvera-python is not installed: {install_command('bench')}")
    deadline = Deadline(timeout_s)
    tokens = np.load(folder / "pages.npy", mmap_mode="r")
    bounds = np.load(folder / "bounds.npy")
    encoder = fde_encoder(Muvera, tokens.shape[1])
    index, fde_s, hnsw_s = _build_hnsw(encoder, tokens, bounds, deadline)
    index.hnsw.efSearch = max(2 * candidates, 64)
    top, times = [], []
    for q in queries:
        deadline.check("searching")
        t0 = time.perf_counter()
        top.append(_muvera_search(encoder, index, tokens, bounds, q, candidates))
        times.append((time.perf_counter() - t0) * 1000)
    n_pages = len(bounds) - 1
    return {
        "status": "ok",
        "p50_ms": round(float(np.median(times)), 3),
        "recall@10": recall_at_10(exact, top),
        "build_s": round(fde_s + hnsw_s, 3),
        "bytes_per_page": round((_index_bytes(index) + tokens.nbytes) / n_pages, 1),
        "p95_ms": round(float(np.percentile(times, 95)), 3),
        "fde_s": round(fde_s, 3),
        "hnsw_s": round(hnsw_s, 3),
        "fde_dim": encoder.output_dimension,
        "candidates": candidates,
        "settings": {
            "repetitions": encoder.num_repetitions,
            "simhash_projections": encoder.num_simhash_projections,
            "projection": encoder.projection_type,
            "projection_dim": encoder.projection_dimension,
            "hnsw_m": HNSW_M,
            "ef_search": index.hnsw.efSearch,
        },
        "versions": {"muvera_python": _version("muvera-python")},
    }


def fde_encoder(muvera: Any, dim: int) -> Any:
    """The paper's FDE (20 x 2^5 partitions, AMS sketch to 16 dims; vectors of 16 dims or fewer
    are kept as they are, which the sketch could only blur), seeded with the package's 42."""
    if dim <= FDE_PROJECTION:
        return muvera(FDE_REPETITIONS, FDE_SIMHASH, dim)
    return muvera(
        FDE_REPETITIONS,
        FDE_SIMHASH,
        dim,
        projection_type="ams_sketch",
        projection_dimension=FDE_PROJECTION,
    )


def _build_hnsw(
    encoder: Any, tokens: np.ndarray, bounds: np.ndarray, deadline: Deadline
) -> tuple[Any, float, float]:
    """Pages' document FDEs added batch by batch to an inner-product HNSW graph; the seconds
    spent encoding and adding, apart."""
    import faiss

    index = faiss.IndexHNSWFlat(encoder.output_dimension, HNSW_M, faiss.METRIC_INNER_PRODUCT)
    fde_s = hnsw_s = 0.0
    n_pages = len(bounds) - 1
    for start in range(0, n_pages, ENCODE_BATCH):
        deadline.check(f"building, {start} of {n_pages} pages indexed")
        stop = min(start + ENCODE_BATCH, n_pages)
        t0 = time.perf_counter()
        pages = [
            np.asarray(tokens[a:b], np.float32)
            for a, b in zip(bounds[start:stop], bounds[start + 1 : stop + 1], strict=True)
        ]
        fdes = np.ascontiguousarray(encoder.encode_documents(pages), dtype=np.float32)
        t1 = time.perf_counter()
        index.add(fdes)
        fde_s, hnsw_s = fde_s + t1 - t0, hnsw_s + time.perf_counter() - t1
    return index, fde_s, hnsw_s


def _muvera_search(
    encoder: Any,
    index: Any,
    tokens: np.ndarray,
    bounds: np.ndarray,
    query: np.ndarray,
    candidates: int,
) -> list[int]:
    """One query: its FDE, the HNSW candidates, and their exact MaxSim top 10."""
    from vrag_compress.scoring.packed import gather_pages, maxsim_scores, top_k

    q = np.ascontiguousarray(query, dtype=np.float32)
    fde = np.asarray(encoder.encode_queries(q), dtype=np.float32)[None]
    _, found = index.search(fde, candidates)
    pages = found[0][found[0] >= 0].astype(np.int64)
    rows, page_bounds = gather_pages(bounds, pages)
    scores = maxsim_scores([q], tokens[rows], page_bounds)[0]
    return [int(p) for p in pages[top_k(scores, 10)]]


def _index_bytes(index: Any) -> int:
    """The HNSW index's serialized size: its FDEs (fp32) and its graph."""
    import faiss

    return int(faiss.serialize_index(index).nbytes)


def plaid_peer(
    folder: Path, exact: list[list[int]], python: Path, timeout_s: float
) -> dict[str, Any]:
    """fast-plaid under its own Python (`plaid_runner`, as `vrag bench plaid` runs it), killed
    with its whole process group past ``timeout_s``; its results scored against ``exact``."""
    if not python.is_file():
        return not_run("unavailable", f"no fast-plaid Python at {python}: {PLAID_SETUP}")
    try:
        proc = subprocess.Popen(
            [str(python), str(RUNNER), str(folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: a timeout kills all it started
        )
    except OSError as error:
        return not_run("unavailable", f"{python} cannot run ({error}): {PLAID_SETUP}")
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise PeerTimeout("fast-plaid's process killed") from None
    if proc.returncode != 0:
        return _plaid_error(python, stderr)
    n_pages = len(np.load(folder / "bounds.npy")) - 1
    result = read_results(folder, len(exact), n_pages)
    return {
        "status": "ok",
        "p50_ms": round(float(np.median(result["latency_ms"])), 3),
        "recall@10": recall_at_10(exact, result["top"]),
        "build_s": round(result["build_s"], 3),
        "bytes_per_page": round(result["index_bytes"] / n_pages, 1),
        "p95_ms": round(float(np.percentile(result["latency_ms"], 95)), 3),
        "versions": result["versions"],
        "settings": result["settings"],
    }


def _plaid_error(python: Path, stderr: str) -> dict[str, Any]:
    """fast-plaid's process failed: unavailable when its Python lacks fast_plaid or torch."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "no error output"
    if "ModuleNotFoundError" in last:
        return not_run("unavailable", f"{python}: {last}; {PLAID_SETUP}")
    return not_run("failed", f"fast-plaid's process failed: {last}"[:500])


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def print_peers(report: dict[str, Any], out: Console) -> None:
    """Our two-stage search and each peer: recall@10, p50, build, bytes/page, status; then why
    each peer that has no measures has none."""
    table = Table(title="peers in the same run (same vectors, same exact reference)")
    for column in ("engine", "recall@10", "p50 ms", "build s", "bytes/page", "status"):
        table.add_column(column, justify="left" if column in ("engine", "status") else "right")
    lat = report["latency_ms"]
    ours = [report["recall@10_two_stage"], lat["two_stage"], report["build_s"]]
    table.add_row("vrag two-stage", *_cells([*ours, report["bytes_per_page"]]), "ok")
    for name, peer in report["peers"].items():
        measures = [peer["recall@10"], peer["p50_ms"], peer["build_s"], peer["bytes_per_page"]]
        table.add_row(name, *_cells(measures), peer["status"])
    out.print(table)
    for name, peer in report["peers"].items():
        if peer["status"] != "ok":
            out.print(f"{name}: {peer['status']}: {peer['reason']}")


def _cells(values: list[float | None]) -> list[str]:
    """recall@10, p50 ms, build s, bytes/page as the table shows them."""
    formats = ("{:.4f}", "{:.2f}", "{:.2f}", "{:.0f}")
    return ["n/a" if v is None else f.format(v) for f, v in zip(formats, values, strict=True)]
