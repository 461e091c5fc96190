"""Fill the caches the tests and benchmarks read, once, at `make install`: numba's on-disk caches
of the functions they call, and the tiny checkpoints. No test (and no first `vrag bench` run)
then pays a compile, and parallel test workers do not each compile the same functions at once.

Cold, on this 2-core machine: ranx's metrics 32.5 s, then 4.5 s per process with the cache
(measured with an empty ``NUMBA_CACHE_DIR``); the store's kernels about 5 s. ranx's typed
dictionaries, which numba cannot cache, are not used: the benchmarks give ranx its array form.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np


def warm_metrics() -> None:
    """ranx's metric functions (`cache=True`), through the benchmarks' own evaluation."""
    from vrag_compress_bench.eval.metrics import evaluate

    evaluate({"q": {"a": 1, "b": 2}}, {"q": {"a": 0.5, "c": 0.4, "b": 0.1}})


def warm_store_kernels() -> None:
    """The codes-in-place rerank and the page-list pass (`store/candidates/kernels.py`), by
    two-stage searches of a small codes-only store at each code width."""
    from vrag_compress.store import LocalStore, PageRecord

    rng = np.random.default_rng(0)
    pages = [rng.normal(size=(12, 16)).astype(np.float32) for _ in range(64)]
    with tempfile.TemporaryDirectory() as folder:
        for codes in ("1bit", "2bit", "4bit"):
            config = {"dim": 16, "model_id": "warm/kernels", "codes": codes, "fp16": False}
            path = Path(folder) / codes
            with LocalStore.create(path, config, codes_min_tokens=100) as store:
                store.add([PageRecord(f"p{i}", "d", i + 1, v) for i, v in enumerate(pages)])
                store.optimize()
                store.search(pages[0][:4], k=3, mode="two_stage")


def warm_tiny_models() -> None:
    """Every tiny checkpoint family at its default size (`encoders/tiny.py` builds each once)."""
    from vrag_compress.encoders.tiny import TINY_MODELS, tiny_model_path

    for family in sorted(set(TINY_MODELS.values())):
        tiny_model_path(family)


def main() -> None:
    for step in (warm_metrics, warm_store_kernels, warm_tiny_models):
        start = time.perf_counter()
        step()
        print(f"{step.__name__}: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
