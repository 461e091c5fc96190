"""Per-family recipes for the tiny random checkpoints of `tiny.py` (one builder per family).

Each builder trains a toy tokenizer with the family's special tokens, configures the family's
real image processor at a small resolution, builds the real colpali-engine model class from a
shrunken config (decoder hidden = heads × 16) and saves model + processor into ``out``.
Attention quirks the real models have are kept on purpose so the tests exercise them:
Gemma3 and ModernBERT alternate sliding-window and global layers (windows shorter than a page),
Qwen3.5 alternates linear-attention (Gated DeltaNet) and softmax-attention layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEAD_DIM = 16
_TRAINING_TEXT = [
    "Describe the image.",
    "Describe this image",
    "What is the total revenue reported in the table for 2013?",
    "Which figure shows the attention map of the decoder layers?",
    "user assistant system image page document query answer User: Assistant: Query:",
    "0123456789 .,;:!?()[]{}<>/\\-_=+*&%$#@ \n\t",
]
QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<unk>",
]
PALI_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
GEMMA_SPECIALS = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
]
IDEFICS_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|begin_of_text|>",
    "<unk>",
    "<end_of_utterance>",
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
]
_GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}<start_of_image>"
    "{% else %}{{ item['text'] }}{% endif %}{% endfor %}<end_of_turn>\n{% endfor %}"
)


@dataclass(frozen=True)
class Recipe:
    """How to build one family: default/step image size, default depth, and the builder."""

    default_size: int
    size_step: int
    default_layers: int
    build: Callable[[Any, Path], None]
    size_help: str


def train_tokenizer(specials: list[str]) -> Any:
    """A byte-level BPE tokenizer (vocab ~400) trained on a few strings."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400 + len(specials),
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_TRAINING_TEXT * 4, trainer=trainer)
    return tokenizer


def fast_tokenizer(specials: list[str], **kwargs: Any) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(specials), unk_token="<unk>", **kwargs
    )


def save_model(model: Any, pad_id: int, out: Path) -> None:
    """Give the pad token a random embedding too, then save.

    Why: the families use the pad (or end-of-utterance) token as query augmentation and the
    embedding layer initialises ``padding_idx`` to zero; an all-augmentation query would then
    be all zeros (NaN after normalisation), which trained checkpoints never do.
    """
    import torch

    with torch.no_grad():
        model.get_input_embeddings().weight[pad_id].normal_(0.0, 0.02)
    model.eval().save_pretrained(out)


def pad_id(tokenizer: Any) -> dict[str, Any]:
    """The top-level ``pad_token_id`` config keyword (untyped in the config classes)."""
    return {"pad_token_id": tokenizer.pad_token_id}


def _text_sizes(spec: Any) -> dict[str, int]:
    hidden = spec.heads * HEAD_DIM
    return {
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.heads // 2,
        "head_dim": HEAD_DIM,
    }


# ---- PaliGemma (ColPali) ---------------------------------------------------------------------


