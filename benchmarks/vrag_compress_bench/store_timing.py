"""Timed writes and searches shared by the store benchmarks (embedded and Qdrant)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress

from vrag_compress.progress import task_progress

err = Console(stderr=True)


def progress() -> Progress:
    """A progress bar on stderr, so that stdout stays the report."""
    return task_progress(err)


def add_all(store: Any, pages: Any, batch: int, label: str) -> float:
    """Add all pages in batches of ``batch`` (pages: an array ``[P, k, D]`` or an iterable of
    such arrays with a length in pages); returns the seconds spent inside add()."""
    from vrag_compress.store import PageRecord

    spent = 0.0
    i = 0
    with progress() as bar:
        task = bar.add_task(label, total=len(pages))
        for chunk in page_batches(pages, batch):
            records = []
            for vectors in chunk:
                records.append(
                    PageRecord(
                        f"page-{i:07d}", f"doc-{i // 20:06d}", i % 20 + 1, vectors, {"n": i % 7}
                    )
                )
                i += 1
            t0 = time.perf_counter()
            store.add(records)
            spent += time.perf_counter() - t0
            bar.advance(task, len(records))
    return spent


def page_batches(pages: Any, batch: int) -> Iterator[np.ndarray]:
    if isinstance(pages, np.ndarray):
        for start in range(0, len(pages), batch):
            yield pages[start : start + batch]
        return
    for chunk in pages:
        for start in range(0, len(chunk), batch):
            yield chunk[start : start + batch]


def timed_search(
    store: Any, qs: list[np.ndarray], mode: str, label: str
) -> tuple[list[list[str]], float]:
    """Top-10 page ids per query and the median query latency in milliseconds."""
    ids, times = search_times(store, qs, mode, label)
    return ids, float(np.median(times))


def search_times(
    store: Any, qs: list[np.ndarray], mode: str, label: str
) -> tuple[list[list[str]], list[float]]:
    """Top-10 page ids per query and each query's latency in milliseconds (for percentiles)."""
    ids, times = [], []
    with progress() as bar:
        task = bar.add_task(label, total=len(qs))
        for q in qs:
            t0 = time.perf_counter()
            hits = store.search(q, k=10, mode=mode)
            times.append((time.perf_counter() - t0) * 1000)
            ids.append([h.page_id for h in hits])
            bar.advance(task)
    return ids, times


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM) in MB."""
    return _status_kb(Path("/proc/self/status")).get("VmHWM", 0) / 1024


def _status_kb(path: Path) -> dict[str, int]:
    kb = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "RssFile"):
            kb[name] = int(value.split()[0])
    return kb


# Peak RSS is VmHWM: ru_maxrss would count the parent's RSS at the fork (Linux carries it
# across exec), which is the whole benchmark's.
_FIRST_QUERY = """
import sys
import numpy as np
from vrag_compress.store import LocalStore
with LocalStore.open(sys.argv[1], readonly=True) as store:
    queries = np.load(sys.argv[2])
    for name in queries.files:
        hits = store.search(queries[name], k=10)
    kb = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmHWM", "RssFile"):
                kb[name] = int(value.split()[0])
print(len(hits), kb["VmHWM"], kb["RssFile"])
"""


def first_query_cost(store_path: Path, query: np.ndarray) -> tuple[float, float, float]:
    """Wall time of a fresh Python process that opens the store and answers one query (what a
    user waits for on a cold start: interpreter, imports, open, first answer), that process's
    peak RSS in MB, and how much of its RSS was mapped files (segments, index) after the answer.
    """
    return query_process_cost(store_path, [query])


def query_process_cost(store_path: Path, queries: list[np.ndarray]) -> tuple[float, float, float]:
    """`first_query_cost` for a fresh process answering all ``queries`` one by one (default
    mode): its wall time, peak RSS and mapped-file RSS in MB, the memory a query server needs
    once it has answered many queries."""
    with tempfile.TemporaryDirectory() as tmp:
        qfile = Path(tmp) / "q.npz"
        np.savez(qfile, *[np.asarray(q, dtype=np.float32) for q in queries])
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_QUERY, str(store_path), str(qfile)],
            capture_output=True,
            text=True,
            check=False,
        )
        spent = time.perf_counter() - t0
    fields = done.stdout.split()
    if done.returncode != 0 or len(fields) != 3:
        raise RuntimeError(f"the first-query process failed: {done.stderr.strip()[-2000:]}")
    return spent, int(fields[1]) / 1024, int(fields[2]) / 1024
