"""Tiny random ColPali / ColQwen2 checkpoints that build offline in seconds.

Why: no real weights can be downloaded on the test machines, yet the encoders, the attention
capture and everything downstream must run through the real model classes and the real
``from_pretrained`` loading path. These checkpoints have random weights and a toy tokenizer:
their vectors are MEANINGLESS for retrieval. They exist for tests, smoke runs and benchmarks
whose cost depends only on the architecture (depth, heads, sequence length).

A checkpoint is built deterministically (fixed seed) into a cache folder, once; concurrent
builders each write a private temporary folder and atomically rename it into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

TINY_MODELS: dict[str, str] = {"tiny-colpali": "colpali", "tiny-colqwen2": "colqwen2"}
"""Tiny model names accepted wherever a model name is, mapped to their family."""

MARKER_FILE = "vrag_tiny.json"
"""Written into every tiny checkpoint; its presence labels the folder as random weights."""

CACHE_ENV = "VRAG_CACHE_DIR"
RECIPE_VERSION = 2
_HEAD_DIM = 16
_PATCH = 14
_TRAINING_TEXT = [
    "Describe the image.",
    "What is the total revenue reported in the table for 2013?",
    "Which figure shows the attention map of the decoder layers?",
    "user assistant system image page document query answer",
    "0123456789 .,;:!?()[]{}<>/\\-_=+*&%$#@ \n\t",
]
_QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<unk>",
]
_PALI_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]


class TinyModelError(ValueError):
    """A tiny-model request is malformed (unknown name or family, impossible sizes)."""


@dataclass(frozen=True)
class TinySpec:
    """Everything that determines a tiny checkpoint's bytes (the cache key)."""

    family: str
    image_size: int
    layers: int
    heads: int
    seed: int = 0
    version: int = RECIPE_VERSION

    @property
    def folder_name(self) -> str:
        return (
            f"tiny-{self.family}-s{self.image_size}-l{self.layers}-h{self.heads}"
            f"-seed{self.seed}-v{self.version}"
        )


def default_image_size(family: str) -> int:
    """ColPali: the square input side (56 px = 16 tokens); ColQwen2: the longest side allowed."""
    return 56 if family == "colpali" else 112


def make_spec(
    family: str, *, image_size: int | None = None, layers: int = 2, heads: int = 4, seed: int = 0
) -> TinySpec:
    """Validate the options and return the spec that names the cache folder."""
    if family not in TINY_MODELS.values():
        raise TinyModelError(
            f"unknown tiny model family {family!r}; choose one of {sorted(TINY_MODELS.values())}"
        )
    size = default_image_size(family) if image_size is None else int(image_size)
    step = _PATCH if family == "colpali" else 2 * _PATCH
    if size < step or size % step:
        raise TinyModelError(
            f"image_size for {family} must be a positive multiple of {step}, got {size}"
        )
    if layers < 1 or heads < 2 or heads % 2:
        raise TinyModelError(f"need layers >= 1 and an even heads >= 2, got {layers=} {heads=}")
    return TinySpec(family=family, image_size=size, layers=int(layers), heads=int(heads), seed=seed)


def cache_root() -> Path:
    """``$VRAG_CACHE_DIR/tiny`` or ``~/.cache/vrag_compress/tiny``."""
    base = os.environ.get(CACHE_ENV)
    root = Path(base) if base else Path.home() / ".cache" / "vrag_compress"
    return root / "tiny"