def build_colpali(spec: Any, out: Path) -> None:
    from colpali_engine.models import ColPali, ColPaliProcessor
    from transformers import PaliGemmaConfig, SiglipImageProcessor

    tokenizer = fast_tokenizer(
        PALI_SPECIALS, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", padding_side="right"
    )
    size = spec.image_size
    image_processor = SiglipImageProcessor(
        size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    image_processor.image_seq_length = (size // 14) ** 2
    processor = ColPaliProcessor(image_processor=image_processor, tokenizer=tokenizer)
    vocab = len(processor.tokenizer)
    text = {**_text_sizes(spec), "num_key_value_heads": 1}
    config = PaliGemmaConfig(
        vision_config=_siglip(size, 14),
        text_config={
            "model_type": "gemma",
            **text,
            "vocab_size": vocab,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        },
        image_token_index=processor.image_token_id,
        projection_dim=text["hidden_size"],
        vocab_size=vocab,
        **pad_id(tokenizer),
    )
    save_model(ColPali(config), tokenizer.pad_token_id, out)
    processor.save_pretrained(out)


def _siglip(image_size: int, patch: int, model_type: str = "siglip_vision_model") -> dict:
    return {
        "model_type": model_type,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": image_size,
        "patch_size": patch,
        "vision_use_head": False,
    }


# ---- Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5 ------------------------------------------------


def _qwen_tokenizer() -> Any:
    return fast_tokenizer(
        QWEN_SPECIALS, pad_token="<|endoftext|>", eos_token="<|im_end|>", padding_side="left"
    )


def _qwen_ids(tokenizer: Any) -> dict[str, Any]:
    ids = tokenizer.convert_tokens_to_ids
    return {
        "image_token_id": ids("<|image_pad|>"),
        "video_token_id": ids("<|video_pad|>"),
        "vision_start_token_id": ids("<|vision_start|>"),
        "vision_end_token_id": ids("<|vision_end|>"),
    }


def _qwen_text(spec: Any, tokenizer: Any, *, interleaved: bool = False) -> dict:
    rope = {"rope_type": "default", "mrope_section": [4, 2, 2], "rope_theta": 1e4}
    if interleaved:
        rope["mrope_interleaved"] = True
    return {
        **_text_sizes(spec),
        "vocab_size": len(tokenizer),
        "rope_parameters": rope,
        "bos_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def _qwen_image_processor(spec: Any, patch: int) -> Any:
    from transformers import Qwen2VLImageProcessor

    return Qwen2VLImageProcessor(
        min_pixels=(2 * patch) ** 2 * 4,
        max_pixels=spec.image_size**2,
        patch_size=patch,
        temporal_patch_size=2,
        merge_size=2,
    )


def build_colqwen2(spec: Any, out: Path) -> None:
    from colpali_engine.models import ColQwen2, ColQwen2Processor
    from transformers import Qwen2VLConfig, Qwen2VLVideoProcessor

    tokenizer = _qwen_tokenizer()
    processor = ColQwen2Processor(
        image_processor=_qwen_image_processor(spec, 14),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
    )
    hidden = spec.heads * HEAD_DIM
    config = Qwen2VLConfig(
        text_config=_qwen_text(spec, tokenizer),
        vision_config={
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": hidden,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        **_qwen_ids(tokenizer),
    )
    save_model(ColQwen2(config), tokenizer.pad_token_id, out)
    processor.save_pretrained(out)


def build_colqwen2_5(spec: Any, out: Path) -> None:
    from colpali_engine.models import ColQwen2_5, ColQwen2_5_Processor
    from transformers import Qwen2_5_VLConfig, Qwen2VLVideoProcessor

    tokenizer = _qwen_tokenizer()
    processor = ColQwen2_5_Processor(
        image_processor=_qwen_image_processor(spec, 14),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
    )
    config = Qwen2_5_VLConfig(
        text_config=_qwen_text(spec, tokenizer),
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": spec.heads * HEAD_DIM,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,  # windowed vision blocks over 2x2 merged tiles, as the real model
            "fullatt_block_indexes": [1],
        },
        **_qwen_ids(tokenizer),
    )
    save_model(ColQwen2_5(config), tokenizer.pad_token_id, out)
    processor.save_pretrained(out)


def _qwen3_vision(spec: Any) -> dict:
    return {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": spec.heads * HEAD_DIM,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [0],
    }


def _qwen3_processor(processor_class: Any, spec: Any, tokenizer: Any) -> Any:
    from transformers import Qwen3VLVideoProcessor

    return processor_class(
        image_processor=_qwen_image_processor(spec, 16),
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(),
    )


def build_colqwen3(spec: Any, out: Path) -> None:
    from colpali_engine.models import ColQwen3, ColQwen3Processor
    from transformers import Qwen3VLConfig

    tokenizer = _qwen_tokenizer()
    processor = _qwen3_processor(ColQwen3Processor, spec, tokenizer)
    config = Qwen3VLConfig(
        text_config=_qwen_text(spec, tokenizer, interleaved=True),
        vision_config=_qwen3_vision(spec),
        **_qwen_ids(tokenizer),
    )
    save_model(ColQwen3(config), tokenizer.pad_token_id, out)
    processor.save_pretrained(out)


def build_colqwen3_5(spec: Any, out: Path) -> None:
    from colpali_engine.models import ColQwen3_5, ColQwen3_5Processor
    from transformers import Qwen3_5Config

    tokenizer = _qwen_tokenizer()
    processor = _qwen3_processor(ColQwen3_5Processor, spec, tokenizer)
    text = _qwen_text(spec, tokenizer, interleaved=True)
    text["rope_parameters"]["partial_rotary_factor"] = 1.0
    config = Qwen3_5Config(
        text_config={
            **text,
            # The real model: three Gated DeltaNet (linear attention) layers per softmax layer.
            "layer_types": [
                "full_attention" if i % 2 else "linear_attention" for i in range(spec.layers)
            ],
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": HEAD_DIM,
            "linear_value_head_dim": HEAD_DIM,
            "linear_num_key_heads": spec.heads // 2,
            "linear_num_value_heads": spec.heads,
        },
        vision_config=_qwen3_vision(spec),
        **_qwen_ids(tokenizer),
    )
    save_model(ColQwen3_5(config), tokenizer.pad_token_id, out)
    processor.save_pretrained(out)


# ---- Gemma3 (ColGemma3) ----------------------------------------------------------------------


def build_colgemma3(spec: Any, out: Path) -> None:
    from colpali_engine.models import ColGemma3, ColGemmaProcessor3
    from transformers import Gemma3Config, Gemma3ImageProcessor

    tokenizer = fast_tokenizer(
        GEMMA_SPECIALS,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        padding_side="left",
        extra_special_tokens={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
    )
    tokenizer.chat_template = _GEMMA_CHAT_TEMPLATE
    size = spec.image_size
    tokens_per_side = size // 28  # SigLIP patches of 14 px, average-pooled 2x2 (as 64 -> 16)
    image_processor = Gemma3ImageProcessor(
        size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    processor = ColGemmaProcessor3(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_length=tokens_per_side**2,
    )
    ids = tokenizer.convert_tokens_to_ids
    config = Gemma3Config(
        text_config={
            **_text_sizes(spec),
            "vocab_size": len(tokenizer),
            "query_pre_attn_scalar": HEAD_DIM,
            "sliding_window": 8,  # shorter than a page: the sliding layers really are windowed
            "layer_types": [
                "full_attention" if i % 2 else "sliding_attention" for i in range(spec.layers)
            ],
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        },
        vision_config=_siglip(size, 14),
        mm_tokens_per_image=tokens_per_side**2,
        boi_token_index=ids("<start_of_image>"),
        eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"),
        **pad_id(tokenizer),
    )
    save_model(ColGemma3(config), tokenizer.pad_token_id, out)
    processor.save_pretrained(out)


# ---- Idefics3 (ColSmol) and ModernVBERT ------------------------------------------------------


def _idefics_processor(processor_class: Any, spec: Any, tokenizer: Any, patch: int) -> Any:
    """Pages are split into tiles of ``image_size`` px (at most 2x2) plus one global tile."""
    from transformers import Idefics3ImageProcessor

    tile = spec.image_size
    image_processor = Idefics3ImageProcessor(
        size={"longest_edge": 2 * tile},
        max_image_size={"longest_edge": tile},
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    return processor_class(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=(tile // patch) ** 2 // 4,
    )


def build_colidefics3(spec: Any, out: Path) -> None:
    from colpali_engine.models import ColIdefics3, ColIdefics3Processor
    from transformers import Idefics3Config

    tokenizer = fast_tokenizer(
        IDEFICS_SPECIALS, pad_token="<|endoftext|>", eos_token="<end_of_utterance>"
    )
    processor = _idefics_processor(ColIdefics3Processor, spec, tokenizer, 14)
    tokenizer = processor.tokenizer
    config = Idefics3Config(
        text_config={
            "model_type": "llama",
            **_text_sizes(spec),
            "vocab_size": len(tokenizer),
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        },
        vision_config={**_siglip(spec.image_size, 14, "idefics3_vision")},
        scale_factor=2,
        image_token_id=processor.image_token_id,
        **pad_id(tokenizer),
    )
    config.vision_config.__dict__.pop("vision_use_head", None)
    save_model(ColIdefics3(config), tokenizer.pad_token_id, out)
    processor.save_pretrained(out)


def build_colmodernvbert(spec: Any, out: Path) -> None:
    from colpali_engine.models import ColModernVBert, ColModernVBertProcessor
    from transformers import ModernVBertConfig

    tokenizer = fast_tokenizer(
        IDEFICS_SPECIALS, pad_token="<|endoftext|>", eos_token="<end_of_utterance>"
    )
    processor = _idefics_processor(ColModernVBertProcessor, spec, tokenizer, 14)
    tokenizer = processor.tokenizer
    hidden = spec.heads * HEAD_DIM
    config = ModernVBertConfig(
        text_config={
            "model_type": "modernbert",
            "hidden_size": hidden,
            "intermediate_size": 2 * hidden,
            "num_hidden_layers": spec.layers,
            "num_attention_heads": spec.heads,
            "vocab_size": len(tokenizer),
            "local_attention": 16,  # a 17-token window, shorter than a page
            "layer_types": [
                "full_attention" if i % 2 == 0 else "sliding_attention" for i in range(spec.layers)
            ],
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": tokenizer.pad_token_id,
            "cls_token_id": tokenizer.pad_token_id,
            "sep_token_id": tokenizer.eos_token_id,
        },
        vision_config=_siglip(spec.image_size, 14),
        pixel_shuffle_factor=2,
        image_token_id=processor.image_token_id,
    )
    save_model(ColModernVBert(config), tokenizer.pad_token_id, out)
    processor.save_pretrained(out)


RECIPES: dict[str, Recipe] = {
    "colpali": Recipe(56, 14, 2, build_colpali, "the square input side (tokens = (size/14)^2)"),
    "colqwen2": Recipe(112, 28, 2, build_colqwen2, "the longest side (tokens <= (size/28)^2)"),
    "colqwen2.5": Recipe(112, 28, 2, build_colqwen2_5, "the longest side (tokens <= (size/28)^2)"),
    "colqwen3": Recipe(128, 32, 2, build_colqwen3, "the longest side (tokens <= (size/32)^2)"),
    "colqwen3.5": Recipe(128, 32, 4, build_colqwen3_5, "the longest side (tokens <= (size/32)^2)"),
    "colgemma3": Recipe(112, 28, 2, build_colgemma3, "the square input side (tokens=(size/28)^2)"),
    "colidefics3": Recipe(56, 28, 2, build_colidefics3, "the tile side (<= 2x2 tiles + 1 global)"),
    "colmodernvbert": Recipe(
        56, 28, 2, build_colmodernvbert, "the tile side (<= 2x2 tiles + 1 global)"
    ),
}
"""Family name -> recipe. ``size_step`` is the granularity the family's image processor needs."""
