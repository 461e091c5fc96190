"""Sentence Transformers' `MultiVectorEncoder` as an index encoder (``--model st:NAME_OR_PATH``).

Why: `MultiVectorEncoder` (Sentence Transformers 6) is how the ecosystem now holds late-interaction
models: PyLate and ColBERT checkpoints, and ColPali-family checkpoints for page images. A user who
has one hands it to `VisualIndex.create(encoder=...)` as it is; the index records ``st:<source>``
so `open` rebuilds it.

What we take from the model and what we add:
- vectors come from the model's own module pipeline (backbone, projection, mask, normalisation),
  so they are exactly what its `encode_document` / `encode_query` give;
- documents keep the tokens our other encoders keep (the non-special tokens of a text, the image
  tokens of a page), because compression and the attention statistics are defined on those;
- SAP's attention statistics are captured inside the wrapped transformers module with the same
  capture functions as our own encoders (text: the eager capture of `encoders.text`; images: the
  streaming decoder capture of `encoders.capture`). Where the backbone cannot be instrumented, the
  encoder still encodes and `StatsUnavailableError` says why (UOT, pooling and the other methods
  that need no attention keep working).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

import vrag_compress.compat  # noqa: F401  (before transformers: torchvision guard)
from vrag_compress.encoders.base import ST_PREFIX as PREFIX
from vrag_compress.encoders.base import Encoder, EncodingError, PageEncoding, unit_rows
from vrag_compress.encoders.errors import EncoderLoadError, StatsUnavailableError


def load_st_encoder(name: str, *, device: str = "auto") -> Encoder:
    """``st:NAME_OR_PATH`` -> our encoder around a freshly loaded `MultiVectorEncoder`."""
    source = str(name).removeprefix(PREFIX)
    if not source:
        raise EncoderLoadError("st: needs a model after it, e.g. st:/path/to/model or st:org/name")
    try:
        from sentence_transformers import MultiVectorEncoder
    except ImportError as error:
        raise EncoderLoadError(
            "st: models need sentence-transformers>=6 (pip install 'vrag-compress[st]')"
        ) from error
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
    try:
        model = MultiVectorEncoder(source, device=_device(device), local_files_only=offline)
    except (OSError, ValueError) as error:
        raise EncoderLoadError(
            f"cannot load {name!r} as a MultiVectorEncoder ({error.__class__.__name__}: "
            f"{str(error).splitlines()[0][:200]}); give a local folder or a hub id that is cached"
        ) from error
    return wrap_multi_vector_encoder(model, model_id=PREFIX + source)


def wrap_multi_vector_encoder(model: Any, *, model_id: str | None = None) -> Encoder:
    """Our `Encoder` for a `MultiVectorEncoder`: page images if it reads images, else page text."""
    model_id = model_id or PREFIX + _source_of(model)
    if "image" in (model.modalities or []):
        return MultiVectorPageEncoder(model, model_id=model_id)
    from vrag_compress.encoders.text_pages import PageTextEncoder

    return PageTextEncoder.around(MultiVectorTokenEncoder(model), model_id=model_id)


def _source_of(model: Any) -> str:
    """Where the model came from (its folder or hub id), so `open` can load it again."""
    name = getattr(model.model_card_data, "base_model", None) or getattr(
        model[0].auto_model.config, "_name_or_path", ""
    )
    if not name:
        raise EncoderLoadError(
            "this MultiVectorEncoder has no source path or hub id to record; save it with "
            "model.save_pretrained(FOLDER) and pass MultiVectorEncoder(FOLDER)"
        )
    return str(name)


def _device(device: str) -> str | None:
    if device == "auto":
        return None  # Sentence Transformers picks CUDA, MPS or the CPU
    return device


def _backbone(model: Any) -> Any:
    """The transformers module inside the first (Transformer) module of the pipeline."""
    return model[0].auto_model


def _vlm(backbone: Any) -> Any:
    """The vision-language model whose decoder holds the attention (``*ForRetrieval`` wrap it)."""
    return getattr(backbone, "vlm", backbone)


class MultiVectorTokenEncoder:
    """Per-token text vectors from a text `MultiVectorEncoder`, with optional attention statistics.

    The interface `PageTextEncoder` drives (`tokenizer`, `max_length`, `encode_documents`,
    `encode_queries`), so long pages are split into windows exactly as for MiniLM.
    """

    def __init__(self, model: Any, *, batch_size: int = 16) -> None:
        from vrag_compress.encoders.text import ATTENTION_NAME, _register_attention

        self.model = model
        self.batch_size = batch_size
        self.tokenizer = model.tokenizer
        backbone = _backbone(model)
        self.n_layers = int(getattr(backbone.config, "num_hidden_layers", 0) or 0)
        self.max_length = int(model.max_seq_length or self.tokenizer.model_max_length or 512)
        self.dim = int(model.get_embedding_dimension())
        self.capture_error: str | None = None
        try:
            _register_attention()
            backbone.set_attn_implementation(ATTENTION_NAME)
        except (ValueError, AttributeError, NotImplementedError) as error:
            self.capture_error = f"its backbone takes no custom attention ({error})"
        self._special = set(self.tokenizer.all_special_ids)

    def encode_documents(
        self, texts: Sequence[str], *, with_stats: bool = False
    ) -> list[PageEncoding]:
        """One `PageEncoding` per text: the model's vectors at the non-special tokens it keeps."""
        if with_stats and self.capture_error is not None:
            raise StatsUnavailableError(
                f"attention statistics cannot be captured: {self.capture_error}; use a compressor "
                "that needs none (uot, pool, cluster, random, identity)"
            )
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise EncodingError(f"text {i} is {type(text).__name__}, expected str")
        out: list[PageEncoding] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(self._batch(list(texts[start : start + self.batch_size]), with_stats))
        return out

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The model's own query vectors (its prefix, length and expansion rules)."""
        return _queries(self.model, list(texts))

    def _batch(self, texts: list[str], with_stats: bool) -> list[PageEncoding]:
        import torch

        from vrag_compress.encoders.text import _CAPTURE, _Capture

        features = self.model.preprocess(
            texts, prompt=_prompt(self.model, "document"), task="document"
        )
        features = _to_device(features, self.model.device)
        valid = features["attention_mask"].bool().cpu()
        special = torch.tensor(sorted(self._special), dtype=features["input_ids"].dtype)
        visual = valid & ~torch.isin(features["input_ids"].cpu(), special)
        capture = _Capture(visual=visual, eos_index=_last_valid(valid)) if with_stats else None
        token = _CAPTURE.set(capture)
        try:
            with torch.inference_mode():
                out = self.model(features, task="document")
        finally:
            _CAPTURE.reset(token)
        kept = visual & out["attention_mask"].bool().cpu()
        pages = []
        for row, text in enumerate(texts):
            if not bool(kept[row].any()):
                raise EncodingError(f"document {text[:40]!r} has no tokens to keep; drop it")
            positions = np.flatnonzero(kept[row].numpy())
            stats = {}
            if capture is not None:
                layers = range(self.n_layers)
                stats = {
                    "centrality": np.stack([capture.centrality[i][row, positions] for i in layers]),
                    "eos_attention": np.stack([capture.eos[i][row, positions] for i in layers]),
                }
            pages.append(
                PageEncoding(
                    _rows(out["token_embeddings"][row][positions]),
                    stats.get("centrality"),
                    stats.get("eos_attention"),
                )
            )
        return pages