def tiny_model_path(name_or_family: str, **options: int | None) -> Path:
    """The folder of a tiny checkpoint, building it first when it is not cached yet.

    ``name_or_family``: ``"tiny-colpali"`` / ``"tiny-colqwen2"`` or the bare family name.
    ``options``: ``image_size``, ``layers``, ``heads``, ``seed`` (see `build_tiny_model`).
    """
    family = TINY_MODELS.get(name_or_family, name_or_family)
    spec = make_spec(family, **options)
    target = cache_root() / spec.folder_name
    if (target / MARKER_FILE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.folder_name}-", dir=target.parent))
    try:
        _build(spec, staging)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / MARKER_FILE).is_file():  # lost a race to a broken folder: replace it
                shutil.rmtree(target, ignore_errors=True)
                os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def build_tiny_model(
    family: str,
    out_dir: str | Path,
    *,
    image_size: int | None = None,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
) -> Path:
    """Build a tiny random checkpoint (model + processor) into ``out_dir`` and return it.

    ``image_size``: ColPali's square input side (tokens = (size/14)^2; 448 gives the real 1024);
    for ColQwen2 the longest side the processor allows (tokens = (side/28)^2 at most).
    ``layers`` / ``heads``: decoder depth and attention heads (head dim fixed at 16).
    """
    spec = make_spec(family, image_size=image_size, layers=layers, heads=heads, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _build(spec, out)
    return out


def _build(spec: TinySpec, out: Path) -> None:
    import torch

    import vrag_compress.compat  # noqa: F401  (before transformers)

    torch.manual_seed(spec.seed)
    if spec.family == "colpali":
        _build_colpali(spec, out)
    else:
        _build_colqwen2(spec, out)
    info = {**asdict(spec), "warning": "random weights: meaningless for retrieval"}
    (out / MARKER_FILE).write_text(json.dumps(info, indent=2))


def _train_tokenizer(specials: list[str]):
    """A byte-level BPE tokenizer (vocab ~400) trained on a few strings, fast-tokenizer wrapped."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_TRAINING_TEXT * 4, trainer=trainer)
    return tokenizer


def _save_model(model, pad_id: int, out: Path) -> None:
    """Give the pad token a random embedding too, then save.

    Why: both families use the pad token as the query-augmentation token, and the embedding
    layer initialises the ``padding_idx`` row to zero; an all-augmentation query would then be
    all zeros (NaN after normalisation), which trained checkpoints never do.
    """
    import torch

    with torch.no_grad():
        model.get_input_embeddings().weight[pad_id].normal_(0.0, 0.02)
    model.eval().save_pretrained(out)


def _build_colpali(spec: TinySpec, out: Path) -> None:
    from colpali_engine.models import ColPali, ColPaliProcessor
    from transformers import PaliGemmaConfig, PreTrainedTokenizerFast, SiglipImageProcessor

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(_PALI_SPECIALS),
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        padding_side="right",
    )
    size = spec.image_size
    image_processor = SiglipImageProcessor(
        size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    image_processor.image_seq_length = (size // _PATCH) ** 2
    processor = ColPaliProcessor(image_processor=image_processor, tokenizer=tokenizer)
    hidden = spec.heads * _HEAD_DIM
    vocab = len(processor.tokenizer)
    config = PaliGemmaConfig(
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": size,
            "patch_size": _PATCH,
            "vision_use_head": False,
        },
        text_config={
            "model_type": "gemma",
            "hidden_size": hidden,
            "intermediate_size": 2 * hidden,
            "num_hidden_layers": spec.layers,
            "num_attention_heads": spec.heads,
            "num_key_value_heads": 1,
            "head_dim": _HEAD_DIM,
            "vocab_size": vocab,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        },
        image_token_index=processor.image_token_id,
        projection_dim=hidden,
        vocab_size=vocab,
        pad_token_id=tokenizer.pad_token_id,
    )
    _save_model(ColPali(config), tokenizer.pad_token_id, out)
    processor.save_pretrained(out)


def _build_colqwen2(spec: TinySpec, out: Path) -> None:
    from colpali_engine.models import ColQwen2, ColQwen2Processor
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2VLConfig,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(_QWEN_SPECIALS),
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        unk_token="<unk>",
        padding_side="left",
    )
    image_processor = Qwen2VLImageProcessor(
        min_pixels=56 * 56,
        max_pixels=spec.image_size**2,
        patch_size=_PATCH,
        temporal_patch_size=2,
        merge_size=2,
    )
    processor = ColQwen2Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
    )
    hidden = spec.heads * _HEAD_DIM
    ids = tokenizer.convert_tokens_to_ids
    config = Qwen2VLConfig(
        text_config={
            "hidden_size": hidden,
            "intermediate_size": 2 * hidden,
            "num_hidden_layers": spec.layers,
            "num_attention_heads": spec.heads,
            "num_key_value_heads": spec.heads // 2,
            "vocab_size": len(tokenizer),
            "rope_parameters": {
                "rope_type": "default",
                "mrope_section": [4, 2, 2],
                "rope_theta": 1e4,
            },
            "bos_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": hidden,
            "num_heads": 2,
            "patch_size": _PATCH,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )
    _save_model(ColQwen2(config), tokenizer.pad_token_id, out)
    processor.save_pretrained(out)
