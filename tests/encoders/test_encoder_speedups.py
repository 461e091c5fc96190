"""CPU speed options keep the retrieval ranking of a fixed set of tiny-model pages.

Tolerance (stated in docs/encoders.md): per query, at least 8 of the fp32 top-10 pages stay in
the top-10, and page vectors keep a mean cosine >= 0.99 with the fp32 ones. Random tiny models
give pages with very close scores, so this is a strict setting for order changes.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from vrag_compress.encoders import EncoderLoadError, load_encoder
from vrag_compress.scoring import maxsim

QUERIES = [
    "total revenue in 2013",
    "attention map of the decoder",
    "which figure shows the table",
    "page document answer",
    "query 0123",
]


def _pages() -> list[Image.Image]:
    rng = np.random.default_rng(7)
    sizes = rng.integers(60, 300, size=(30, 2))
    return [
        Image.fromarray(rng.integers(0, 256, size=(int(h), int(w), 3), dtype=np.uint8))
        for h, w in sizes
    ]


def _vectors_and_scores(encoder) -> tuple[list[np.ndarray], np.ndarray]:
    pages = [page.vectors for page in encoder.encode_pages(_pages())]
    queries = encoder.encode_queries(QUERIES)
    return pages, np.array([[maxsim(q, p) for p in pages] for q in queries])


@pytest.mark.parametrize("model", ["tiny-colqwen2", "tiny-colpali"])
@pytest.mark.parametrize("option", [{"speedup": "int8"}, {"dtype": "bfloat16"}])
def test_speedup_keeps_the_top10_within_tolerance(model: str, option: dict) -> None:
    base_pages, base_scores = _vectors_and_scores(load_encoder(model, device="cpu"))
    fast = load_encoder(model, device="cpu", **option)
    pages, scores = _vectors_and_scores(fast)
    pairs = zip(base_pages, pages, strict=True)
    cosine = np.mean([np.mean(np.sum(a * b, axis=1)) for a, b in pairs])
    assert cosine >= 0.99
    assert not np.array_equal(scores, base_scores)  # the option really changed the arithmetic
    for want, got in zip(base_scores, scores, strict=True):
        overlap = set(np.argsort(-want)[:10]) & set(np.argsort(-got)[:10])
        assert len(overlap) >= 8


def test_speedup_options_are_checked() -> None:
    with pytest.raises(EncoderLoadError, match="unknown speedup"):
        load_encoder("tiny-colqwen2", device="cpu", speedup="fp8")
    encoder = load_encoder("tiny-colqwen2", device="cpu", speedup="int8")
    assert encoder.speedup == "int8"
    assert "DynamicQuantizedLinear" in repr(encoder.model.custom_text_proj)
