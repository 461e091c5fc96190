"""Real-size Col* architectures for `vrag bench encode`, built from their published configs.

Why random weights: the compute and memory cost of a forward pass depends on the architecture
(depths, widths, heads, vocabulary, image resolution and visual-token count), not on the weight
values, and real weights cannot be downloaded on machines without internet. The sizes below
are copied from the ``config.json`` / ``preprocessor_config.json`` of the cited checkpoints
(and their base models). Only the tokenizer is a toy one (its special tokens are the family's),
so the prompt around the image may differ by a few tokens from the real one; the visual tokens
and every weight matrix have the real shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import vrag_compress.compat  # noqa: F401  (before transformers)
from vrag_compress.encoders.tiny_families import (
    IDEFICS_SPECIALS,
    PALI_SPECIALS,
    QWEN_SPECIALS,
    fast_tokenizer,
    pad_id,
)

PAGE_SIZE = (1240, 1754)
"""The benchmark page: an A4 page rendered at 150 dpi (width, height) in pixels."""


@dataclass(frozen=True)
class RealArch:
    """One benchmarkable architecture: where its config comes from and how to build it."""

    name: str
    checkpoint: str
    config_source: str
    build: Callable[[Any, int | None], tuple[Any, Any]]
    """(dtype, max visual tokens or None) -> (random-weight model, processor)."""


def _random_model(model_class: Any, config: Any, dtype: Any) -> Any:
    """The model with transformers' own random initialisation, directly in ``dtype``."""
    return model_class._from_config(config, dtype=dtype).eval()


# ---- ColQwen2 --------------------------------------------------------------------------------


def build_colqwen2(dtype: Any, max_visual_tokens: int | None) -> tuple[Any, Any]:
    """vidore/colqwen2-v1.0 on Qwen/Qwen2-VL-2B-Instruct (via vidore/colqwen2-base).

    The checkpoint's processor caps pages at 768 visual tokens (max_pixels = 768·28·28).
    """
    from colpali_engine.models import ColQwen2, ColQwen2Processor
    from transformers import Qwen2VLConfig, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    tokenizer = fast_tokenizer(
        QWEN_SPECIALS, pad_token="<|endoftext|>", eos_token="<|im_end|>", padding_side="left"
    )
    tokens = max_visual_tokens or 768
    processor = ColQwen2Processor(
        image_processor=Qwen2VLImageProcessor(
            min_pixels=4 * 28 * 28,
            max_pixels=tokens * 28 * 28,
            patch_size=14,
            temporal_patch_size=2,
            merge_size=2,
        ),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
    )
    ids = tokenizer.convert_tokens_to_ids
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": 151936,
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {
                "rope_type": "default",
                "mrope_section": [16, 24, 24],
                "rope_theta": 1e6,
            },
            "tie_word_embeddings": True,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 32,
            "embed_dim": 1280,
            "hidden_size": 1536,
            "hidden_act": "quick_gelu",
            "mlp_ratio": 4,
            "num_heads": 16,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )
    return _random_model(ColQwen2, config, dtype), processor


# ---- ColPali ---------------------------------------------------------------------------------


def build_colpali(dtype: Any, max_visual_tokens: int | None) -> tuple[Any, Any]:
    """vidore/colpali-v1.3 on google/paligemma-3b-pt-448 (via vidore/colpaligemma-3b-pt-448-base).

    A fixed 448×448 input: 1024 visual tokens per page.
    """
    from colpali_engine.models import ColPali, ColPaliProcessor
    from transformers import PaliGemmaConfig, SiglipImageProcessor

    if max_visual_tokens not in (None, 1024):
        raise ValueError("colpali has a fixed 1024 visual tokens per page (448 px input)")
    tokenizer = fast_tokenizer(
        PALI_SPECIALS, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", padding_side="right"
    )
    image_processor = SiglipImageProcessor(
        size={"height": 448, "width": 448}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    image_processor.image_seq_length = 1024
    processor = ColPaliProcessor(image_processor=image_processor, tokenizer=tokenizer)
    config = PaliGemmaConfig(
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_hidden_layers": 27,
            "num_attention_heads": 16,
            "image_size": 448,
            "patch_size": 14,
            "vision_use_head": False,
        },
        text_config={
            "model_type": "gemma",
            "vocab_size": 257216,
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "num_hidden_layers": 18,
            "num_attention_heads": 8,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh",
            "pad_token_id": tokenizer.pad_token_id,
        },
        image_token_index=processor.image_token_id,
        projection_dim=2048,
        vocab_size=257216,
        **pad_id(tokenizer),
    )
    return _random_model(ColPali, config, dtype), processor


# ---- ColSmol (Idefics3) and ColModernVBERT ---------------------------------------------------


