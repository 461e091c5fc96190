"""Why a page matched: each query token's best stored vector, its MaxSim share, and where on the
page that vector came from.

MaxSim is ``sum_i max_j q_i . x_j``, so the score splits exactly into one contribution per query
token. A stored vector maps back to source patches through the page's saved layout: a pruning
method (SAP) stored the kept patch itself, a merging method (UOT) stored a representative that
the ``assignment`` ties to a group of patches. Summing the contributions onto those patches gives
a heatmap over the patch grid; the bounding boxes of its hottest connected areas are the
*regions* that drove the match (fractions of the page, so they fit any rendering of it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image

REGION_THRESHOLD = 0.5
"""A patch belongs to a region when its heat is at least this share of the page's hottest patch."""
MAX_REGIONS = 3


_SPECIAL_TOKEN = re.compile(r"\[[A-Z_]+\]|<\|?[^<>\s]*\|?>")
"""A tokenizer's marker tokens as they print: BERT's ``[CLS]``/``[SEP]``/``[PAD]``, Qwen's and
Gemma's ``<|endoftext|>``/``<pad>``/``<bos>``: they count in the score but are no query term."""


def is_special_token(label: str | None) -> bool:
    """Whether a query token's label is a tokenizer marker rather than a piece of the query."""
    return label is not None and _SPECIAL_TOKEN.fullmatch(label.strip()) is not None


@dataclass
class TokenMatch:
    """One query token: the stored vector it matched, its score share and the patches behind it.
    ``special``: a tokenizer marker (``[CLS]``, ``<|endoftext|>``), which is not a query term."""

    token: int
    label: str | None
    vector: int
    contribution: float
    patches: list[int]

    @property
    def special(self) -> bool:
        return is_special_token(self.label)

    def to_dict(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "label": self.label,
            "special": self.special,
            "vector": self.vector,
            "contribution": round(self.contribution, 6),
            "patches": self.patches,
        }


@dataclass
class Region:
    """A box on the page, as fractions of its width and height (0..1), and its MaxSim weight."""

    x0: float
    y0: float
    x1: float
    y1: float
    score: float
    patches: int

    def box(self, size: tuple[int, int]) -> tuple[int, int, int, int]:
        """The region in pixels of an image of ``size`` (width, height)."""
        width, height = size
        return (
            int(self.x0 * width),
            int(self.y0 * height),
            int(np.ceil(self.x1 * width)),
            int(np.ceil(self.y1 * height)),
        )

    def crop(self, image: Image.Image) -> Image.Image:
        return image.crop(self.box(image.size))

    def to_dict(self) -> dict[str, Any]:
        return {
            "x0": round(self.x0, 4),
            "y0": round(self.y0, 4),
            "x1": round(self.x1, 4),
            "y1": round(self.y1, 4),
            "score": round(self.score, 6),
            "patches": self.patches,
        }


@dataclass
class Explanation:
    """The MaxSim of one query against one stored page, split by query token and placed on the
    page. ``heat`` is [rows, cols] (None when the page has no patch layout, e.g. text pages)."""

    page_id: str
    doc_id: str
    page_no: int
    score: float
    tokens: list[TokenMatch]
    grid: tuple[int, int] | None = None
    layout: str | None = None
    heat: np.ndarray | None = None
    regions: list[Region] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "page_id": self.page_id,
            "doc_id": self.doc_id,
            "page_no": self.page_no,
            "score": round(self.score, 6),
            "layout": self.layout,
            "grid": list(self.grid) if self.grid else None,
            "heat": None if self.heat is None else np.round(self.heat, 6).tolist(),
            "regions": [r.to_dict() for r in self.regions],
            "tokens": [t.to_dict() for t in self.tokens],
        }


def layout_kind(layout: dict[str, Any] | None) -> str | None:
    """``"kept"`` (pruning), ``"assignment"`` (merging) or None (no layout saved)."""
    if not layout or "grid" not in layout:
        return None
    if "kept" in layout:
        return "kept"
    if "assignment" in layout:
        return "assignment"
    return None


def vector_patches(layout: dict[str, Any] | None, n_vectors: int) -> list[list[int]]:
    """For each stored vector, the source patch positions (row-major) it stands for."""
    kind = layout_kind(layout)
    if kind == "kept":
        kept = np.asarray(layout["kept"]).astype(int)  # type: ignore[index]
        return [[int(kept[j])] if j < len(kept) else [] for j in range(n_vectors)]
    if kind == "assignment":
        assignment = np.asarray(layout["assignment"]).astype(int)  # type: ignore[index]
        groups: list[list[int]] = [[] for _ in range(n_vectors)]
        for patch, rep in enumerate(assignment):
            if 0 <= rep < n_vectors:
                groups[rep].append(patch)
        return groups
    return [[] for _ in range(n_vectors)]


