"""The `vrag bench` command group with every benchmark registered: the value of the
``vrag_compress.commands`` entry point ``bench``, which `vrag` imports only when `vrag bench ...`
runs (importing a module registers its command on `bench_app`)."""

from __future__ import annotations

import vrag_compress_bench.capture  # noqa: F401
import vrag_compress_bench.compress  # noqa: F401
import vrag_compress_bench.encode  # noqa: F401
import vrag_compress_bench.estimate  # noqa: F401
import vrag_compress_bench.ingest  # noqa: F401
import vrag_compress_bench.lexical  # noqa: F401
import vrag_compress_bench.ocr  # noqa: F401
import vrag_compress_bench.onnx  # noqa: F401
import vrag_compress_bench.plaid  # noqa: F401
import vrag_compress_bench.query  # noqa: F401
import vrag_compress_bench.ray_scaling  # noqa: F401
import vrag_compress_bench.rerank  # noqa: F401
import vrag_compress_bench.retention  # noqa: F401
import vrag_compress_bench.serve  # noqa: F401
import vrag_compress_bench.store  # noqa: F401
from vrag_compress_bench.app import bench_app

__all__ = ["bench_app"]