def _last_valid(valid: Any) -> Any:
    """Each row's last non-padding position, for left or right padding."""
    width = valid.shape[1]
    return width - 1 - valid.flip(dims=[1]).long().argmax(dim=1)


class MultiVectorPageEncoder:
    """Page images -> the model's vectors at the image tokens (+ decoder attention statistics)."""

    def __init__(self, model: Any, *, model_id: str, batch_size: int = 4) -> None:
        from vrag_compress.encoders.capture import CaptureError, use_streaming_attention

        self.model = model
        self.model_id = model_id
        self.batch_size = batch_size
        backbone = _vlm(_backbone(model))
        self.image_token_id = _image_token_id(backbone.config)
        self.dim = int(model.get_embedding_dimension())
        self.capture_error: str | None = None
        try:
            use_streaming_attention(backbone)
        except (CaptureError, ValueError, AttributeError) as error:
            self.capture_error = str(error)
        self.n_layers = _decoder_layers(backbone)

    def info(self) -> dict[str, Any]:
        """What the index config records about this encoder."""
        return {
            "model_id": self.model_id,
            "dim": self.dim,
            "n_layers": self.n_layers,
            "input": "page image",
            "kind": "sentence-transformers MultiVectorEncoder",
            "device": str(self.model.device),
        }

    def encode_pages(
        self, images: list[Image.Image], *, with_stats: bool = False
    ) -> list[PageEncoding]:
        if with_stats and self.capture_error is not None:
            raise StatsUnavailableError(
                f"{self.model_id} encodes pages, but its attention statistics cannot be "
                f"captured ({self.capture_error}); use a compressor that needs none (uot, pool, "
                "cluster, random, identity)"
            )
        pages: list[PageEncoding] = []
        for start in range(0, len(images), self.batch_size):
            pages.extend(self._batch(list(images[start : start + self.batch_size]), with_stats))
        return pages

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        return _queries(self.model, list(queries))

    def _batch(self, images: list[Image.Image], with_stats: bool) -> list[PageEncoding]:
        import torch

        from vrag_compress.encoders.capture import capture_attention
        from vrag_compress.encoders.colpali import last_token_index

        features = self.model.preprocess(
            images, prompt=_prompt(self.model, "document"), task="document"
        )
        features = _to_device(features, self.model.device)
        visual = features["input_ids"] == self.image_token_id
        with torch.inference_mode():
            if with_stats:
                last = last_token_index(features["attention_mask"])
                with capture_attention(_vlm(_backbone(self.model)), visual, last) as capture:
                    out = self.model(features, task="document")
                centrality, eos = capture.results()
            else:
                out = self.model(features, task="document")
        pages = []
        for b in range(len(images)):
            index = torch.nonzero(visual[b]).flatten()
            stats = {}
            if with_stats:
                stats = {
                    "centrality": centrality[:, b, index].cpu().numpy(),
                    "eos_attention": eos[:, b, index].cpu().numpy(),
                }
            pages.append(
                PageEncoding(
                    _rows(out["token_embeddings"][b, index]),
                    stats.get("centrality"),
                    stats.get("eos_attention"),
                )
            )
        return pages


