"""Timed writes and searches shared by the store benchmarks (embedded and Qdrant)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress

from vrag_compress.progress import task_progress

err = Console(stderr=True)


def progress() -> Progress:
    """A progress bar on stderr, so that stdout stays the report."""
    return task_progress(err)


def add_all(store: Any, pages: np.ndarray, batch: int, label: str) -> float:
    """Add all pages in batches; returns the seconds spent inside add()."""
    from vrag_compress.store import PageRecord

    spent = 0.0
    with progress() as bar:
        task = bar.add_task(label, total=len(pages))
        for start in range(0, len(pages), batch):
            records = [
                PageRecord(
                    f"page-{i:07d}", f"doc-{i // 20:06d}", i % 20 + 1, pages[i], {"n": i % 7}
                )
                for i in range(start, min(start + batch, len(pages)))
            ]
            t0 = time.perf_counter()
            store.add(records)
            spent += time.perf_counter() - t0
            bar.advance(task, len(records))
    return spent


def timed_search(
    store: Any, qs: list[np.ndarray], mode: str, label: str
) -> tuple[list[list[str]], float]:
    """Top-10 page ids per query and the median query latency in milliseconds."""
    ids, times = [], []
    with progress() as bar:
        task = bar.add_task(label, total=len(qs))
        for q in qs:
            t0 = time.perf_counter()
            hits = store.search(q, k=10, mode=mode)
            times.append(time.perf_counter() - t0)
            ids.append([h.page_id for h in hits])
            bar.advance(task)
    return ids, float(np.median(times) * 1000)
