"""Encoders: page images and queries to multi-vectors (plus attention statistics)."""

from vrag_compress.encoders.base import Encoder, EncodingError, PageEncoding

__all__ = ["Encoder", "EncodingError", "PageEncoding"]
