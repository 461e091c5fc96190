"""How many threads this process's onnxruntime sessions take (OCR, ONNX query encoders).

torch and numpy's BLAS follow ``OMP_NUM_THREADS``; onnxruntime ignores it and starts a thread per
core in every session. Ray sets ``OMP_NUM_THREADS`` in each actor to its ``num_cpus``, and job
schedulers and test runners set it to share a machine, so N such processes on N cores would
run N threads each. Two OCR processes at once on 2 cores took 60.5 s (6 pages each: ICDAR table
pages and ArxivQA figures) and 130.7 s (4 gov PDF pages each) with onnxruntime's default
threads, and 40.5 and 96.4 s with one thread each.
"""

from __future__ import annotations

import os


def thread_budget() -> int | None:
    """``OMP_NUM_THREADS`` when it is a positive whole number, else None (onnxruntime's own
    default: a thread per core)."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None
