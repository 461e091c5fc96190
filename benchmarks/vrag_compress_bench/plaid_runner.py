"""fast-plaid's side of `vrag bench plaid`, run by fast-plaid's own Python (its own virtual
environment: it pins another torch than ours), never imported by vrag_compress.

Reads the exchange folder `vrag bench plaid` wrote (``pages.npy`` [T, D] fp16, ``bounds.npy``
[P + 1], ``queries.npy`` [Tq, D] fp32, ``query_bounds.npy`` [Q + 1], ``settings.json``), builds
a fast-plaid index of the pages on the CPU, answers every query one at a time, and writes
``results.json``: build seconds, per-query milliseconds, each query's top-10 page positions,
the index's bytes on disk and the versions. Only numpy, torch and fast_plaid are imported.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(folder: Path) -> None:
    import numpy as np
    import torch
    from fast_plaid import search

    settings = json.loads((folder / "settings.json").read_text())
    torch.set_num_threads(int(settings["threads"]))
    tokens = np.load(folder / "pages.npy", mmap_mode="r")
    bounds = np.load(folder / "bounds.npy")
    queries = np.load(folder / "queries.npy")
    q_bounds = np.load(folder / "query_bounds.npy")
    pages = [
        torch.from_numpy(np.asarray(tokens[a:b], dtype=np.float32))
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    index_dir = folder / "fast_plaid_index"
    plaid = search.FastPlaid(index=str(index_dir), device="cpu")
    t0 = time.perf_counter()
    plaid.create(documents_embeddings=pages, nbits=int(settings["nbits"]))
    build_s = time.perf_counter() - t0
    del pages
    top, times = [], []
    for a, b in zip(q_bounds[:-1], q_bounds[1:], strict=True):
        q = torch.from_numpy(np.ascontiguousarray(queries[a:b], dtype=np.float32))[None]
        t0 = time.perf_counter()
        hits = plaid.search(queries_embeddings=q, top_k=int(settings["top_k"]), show_progress=False)
        times.append((time.perf_counter() - t0) * 1000)
        top.append([int(doc) for doc, _ in hits[0]])
    size = sum(f.stat().st_size for f in index_dir.rglob("*") if f.is_file())
    result = {
        "build_s": build_s,
        "latency_ms": times,
        "top": top,
        "index_bytes": size,
        "versions": {"fast_plaid": _version("fast-plaid"), "torch": torch.__version__},
        "settings": {"nbits": int(settings["nbits"]), "device": "cpu"},
    }
    (folder / "results.json").write_text(json.dumps(result))


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
