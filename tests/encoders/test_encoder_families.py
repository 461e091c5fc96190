"""Family-specific behaviour of the Col* encoders: visual-token layout and grids, sliding-window
and linear-attention layers, families that cannot be captured or are not supported.

The shared contract (streaming statistics == eager maps, batched == single, queries) runs for
every family in test_encoders.py through its parametrised fixture.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
from PIL import Image

from vrag_compress.encoders import (
    StatsUnavailableError,
    UnsupportedModelError,
    load_encoder,
)

if TYPE_CHECKING:
    # the encoder modules import transformers: imported where used, so that collecting this
    # module (in every pytest-xdist worker) costs no transformers import
    from vrag_compress.encoders.colpali import ColEncoder

SIZES = [(100, 80), (60, 190), (300, 200), (56, 56)]


def _pages(seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)) for w, h in SIZES]


@pytest.fixture(scope="module")
def encoders() -> dict[str, ColEncoder]:
    return {}


def _encoder(cache: dict[str, ColEncoder], name: str) -> ColEncoder:
    if name not in cache:
        cache[name] = load_encoder(name, device="cpu", batch_size=4)
    return cache[name]


@pytest.mark.parametrize(
    "name", ["tiny-colqwen2", "tiny-colqwen2_5", "tiny-colqwen3", "tiny-colqwen3_5"]
)
def test_qwen_visual_tokens_follow_image_grid_thw(encoders, name: str) -> None:
    """One contiguous block of (h/merge)·(w/merge) tokens, row-major, after <|vision_start|>;
    the grid agrees with colpali-engine's own patch count for `vrag show`."""
    encoder = _encoder(encoders, name)
    images = _pages()
    batch = encoder.process_pages(images)
    merge = encoder.model.config.vision_config.spatial_merge_size
    pages = encoder.encode_pages(images)
    for b, (image, page) in enumerate(zip(images, pages, strict=True)):
        _, h, w = (int(v) for v in batch["image_grid_thw"][b])
        assert page.grid == (h // merge, w // merge)
        n_x, n_y = encoder.processor.get_n_patches(image.size, spatial_merge_size=merge)
        assert page.grid == (n_y, n_x)
        positions = torch.nonzero(batch["input_ids"][b] == encoder.image_token_id).flatten()
        assert positions.numel() == page.n_tokens
        assert torch.equal(positions, torch.arange(positions[0], positions[0] + page.n_tokens))
        start_id = encoder.model.config.vision_start_token_id
        assert int(batch["input_ids"][b, positions[0] - 1]) == start_id


@pytest.mark.parametrize("name", ["tiny-colpali", "tiny-colgemma3"])
def test_square_families_have_a_fixed_grid(encoders, name: str) -> None:
    encoder = _encoder(encoders, name)
    config = encoder.model.config
    if name == "tiny-colgemma3":
        side = int(config.mm_tokens_per_image**0.5)
    else:
        side = config.vision_config.image_size // config.vision_config.patch_size
    for page in encoder.encode_pages(_pages()):
        assert page.grid == (side, side) and page.n_tokens == side * side


@pytest.mark.parametrize("name", ["tiny-colsmol", "tiny-colmodernvbert"])
def test_tiled_families_count_tiles_plus_global_image(encoders, name: str) -> None:
    """Idefics3-style pages: one block of image_seq_len tokens per tile plus the thumbnail."""
    encoder = _encoder(encoders, name)
    images = _pages()
    batch = encoder.process_pages(images)
    tokenizer = encoder.processor.tokenizer
    tags = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    tile_tags = set(tokenizer.convert_tokens_to_ids(tags))
    seq_len = encoder.processor.image_seq_len
    for b, page in enumerate(encoder.encode_pages(images)):
        tiles = sum(int(t) in tile_tags for t in batch["input_ids"][b])
        assert page.n_tokens == (tiles + 1) * seq_len
        assert page.grid is None
    assert len({page.n_tokens for page in encoder.encode_pages(images)}) > 1


@pytest.mark.parametrize(
    ("name", "sliding", "full"),
    [("tiny-colgemma3", 0, 1), ("tiny-colmodernvbert", 1, 0)],
)
def test_sliding_window_layers_attend_only_within_the_window(
    encoders, name: str, sliding: int, full: int
) -> None:
    """The last token sees no visual token beyond its window in sliding layers, as in the
    real model (the window is shorter than the prompt that follows the image)."""
    encoder = _encoder(encoders, name)
    layer_types = encoder.model.config.text_config.layer_types
    assert (layer_types[sliding], layer_types[full]) == ("sliding_attention", "full_attention")
    images = _pages()
    batch = encoder.process_pages(images)
    window = encoder.model.config.text_config.sliding_window
    for b, page in enumerate(encoder.encode_pages(images, with_stats=True)):
        ids = batch["input_ids"][b]
        positions = torch.nonzero(ids == encoder.image_token_id).flatten().numpy()
        last = int(torch.nonzero(batch["attention_mask"][b]).max())
        far = last - positions > window
        assert far.any()
        assert np.all(page.eos_attention[sliding][far] == 0.0)
        assert np.all(page.eos_attention[full] > 0.0)


def test_qwen3_5_captures_only_its_softmax_attention_layers(encoders) -> None:
    from vrag_compress.encoders.capture import decoder_attention_modules

    encoder = _encoder(encoders, "tiny-colqwen3_5")
    layer_types = encoder.model.config.text_config.layer_types
    assert layer_types.count("linear_attention") == 2 and len(layer_types) == 4
    assert len(decoder_attention_modules(encoder.model)) == encoder.n_layers == 2
    page = encoder.encode_pages(_pages()[:1], with_stats=True)[0]
    assert page.centrality.shape == (2, page.n_tokens)
    assert np.all(np.isfinite(page.centrality)) and np.all(page.centrality >= 0)


def test_family_without_capture_still_encodes_and_sap_fails_clearly(encoders, monkeypatch) -> None:
    from vrag_compress.compress import get_compressor

    encoder = load_encoder("tiny-colqwen2", device="cpu")
    monkeypatch.setattr(encoder, "capture_error", "no softmax attention layers")
    pages = encoder.encode_pages(_pages())
    assert all(np.all(np.isfinite(p.vectors)) for p in pages)
    assert encoder.encode_queries(["revenue"])[0].shape[1] == encoder.dim
    with pytest.raises(StatsUnavailableError, match=r"tiny-colqwen2.*cannot be captured.*sap"):
        encoder.encode_pages(_pages(), with_stats=True)
    with pytest.raises(ValueError, match="needs attention statistics"):
        get_compressor("sap", layers=[0]).compress(pages[0])


def test_qwen_omni_is_refused_with_the_reason(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_omni"}))
    with pytest.raises(UnsupportedModelError, match="audio encoder"):
        load_encoder(str(tmp_path))
