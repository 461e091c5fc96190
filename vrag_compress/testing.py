"""Test helpers for this package and its framework integrations (needs pytest, the dev extra).

`WordEncoder` stands in for a Col* model where tiny random models would give meaningless scores:
each test page image is registered with the words "printed" on it and every word maps to a fixed
unit vector, so MaxSim ranks pages by shared words exactly like a real late-interaction model.
`shared_data` is the real data folder as a pytest fixture (import it into a conftest).
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageDraw

from vrag_compress.encoders.base import PageEncoding
from vrag_compress.shared_data import data_dir

WORD_DIM = 32


def words(text: str) -> list[str]:
    """Lower-case words of a text: what the fake encoder 'reads'."""
    return re.findall(r"[a-z0-9]+", text.lower())


def word_vector(word: str, dim: int = WORD_DIM) -> np.ndarray:
    """A fixed unit vector per (lower-cased) word."""
    seed = int.from_bytes(hashlib.sha256(word.lower().encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def image_key(image: Image.Image) -> str:
    """The identity of an image by its pixels (it survives a lossless save and reload)."""
    rgb = image.convert("RGB")
    return hashlib.sha256(rgb.tobytes() + repr(rgb.size).encode()).hexdigest()


class WordEncoder:
    """Deterministic fake Col* encoder (the `Encoder` protocol); make pages with `page_image`.

    An image that was not made by `page_image` encodes to one token unique to its pixels."""

    model_id = "test-word-encoder"
    n_layers = 4

    def __init__(self, dim: int = WORD_DIM) -> None:
        self.dim = dim
        self.words: dict[str, list[str]] = {}
        self.pages_encoded = 0

    def page_image(self, text: str | Sequence[str], seed: int | None = None) -> Image.Image:
        """A page on which ``text`` (a string or a list of words) is printed.

        Without ``seed`` the words are drawn on a white page (same words, same image); with a
        ``seed`` the page is unique noise, for corpora that repeat words across pages."""
        tokens = words(text) if isinstance(text, str) else [w.lower() for w in text]
        if seed is None:
            image = Image.new("RGB", (160, 120), "white")
            ImageDraw.Draw(image).multiline_text((4, 4), "\n".join(tokens), fill="black")
        else:
            pixels = np.random.default_rng(seed).integers(0, 256, (48, 40, 3), dtype=np.uint8)
            image = Image.fromarray(pixels, "RGB")
        self.words[image_key(image)] = tokens
        return image

    def encode_pages(
        self, images: list[Image.Image], *, with_stats: bool = False
    ) -> list[PageEncoding]:
        self.pages_encoded += len(images)
        out = []
        for image in images:
            key = image_key(image)
            tokens = self.words.get(key) or [f"pixels-{key}"]
            vectors = np.stack([word_vector(w, self.dim) for w in tokens])
            stats = np.ones((self.n_layers, len(tokens)), np.float32) if with_stats else None
            out.append(PageEncoding(vectors, centrality=stats, eos_attention=stats))
        return out

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        return [
            np.stack([word_vector(w, self.dim) for w in words(q) or ["empty"]]) for q in queries
        ]


def word_page_index(folder: Path, texts: Sequence[str]) -> tuple[Any, WordEncoder]:
    """A `VisualIndex` in ``folder`` of one document whose page n carries ``texts[n - 1]``
    (printed for `WordEncoder`, and as its text layer), SAP at half its vectors; close it."""
    from vrag_compress import VisualIndex, get_compressor
    from vrag_compress.ingest import Page

    encoder = WordEncoder()
    compressor = get_compressor("sap", ratio=0.5, layers=[0, 1])
    index = VisualIndex.create(folder / "w.vrag", encoder=encoder, compressor=compressor)
    pages = [
        Page("doc", n, encoder.page_image(text), text, folder / "doc.pdf")
        for n, text in enumerate(texts, start=1)
    ]
    index.add(pages, progress=False, ocr="never")
    return index, encoder


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real data folder; a missing one fails the test loudly (it is never skipped)."""
    path = data_dir()
    if not (path / "pdfs").is_dir():
        pytest.fail(f"shared data not found at {path}; set VRAG_DATA_DIR", pytrace=False)
    return path


def tiny_multi_vector_encoder(out: Path) -> Path:
    """A tiny random-weight BERT `MultiVectorEncoder` saved to `out` (MiniLM's real tokenizer).

    For tests of the ``st:`` encoder path: built offline from a config, loaded back through
    ``MultiVectorEncoder(folder)`` as a real checkpoint is. The BERT folder is ``out / "bert"``.
    """
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    from vrag_compress.encoders.text import resolve_text_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_text_model("minilm"))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
    )
    BertModel(config).eval().save_pretrained(out / "bert")
    tokenizer.save_pretrained(out / "bert")
    model = MultiVectorEncoder(modules=[Transformer(str(out / "bert")), Normalize()], device="cpu")
    model.save_pretrained(str(out / "mve"))
    return out / "mve"


def kill_after(owner: Any, name: str) -> None:
    """Make ``owner.name`` SIGKILL this process right after it returns: crash tests put a
    kill -9 exactly behind a named step of a write."""
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, name, wrapped)


def kill_before(owner: Any, name: str) -> None:
    """Make ``owner.name`` SIGKILL this process instead of running (a kill just before it)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)

    setattr(owner, name, wrapped)