def _tiled_processor(processor_class: Any) -> Any:
    """Pages resized to a 2048 px longest edge, split into 512 px tiles + a global thumbnail,
    64 visual tokens per tile (the SmolVLM / ModernVBERT preprocessor settings)."""
    from transformers import Idefics3ImageProcessor

    tokenizer = fast_tokenizer(
        IDEFICS_SPECIALS, pad_token="<|endoftext|>", eos_token="<end_of_utterance>"
    )
    image_processor = Idefics3ImageProcessor(
        size={"longest_edge": 2048},
        max_image_size={"longest_edge": 512},
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    return processor_class(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=64)


def _colsmol(text: dict, dtype: Any) -> tuple[Any, Any]:
    from colpali_engine.models import ColIdefics3, ColIdefics3Processor
    from transformers import Idefics3Config

    processor = _tiled_processor(ColIdefics3Processor)
    tokenizer = processor.tokenizer
    config = Idefics3Config(
        text_config={
            "model_type": "llama",
            "vocab_size": 49280,
            "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-5,
            "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0},
            "tie_word_embeddings": True,
            "pad_token_id": tokenizer.pad_token_id,
            **text,
        },
        vision_config={
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "image_size": 512,
            "patch_size": 16,
        },
        scale_factor=4,
        image_token_id=processor.image_token_id,
        **pad_id(tokenizer),
    )
    return _random_model(ColIdefics3, config, dtype), processor


def build_colsmol_256m(dtype: Any, max_visual_tokens: int | None) -> tuple[Any, Any]:
    """vidore/colSmol-256M on HuggingFaceTB/SmolVLM-256M-Instruct (SmolLM2-135M decoder)."""
    _no_token_cap("colsmol-256m", max_visual_tokens)
    text = {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
    }
    return _colsmol(text, dtype)


def build_colsmol_500m(dtype: Any, max_visual_tokens: int | None) -> tuple[Any, Any]:
    """vidore/colSmol-500M on HuggingFaceTB/SmolVLM-500M-Instruct (SmolLM2-360M decoder)."""
    _no_token_cap("colsmol-500m", max_visual_tokens)
    text = {
        "hidden_size": 960,
        "intermediate_size": 2560,
        "num_hidden_layers": 32,
        "num_attention_heads": 15,
        "num_key_value_heads": 5,
    }
    return _colsmol(text, dtype)


def build_colmodernvbert(dtype: Any, max_visual_tokens: int | None) -> tuple[Any, Any]:
    """ModernVBERT/colmodernvbert on ModernVBERT/modernvbert: a 22-layer bidirectional
    ModernBERT-style encoder (global attention every third layer, 128-token local windows)
    with a SigLIP2 base/16 at 512 px vision tower."""
    from colpali_engine.models import ColModernVBert, ColModernVBertProcessor
    from transformers import ModernVBertConfig

    _no_token_cap("colmodernvbert", max_visual_tokens)
    processor = _tiled_processor(ColModernVBertProcessor)
    tokenizer = processor.tokenizer
    config = ModernVBertConfig(
        text_config={
            "model_type": "modernbert",
            "vocab_size": 50368,
            "hidden_size": 768,
            "intermediate_size": 1152,
            "num_hidden_layers": 22,
            "num_attention_heads": 12,
            "local_attention": 128,
            "layer_types": [
                "full_attention" if i % 3 == 0 else "sliding_attention" for i in range(22)
            ],
            "max_position_embeddings": 8192,
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": tokenizer.pad_token_id,
            "cls_token_id": tokenizer.pad_token_id,
            "sep_token_id": tokenizer.eos_token_id,
        },
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "image_size": 512,
            "patch_size": 16,
            "vision_use_head": False,
        },
        pixel_shuffle_factor=4,
        image_token_id=processor.image_token_id,
    )
    return _random_model(ColModernVBert, config, dtype), processor


def _no_token_cap(name: str, max_visual_tokens: int | None) -> None:
    if max_visual_tokens is not None:
        raise ValueError(f"{name} pages are tiled (64 tokens per 512 px tile); no token cap")


ARCHS: dict[str, RealArch] = {
    arch.name: arch
    for arch in (
        RealArch("colqwen2", "vidore/colqwen2-v1.0", "Qwen/Qwen2-VL-2B-Instruct", build_colqwen2),
        RealArch("colpali", "vidore/colpali-v1.3", "google/paligemma-3b-pt-448", build_colpali),
        RealArch(
            "colsmol-256m",
            "vidore/colSmol-256M",
            "HuggingFaceTB/SmolVLM-256M-Instruct",
            build_colsmol_256m,
        ),
        RealArch(
            "colsmol-500m",
            "vidore/colSmol-500M",
            "HuggingFaceTB/SmolVLM-500M-Instruct",
            build_colsmol_500m,
        ),
        RealArch(
            "colmodernvbert",
            "ModernVBERT/colmodernvbert",
            "ModernVBERT/modernvbert",
            build_colmodernvbert,
        ),
    )
}
"""``--arch`` name -> architecture."""
