"""`ColEncoder`: ColPali-family checkpoints (via colpali-engine) as a `vrag_compress` Encoder.

One forward pass per batch yields the page embeddings and, on request, the decoder attention
statistics (visual in-degree and EOS attention per layer; streaming capture, see `capture.py`).
Only visual-token vectors are returned for pages, only non-padding rows for queries.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

import vrag_compress.compat  # noqa: F401  (before transformers)
from vrag_compress.encoders.base import EncodingError, PageEncoding
from vrag_compress.encoders.capture import (
    CaptureError,
    capture_attention,
    decoder_attention_modules,
    use_streaming_attention,
)
from vrag_compress.encoders.errors import (
    EncoderInputError,
    EncoderLoadError,
    ModelNotFoundError,
    StatsUnavailableError,
    UnsupportedModelError,
    model_not_found_message,
)
from vrag_compress.encoders.speedups import SPEEDUPS, quantize_linears_int8
from vrag_compress.encoders.tiny import MARKER_FILE, TINY_MODELS, tiny_model_path

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Family:
    """How one architecture maps to colpali-engine classes."""

    name: str
    model_class: str
    processor_class: str
    grid: str  # "square" (fixed patch grid), "thw" (from image_grid_thw), "none"


FAMILIES: dict[str, Family] = {
    "paligemma": Family("colpali", "ColPali", "ColPaliProcessor", "square"),
    "qwen2_vl": Family("colqwen2", "ColQwen2", "ColQwen2Processor", "thw"),
    "qwen2_5_vl": Family("colqwen2.5", "ColQwen2_5", "ColQwen2_5_Processor", "thw"),
    "idefics3": Family("colidefics3", "ColIdefics3", "ColIdefics3Processor", "none"),
    "qwen3_vl": Family("colqwen3", "ColQwen3", "ColQwen3Processor", "thw"),
    "qwen3_5": Family("colqwen3.5", "ColQwen3_5", "ColQwen3_5Processor", "thw"),
    "gemma3": Family("colgemma3", "ColGemma3", "ColGemmaProcessor3", "square"),
    "modernvbert": Family("colmodernvbert", "ColModernVBert", "ColModernVBertProcessor", "none"),
}
"""config.json ``model_type`` -> family (ColSmol checkpoints are idefics3). Grids: "none" for
the tiled families (ColSmol, ModernVBERT), whose visual tokens are 2-D tiles plus a global
thumbnail rather than one row-major page grid."""

SKIPPED_FAMILIES: dict[str, str] = {
    "qwen2_5_omni": (
        "ColQwen-Omni (Qwen2.5-Omni) is not supported for page encoding: its checkpoint carries "
        "the Omni thinker's audio encoder, which page images never use, and its processor needs "
        "the audio feature extractor and video pipeline; use ColQwen2.5 (the same vision tower "
        "and language model family) instead"
    ),
}
SKIPPED_FAMILIES["qwen2_5_omni_thinker"] = SKIPPED_FAMILIES["qwen2_5_omni"]
"""model_type -> why the family is not loaded (the error users see)."""

_warned_tiny: set[str] = set()


def load_encoder(
    model: str | os.PathLike,
    *,
    device: str = "auto",
    dtype: str | torch.dtype | None = None,
    batch_size: int = 4,
    speedup: str = "none",
    **tiny_options: int,
) -> ColEncoder:
    """Load a Col* encoder by hub id, local folder or tiny name (tiny-colpali, tiny-colqwen2).

    ``device``: "auto" (cuda, then mps, then cpu), "cpu", "cuda[:N]" or "mps".
    ``dtype``: default bfloat16 on GPUs, float32 on the CPU.
    ``speedup``: "none", or "int8" (dynamic int8 linear layers, CPU only; see `speedups`).
    ``tiny_options``: ``image_size``, ``layers``, ``heads``, ``seed`` for tiny models only.
    """
    name = str(model)
    if tiny_options and name not in TINY_MODELS:
        raise EncoderLoadError(
            f"options {sorted(tiny_options)} apply only to {sorted(TINY_MODELS)}"
        )
    folder = tiny_model_path(name, **tiny_options) if name in TINY_MODELS else resolve_model(name)
    return ColEncoder.from_folder(
        folder, model_id=name, device=device, dtype=dtype, batch_size=batch_size, speedup=speedup
    )


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def resolve_model(name: str) -> Path:
    """A local folder for ``name``: the folder itself, or the hub cache snapshot of a hub id.

    Raises `ModelNotFoundError` at once when the id is neither a folder nor obtainable.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.is_absolute() or name.startswith((".", "~")) or name.count("/") != 1:
        raise ModelNotFoundError(model_not_found_message(name, "no such folder and not a hub id"))
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except (OSError, HFValidationError, ValueError) as cached_error:
        if _offline():
            raise ModelNotFoundError(
                model_not_found_message(name, "not in the local Hugging Face cache")
            ) from cached_error
    try:
        return Path(snapshot_download(name))
    except Exception as error:  # network, auth, missing repo: all mean "not available here"
        raise ModelNotFoundError(
            model_not_found_message(name, f"download failed ({error})")
        ) from error


