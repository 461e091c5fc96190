"""The exchange with fast-plaid's process (`plaid_runner`, under fast-plaid's own Python):
the vector files it reads, the results it writes back, and recall against our exact truth.
Shared by `vrag bench plaid` and `vrag bench store --against fast-plaid`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

RUNNER = Path(__file__).with_name("plaid_runner.py")


def _positions(page_ids: list[str]) -> list[int]:
    """`add_all`'s page ids (``page-0000123``) as page positions, fast-plaid's document ids."""
    return [int(p.rsplit("-", 1)[1]) for p in page_ids]


def write_exchange(
    folder: Path,
    pages: Any,
    queries: list[np.ndarray],
    *,
    threads: int,
    nbits: int,
    top_k: int = 10,
) -> None:
    """The files fast-plaid's process reads: every page's vectors as one fp16 ``[T, D]``
    matrix, written batch by batch (``pages``: an array ``[P, k, D]``, or a sized iterable of
    such batches, `PageStream`; every page has ``k`` vectors), with its ``bounds``, the queries
    as one fp32 matrix with theirs, and the settings."""
    folder.mkdir(parents=True, exist_ok=True)
    batches = [pages] if isinstance(pages, np.ndarray) else pages
    matrix: Any = None
    at = 0
    for batch in batches:
        if matrix is None:
            per_page, dim = batch.shape[1:]
            shape = (len(pages) * per_page, dim)
            matrix = np.lib.format.open_memmap(
                folder / "pages.npy", mode="w+", dtype=np.float16, shape=shape
            )
        if batch.shape[1:] != (per_page, dim):
            raise ValueError(f"pages of {batch.shape[1:]} vectors after pages of {(per_page, dim)}")
        rows = batch.reshape(-1, dim)
        matrix[at : at + len(rows)] = rows
        at += len(rows)
    if matrix is None or at != len(matrix):
        raise ValueError(f"{len(pages)} pages announced, {at // max(1, per_page)} given")
    matrix.flush()
    del matrix
    np.save(folder / "bounds.npy", np.arange(len(pages) + 1, dtype=np.int64) * per_page)
    np.save(folder / "queries.npy", np.concatenate(queries).astype(np.float32))
    np.save(folder / "query_bounds.npy", _bounds([len(q) for q in queries]))
    settings = {"threads": threads, "nbits": nbits, "top_k": top_k}
    (folder / "settings.json").write_text(json.dumps(settings))


def _bounds(lengths: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)


def read_results(folder: Path, n_queries: int, n_pages: int) -> dict[str, Any]:
    """fast-plaid's ``results.json``, checked: one latency and one top list per query, page
    positions within the collection (a mismatch raises, naming the file and what is wrong)."""
    path = folder / "results.json"
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable fast-plaid results ({exc})") from exc
    for key in ("build_s", "latency_ms", "top", "index_bytes", "versions", "settings"):
        if key not in result:
            raise ValueError(f"{path}: no {key!r} in fast-plaid's results")
    if len(result["top"]) != n_queries or len(result["latency_ms"]) != n_queries:
        raise ValueError(
            f"{path}: {len(result['top'])} result lists and {len(result['latency_ms'])} "
            f"latencies for {n_queries} queries"
        )
    bad = [p for top in result["top"] for p in top if not 0 <= int(p) < n_pages]
    if bad:
        raise ValueError(f"{path}: page position {bad[0]} outside the {n_pages} pages")
    return result


def recall_at_10(exact: list[list[Any]], found: list[list[Any]]) -> float:
    """Mean share of each query's exact top 10 that ``found`` holds in its first 10."""
    shares = [len(set(e) & set(f[:10])) / max(1, len(e)) for e, f in zip(exact, found, strict=True)]
    return round(float(np.mean(shares)), 4)
