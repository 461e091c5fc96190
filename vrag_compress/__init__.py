"""vrag_compress: compressed multi-vector Visual RAG (SAP / UOT) with a local MaxSim store.

Names are imported lazily so that ``import vrag_compress`` and ``vrag --help`` stay fast and
do not load torch or transformers until an encoder is needed.
"""

from __future__ import annotations

import importlib
from typing import Any

from vrag_compress.version import __version__

_EXPORTS = {
    "VisualIndex": "vrag_compress.index",
    "Hit": "vrag_compress.index",
    "PageEncoding": "vrag_compress.encoders.base",
    "CompressedPage": "vrag_compress.compress.base",
    "get_compressor": "vrag_compress.compress",
    "list_compressors": "vrag_compress.compress",
    "maxsim": "vrag_compress.scoring",
    "score_retention": "vrag_compress.calibrate",
    "select_window": "vrag_compress.calibrate",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vrag_compress' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