def _read_json(folder: Path, filename: str) -> dict[str, Any] | None:
    file = folder / filename
    return json.loads(file.read_text()) if file.is_file() else None


def detect_family(folder: Path) -> Family:
    """The family of a checkpoint folder from its config.json (or an adapter's base model)."""
    config = _read_json(folder, "config.json")
    if config is None:
        adapter = _read_json(folder, "adapter_config.json")
        if adapter is None or not adapter.get("base_model_name_or_path"):
            raise UnsupportedModelError(f"{folder} has neither config.json nor adapter_config.json")
        return detect_family(resolve_model(adapter["base_model_name_or_path"]))
    return family_of(config.get("model_type", ""), where=str(folder))


def detect_family_of_model(model: Any) -> Family:
    """The family of an already built model (benchmarks build models from configs)."""
    return family_of(model.config.model_type, where=type(model).__name__)


def family_of(model_type: str, *, where: str) -> Family:
    """The `Family` for a config ``model_type``, or `UnsupportedModelError` saying why not."""
    if model_type in SKIPPED_FAMILIES:
        raise UnsupportedModelError(f"{where}: {SKIPPED_FAMILIES[model_type]}")
    family = FAMILIES.get(model_type)
    if family is None:
        raise UnsupportedModelError(
            f"{where}: model_type {model_type!r} is not supported; supported: {sorted(FAMILIES)} "
            "(ColPali, ColQwen2, ColQwen2.5, ColIdefics3/ColSmol, ColQwen3, ColQwen3.5, "
            "ColGemma3, ColModernVBert)"
        )
    return family


def pick_device(device: str) -> str:
    """Resolve "auto" and check that the requested accelerator exists."""
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    kind = device.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise EncoderLoadError(
            "device 'cuda' requested but no CUDA GPU is visible; use device='cpu'"
        )
    if kind == "mps" and not torch.backends.mps.is_available():
        raise EncoderLoadError("device 'mps' requested but MPS is not available; use device='cpu'")
    if kind not in {"cpu", "cuda", "mps"}:
        raise EncoderLoadError(f"unknown device {device!r}; use auto, cpu, cuda, cuda:N or mps")
    return device


def pick_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    """bfloat16 on GPUs and float32 on the CPU unless given."""
    if dtype is None:
        return torch.float32 if device == "cpu" else torch.bfloat16
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise EncoderLoadError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16")
    return value