def explain_vectors(
    query: np.ndarray,
    vectors: np.ndarray,
    layout: dict[str, Any] | None = None,
    *,
    labels: Sequence[str] | None = None,
    page_id: str = "",
    doc_id: str = "",
    page_no: int = 0,
) -> Explanation:
    """Split the MaxSim of ``query`` [M, D] against a page's stored ``vectors`` [K, D]."""
    query = np.asarray(query, dtype=np.float32)
    vectors = np.asarray(vectors, dtype=np.float32)
    if query.ndim != 2 or vectors.ndim != 2 or query.shape[1] != vectors.shape[1]:
        raise ValueError(
            f"explain needs [M, D] and [K, D] arrays, got {query.shape} and {vectors.shape}"
        )
    if len(vectors) == 0:
        return Explanation(page_id, doc_id, page_no, 0.0, [])
    sims = query @ vectors.T
    best = sims.argmax(axis=1)
    contributions = sims[np.arange(len(query)), best]
    groups = vector_patches(layout, len(vectors))
    tokens = [
        TokenMatch(
            token=i,
            label=labels[i] if labels is not None and i < len(labels) else None,
            vector=int(best[i]),
            contribution=float(contributions[i]),
            patches=groups[int(best[i])],
        )
        for i in range(len(query))
    ]
    explanation = Explanation(
        page_id, doc_id, page_no, float(contributions.sum()), tokens, layout=layout_kind(layout)
    )
    if explanation.layout is not None:
        grid = np.asarray(layout["grid"]).astype(int)  # type: ignore[index]
        explanation.grid = (int(grid[0]), int(grid[1]))
        explanation.heat = heat_map(tokens, explanation.grid)
        explanation.regions = find_regions(explanation.heat, tokens)
    return explanation


def heat_map(tokens: Sequence[TokenMatch], grid: tuple[int, int]) -> np.ndarray:
    """[rows, cols]: each patch gets the (positive) contributions of the tokens it answered."""
    heat = np.zeros(grid[0] * grid[1], dtype=np.float64)
    for token in tokens:
        if token.contribution > 0:
            for patch in token.patches:
                if 0 <= patch < heat.size:
                    heat[patch] += token.contribution
    return heat.reshape(grid)


def find_regions(
    heat: np.ndarray,
    tokens: Sequence[TokenMatch],
    threshold: float = REGION_THRESHOLD,
    max_regions: int = MAX_REGIONS,
) -> list[Region]:
    """Bounding boxes of the connected hot areas (heat >= threshold * max), heaviest first.

    A region's score is the summed contribution of the query tokens that landed in it."""
    from scipy import ndimage  # type: ignore[import-untyped]

    peak = float(heat.max()) if heat.size else 0.0
    if peak <= 0:
        return []
    labels, count = ndimage.label(heat >= threshold * peak, structure=np.ones((3, 3)))
    rows, cols = heat.shape
    regions = []
    for number, (row_slice, col_slice) in enumerate(ndimage.find_objects(labels), start=1):
        cells = set(np.flatnonzero(labels.ravel() == number).tolist())
        weight = sum(
            t.contribution for t in tokens if t.contribution > 0 and cells & set(t.patches)
        )
        regions.append(
            Region(
                x0=col_slice.start / cols,
                y0=row_slice.start / rows,
                x1=col_slice.stop / cols,
                y1=row_slice.stop / rows,
                score=float(weight),
                patches=len(cells),
            )
        )
    regions.sort(key=lambda r: (-r.score, r.y0, r.x0))
    return regions[:max_regions]


def query_token_labels(encoder: Any, query: Any, n_tokens: int) -> list[str] | None:
    """The query's tokens as text, when the encoder exposes its processor or tokenizer and the
    token count matches the query vectors; else None (explanations then number the tokens)."""
    if not isinstance(query, str):
        return None
    own = getattr(encoder, "token_labels", None)
    if callable(own):  # encoders that tokenize without transformers (the ONNX query path)
        tokens = own(query)
        return tokens if len(tokens) == n_tokens else None
    try:
        processor = getattr(encoder, "processor", None)
        if processor is not None and hasattr(processor, "process_queries"):
            batch = processor.process_queries([query])
            tokenizer = processor.tokenizer
        else:  # text encoders: their own tokenizer, or that of the token model they wrap
            tokenizer = getattr(encoder, "tokenizer", None) or getattr(
                getattr(encoder, "text", None), "tokenizer", None
            )
            if tokenizer is None:
                return None
            batch = tokenizer([query], return_tensors="np", truncation=True)
        ids = np.asarray(batch["input_ids"])[0]
        mask = np.asarray(batch["attention_mask"])[0].astype(bool)
        tokens = tokenizer.convert_ids_to_tokens([int(i) for i in ids[mask]])
    except Exception:  # labels are a nicety; any tokenizer quirk just drops them
        return None
    if len(tokens) != n_tokens:
        return None
    return [str(t).replace("\u0120", " ").replace("\u2581", " ") for t in tokens]