def _queries(model: Any, queries: list[str]) -> list[np.ndarray]:
    """The model's own query vectors (prefix, length, expansion), as unit rows like ours."""
    import torch

    return [_rows(torch.as_tensor(e)) for e in model.encode_query(queries, convert_to_numpy=True)]


def _prompt(model: Any, task: str) -> str | None:
    return (model.prompts or {}).get(task) or None


def _to_device(features: dict[str, Any], device: Any) -> dict[str, Any]:
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in features.items()}


def _rows(vectors: Any) -> np.ndarray:
    """float32 unit rows (Sentence Transformers' `Normalize` may leave a constant scale)."""
    return unit_rows(vectors.float().cpu().numpy())


def _image_token_id(config: Any) -> int:
    """The image placeholder token id from the backbone config (or its wrapped VLM config)."""
    for holder in (config, getattr(config, "vlm_config", None)):
        for key in ("image_token_id", "image_token_index"):
            value = getattr(holder, key, None) if holder is not None else None
            if value is not None:
                return int(value)
    raise EncoderLoadError(
        f"{type(config).__name__} names no image token id; the page encoder cannot tell image "
        "tokens from text tokens"
    )


def _decoder_layers(backbone: Any) -> int:
    from vrag_compress.encoders.capture import decoder_attention_modules

    try:
        return len(decoder_attention_modules(backbone))
    except Exception:  # noqa: BLE001 (unknown layouts: the count is informational only)
        return 0