class ColEncoder:
    """A loaded Col* model and its processor; see `load_encoder`."""

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        model_id: str,
        family: Family,
        device: str,
        batch_size: int = 4,
        is_tiny: bool = False,
        speedup: str = "none",
    ) -> None:
        if batch_size < 1:
            raise EncoderLoadError(f"batch_size must be >= 1, got {batch_size}")
        if speedup not in SPEEDUPS:
            raise EncoderLoadError(f"unknown speedup {speedup!r}; use one of {list(SPEEDUPS)}")
        if speedup != "none" and device != "cpu":
            raise EncoderLoadError(f"speedup {speedup!r} is for the CPU; got device {device!r}")
        if speedup == "int8":
            quantize_linears_int8(model)
        self.speedup = speedup
        self.model = model
        self.processor = processor
        self.model_id = model_id
        self.family = family
        self.device = device
        self.batch_size = batch_size
        self.is_tiny = is_tiny
        text = model.config.text_config
        self.dim = int(model.dim)
        self.n_heads = int(text.num_attention_heads)
        self.image_token_id = _image_token_id(model, processor)
        self.capture_error = _try_streaming_attention(model)
        self.n_layers = (
            int(text.num_hidden_layers)
            if self.capture_error
            else len(decoder_attention_modules(model))
        )

    @classmethod
    def from_folder(
        cls,
        folder: str | Path,
        *,
        model_id: str | None = None,
        device: str = "auto",
        dtype: str | torch.dtype | None = None,
        batch_size: int = 4,
        speedup: str = "none",
    ) -> ColEncoder:
        """Load model and processor from a local checkpoint folder (no network)."""
        import colpali_engine.models as engine

        folder = Path(folder)
        family = detect_family(folder)
        device = pick_device(device)
        torch_dtype = pick_dtype(dtype, device)
        is_tiny = (folder / MARKER_FILE).is_file()
        if is_tiny and str(folder) not in _warned_tiny:
            _warned_tiny.add(str(folder))
            logger.warning(
                "%s is a tiny RANDOM model: its vectors are meaningless for retrieval", folder
            )
        model_class = getattr(engine, family.model_class)
        processor_class = getattr(engine, family.processor_class)
        try:
            model = model_class.from_pretrained(
                folder, dtype=torch_dtype, local_files_only=_offline()
            )
            processor = processor_class.from_pretrained(folder, local_files_only=_offline())
        except OSError as error:
            raise ModelNotFoundError(model_not_found_message(str(folder), str(error))) from error
        _tie_missing_weights(model, folder)
        model = model.to(device).eval()
        return cls(
            model,
            processor,
            model_id=model_id or str(folder),
            family=family,
            device=device,
            batch_size=batch_size,
            is_tiny=is_tiny,
            speedup=speedup,
        )

    def twin(self) -> ColEncoder:
        """The same model (weights shared, no copy) with its own processor: a second thread
        can encode while this one does (fast tokenizers refuse concurrent calls)."""
        twin = copy.copy(self)
        twin.processor = copy.deepcopy(self.processor)
        return twin

    def info(self) -> dict[str, Any]:
        """JSON-serialisable description (recorded by indexes and benchmarks)."""
        return {
            "model_id": self.model_id,
            "family": self.family.name,
            "dim": self.dim,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "device": self.device,
            "tiny_random": self.is_tiny,
        } | ({"speedup": self.speedup} if self.speedup != "none" else {})

    # ---- pages -------------------------------------------------------------------------------

    def encode_pages(
        self,
        images: Sequence[Image.Image],
        *,
        with_stats: bool = False,
        batch_size: int | None = None,
    ) -> list[PageEncoding]:
        """One `PageEncoding` per image: visual-token vectors (+ [L, N] statistics if asked)."""
        _check_images(images)
        size = batch_size or self.batch_size
        encodings: list[PageEncoding] = []
        for start in range(0, len(images), size):
            encodings.extend(
                self._encode_page_batch(list(images[start : start + size]), with_stats)
            )
        return encodings

    def process_pages(self, images: list[Image.Image]) -> Any:
        """Processor output for a page batch, on the model's device, without training labels."""
        batch = self.processor.process_images(images)
        batch.pop("labels", None)  # ColPali's processor adds them; they trigger an LM loss
        return batch.to(self.device)

    def _encode_page_batch(self, images: list[Image.Image], with_stats: bool) -> list[PageEncoding]:
        batch = self.process_pages(images)
        visual = batch["input_ids"] == self.image_token_id
        last = last_token_index(batch["attention_mask"])
        with torch.inference_mode():
            if with_stats:
                self._check_capture()
                with capture_attention(self.model, visual, last) as capture:
                    embeddings = self.model(**batch)
                centrality, eos = capture.results()
            else:
                embeddings = self.model(**batch)
        pages = []
        for b in range(len(images)):
            index = torch.nonzero(visual[b]).flatten()
            vectors = _normalised_rows(embeddings[b, index], where=f"page {b} of the batch")
            stats = {}
            if with_stats:
                stats = {
                    "centrality": centrality[:, b, index].cpu().numpy(),
                    "eos_attention": eos[:, b, index].cpu().numpy(),
                }
            grid = self._grid(batch, b, vectors.shape[0])
            pages.append(PageEncoding(vectors=vectors, grid=grid, **stats))
        return pages

    def _check_capture(self) -> None:
        """Raise `StatsUnavailableError` when this model's attention cannot be captured."""
        if self.capture_error is not None:
            raise StatsUnavailableError(
                f"{self.model_id} ({self.family.name}) encodes pages, but its attention "
                f"statistics cannot be captured ({self.capture_error}); compressors that need "
                "them (sap, eos, adaptive-eos) cannot run on it: use one that needs none "
                "(uot, pool, cluster, random, identity) or another model"
            )

    def _grid(self, batch: Any, b: int, n_tokens: int) -> tuple[int, int] | None:
        """(rows, cols) of the visual tokens, row-major, when the family defines one."""
        if self.family.grid == "square":  # ColPali, ColGemma3: a fixed square token grid
            side = math.isqrt(n_tokens)
            grid = (side, side)
        elif self.family.grid == "thw":
            merge = int(self.model.config.vision_config.spatial_merge_size)
            _, h, w = (int(v) for v in batch["image_grid_thw"][b])
            grid = (h // merge, w // merge)
        else:
            return None
        return grid if grid[0] * grid[1] == n_tokens else None

    # ---- queries -----------------------------------------------------------------------------

    def process_queries(self, queries: list[str]) -> Any:
        """Processor output for a query batch (augmentation tokens included), on the device."""
        batch = self.processor.process_queries(queries)
        if self.family.name == "colpali":
            _causal_text_types(batch)
        return batch.to(self.device)

    def encode_queries(
        self, queries: Sequence[str], *, batch_size: int | None = None
    ) -> list[np.ndarray]:
        """One [M_i, D] float32 array per query: every non-padding token, augmentation included."""
        _check_queries(queries)
        size = batch_size or self.batch_size
        out: list[np.ndarray] = []
        for start in range(0, len(queries), size):
            batch = self.process_queries(list(queries[start : start + size]))
            with torch.inference_mode():
                embeddings = self.model(**batch)
            mask = batch["attention_mask"].bool()
            for b in range(embeddings.shape[0]):
                out.append(_normalised_rows(embeddings[b][mask[b]], where=f"query {start + b}"))
        return out


def _try_streaming_attention(model: torch.nn.Module) -> str | None:
    """Install the streaming attention on the decoder at load time; None, or why it cannot be.

    Without an active capture it is SDPA with a padding-safe mask, so plain encoding uses it
    too (see `capture.padding_safe_sdpa_mask`). A model that refuses it still encodes.
    """
    try:
        use_streaming_attention(model)
    except (CaptureError, ValueError) as error:
        logger.info("streaming attention unavailable for %s: %s", type(model).__name__, error)
        return str(error)
    return None


def _image_token_id(model: torch.nn.Module, processor: Any) -> int:
    """The id of the visual (soft image) tokens in ``input_ids``.

    The model config is authoritative: Gemma3's processor reports the begin-of-image marker as
    its ``image_token_id``, while the visual embeddings sit on the soft image tokens.
    """
    config = model.config
    for name in ("image_token_id", "image_token_index"):
        value = getattr(config, name, None)
        if value is not None:
            return int(value)
    return int(processor.image_token_id)


def _meta_parameters(model: torch.nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if p.is_meta]


def _tie_missing_weights(model: torch.nn.Module, folder: Path) -> None:
    """Re-tie weights saved only once (ColPali's lm_head) that loading left on the meta device."""
    from transformers import PreTrainedModel

    if not _meta_parameters(model):
        return
    for module in model.modules():
        if isinstance(module, PreTrainedModel) and module._tied_weights_keys:
            module.tie_weights()
    missing = _meta_parameters(model)
    if missing:
        raise EncoderLoadError(f"checkpoint {folder} lacks weights: {missing[:5]}")


def _causal_text_types(batch: Any) -> None:
    """Mark every query token as PaliGemma "suffix" so the text mask is causal, padded or not.

    Why: transformers 5 runs PaliGemma's text-only input causally when the batch is padded but
    bidirectionally (SDPA, no mask) when it is not, so a query's vectors would depend on the
    other queries in its batch. ColPali was trained with causal query attention.
    """
    batch["token_type_ids"] = torch.ones_like(batch["input_ids"])


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B] position of each row's last non-padding token (works for left and right padding)."""
    length = attention_mask.shape[1]
    flipped = attention_mask.flip(dims=[1]).long()
    return (length - 1 - flipped.argmax(dim=1)).long()


def _normalised_rows(rows: torch.Tensor, *, where: str) -> np.ndarray:
    """float32, L2-normalised in float32; a NaN/inf row is an error, never passed on."""
    vectors = rows.float()
    if not torch.isfinite(vectors).all():
        raise EncodingError(f"the model produced non-finite vectors for {where}")
    vectors = vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return vectors.cpu().numpy()


def _check_images(images: Sequence[Image.Image]) -> None:
    if isinstance(images, Image.Image):
        raise EncoderInputError("encode_pages takes a list of PIL images, got a single image")
    for i, image in enumerate(images):
        if not isinstance(image, Image.Image):
            raise EncoderInputError(f"image {i} is a {type(image).__name__}, expected a PIL image")
        if image.width < 1 or image.height < 1:
            raise EncoderInputError(f"image {i} is empty ({image.width}x{image.height})")


def _check_queries(queries: Sequence[str]) -> None:
    if isinstance(queries, str):
        raise EncoderInputError("encode_queries takes a list of strings, got a single string")
    for i, query in enumerate(queries):
        if not isinstance(query, str):
            raise EncoderInputError(f"query {i} is a {type(query).__name__}, expected str")
