"""The compressor protocol, `CompressedPage`, and the one budget rule."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from vrag_compress.encoders.base import PageEncoding


class CompressionError(ValueError):
    """Bad input or parameters for a compressor."""


@dataclass
class CompressedPage:
    """A compressed page: k L2-normalised float32 vectors and how they came from the source tokens.

    kept: sorted source positions of the kept tokens (pruning methods), else None.
    assignment: [N] representative id per source token (merging methods), else None.
    """

    vectors: np.ndarray
    kept: np.ndarray | None = None
    assignment: np.ndarray | None = None


def budget(n_tokens: int, ratio: float) -> int:
    """Tokens to keep for a page of ``n_tokens``: ``max(1, ceil(ratio * N))``, never more than N."""
    if not 0.0 < ratio <= 1.0:
        raise CompressionError(f"ratio must be in (0, 1], got {ratio}")
    if n_tokens <= 0:
        raise CompressionError("a page with 0 tokens cannot be compressed")
    return min(n_tokens, max(1, math.ceil(ratio * n_tokens - 1e-9)))


@runtime_checkable
class Compressor(Protocol):
    """Compresses `PageEncoding`s into `CompressedPage`s at a fixed budget."""

    @property
    def name(self) -> str:
        """The registered method name (`get_compressor(name, **params)` rebuilds it)."""
        ...

    @property
    def params(self) -> dict[str, Any]:
        """JSON-serialisable constructor parameters; the index records them."""
        ...

    @property
    def requires_stats(self) -> bool:
        """Whether pages must be encoded with attention statistics for this compressor."""
        ...

    def compress(self, page: PageEncoding) -> CompressedPage: ...

    def compress_many(self, pages: list[PageEncoding]) -> list[CompressedPage]: ...
