"""Encoders: page images (or page text) and queries to multi-vectors (plus attention statistics).

`load_encoder`, `ColEncoder`, `build_tiny_model` and `tiny_model_path` import torch and
transformers, so they are loaded lazily on first access; the data contracts and errors are not.
"""

from __future__ import annotations

import importlib
from typing import Any

from vrag_compress.encoders.base import Encoder, EncodingError, PageEncoding, ReadsPageText
from vrag_compress.encoders.errors import (
    EncoderInputError,
    EncoderLoadError,
    ModelNotFoundError,
    StatsUnavailableError,
    UnsupportedModelError,
)
from vrag_compress.encoders.tiny import TINY_MODELS

_LAZY = {
    "load_encoder": "vrag_compress.encoders.select",
    "load_auto_encoder": "vrag_compress.encoders.select",
    "PageTextEncoder": "vrag_compress.encoders.text_pages",
    "ColEncoder": "vrag_compress.encoders.colpali",
    "build_tiny_model": "vrag_compress.encoders.tiny",
    "tiny_model_path": "vrag_compress.encoders.tiny",
    "capture_attention": "vrag_compress.encoders.capture",
}

__all__ = [
    "TINY_MODELS",
    "Encoder",
    "EncoderInputError",
    "EncoderLoadError",
    "EncodingError",
    "ModelNotFoundError",
    "PageEncoding",
    "ReadsPageText",
    "StatsUnavailableError",
    "UnsupportedModelError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vrag_compress.encoders' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
