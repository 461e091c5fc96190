"""Col* encoders on the tiny offline models: embeddings, streaming statistics, loading errors."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import torch
from PIL import Image

from vrag_compress.encoders import (
    TINY_MODELS,
    EncoderInputError,
    ModelNotFoundError,
    UnsupportedModelError,
    load_encoder,
)

if TYPE_CHECKING:
    # the encoder modules import transformers: each test imports what it uses, so that collecting
    # this module (in every pytest-xdist worker) costs no transformers import
    from vrag_compress.encoders.colpali import ColEncoder

# Different sizes and aspect ratios: ColQwen2 gets different token counts (left padding).
SIZES = [(100, 80), (60, 190), (300, 200), (56, 56)]


def _pages(seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)) for w, h in SIZES]


@pytest.fixture(scope="module", params=sorted(TINY_MODELS))
def encoder(request: pytest.FixtureRequest) -> ColEncoder:
    return load_encoder(request.param, device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def done(encoder: ColEncoder) -> dict[str, Any]:
    """What several tests compare against, computed once per encoder: `encoded` and `eager`."""
    return {}


def encoded(encoder: ColEncoder, done: dict[str, Any], *, with_stats: bool) -> list[Any]:
    """The pages of `_pages()` encoded as one batch (the encoder's batch size is 4)."""
    key = f"encoded-{with_stats}"
    if key not in done:
        done[key] = encoder.encode_pages(_pages(), with_stats=with_stats, batch_size=len(SIZES))
    return done[key]


def eager(encoder: ColEncoder, done: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """The processed batch of `_pages()`, its visual-token mask, and the embeddings and every
    layer's full attention map of an eager forward (the reference the captures must equal)."""
    from vrag_compress.encoders.capture import forward_with_attention_maps

    if "eager" not in done:
        batch = encoder.process_pages(_pages())
        visual = batch["input_ids"] == encoder.image_token_id
        done["eager"] = (batch, visual, *forward_with_attention_maps(encoder.model, batch))
    return done["eager"]


# ColQwen3 projects to 320 dimensions; every other family to 128.
DIMS = {"tiny-colqwen3": 320}
# Tiled families (page tiles + a global thumbnail) have no single row-major page grid.
NO_GRID = {"tiny-colsmol", "tiny-colmodernvbert"}
# Fixed-resolution families: every page gives the same token count (no padding among pages).
FIXED = {"tiny-colpali", "tiny-colgemma3"}


def test_info_and_shapes(encoder: ColEncoder, done: dict[str, Any]) -> None:
    info = encoder.info()
    assert json.loads(json.dumps(info)) == info
    assert info["family"] == TINY_MODELS[encoder.model_id]
    dim = DIMS.get(encoder.model_id, 128)
    # tiny-colqwen3_5 has 4 layers, 2 of them softmax attention (the others Gated DeltaNet)
    assert (info["dim"], info["n_layers"], info["n_heads"]) == (dim, 2, 4)
    pages = encoded(encoder, done, with_stats=False)
    assert len(pages) == len(SIZES)
    for page in pages:
        assert page.vectors.dtype == np.float32 and page.dim == dim
        assert np.all(np.isfinite(page.vectors))
        np.testing.assert_allclose(np.linalg.norm(page.vectors, axis=1), 1.0, atol=1e-5)
        if encoder.model_id in NO_GRID:
            assert page.grid is None
        else:
            assert page.grid is not None and page.grid[0] * page.grid[1] == page.n_tokens
        assert page.centrality is None and page.eos_attention is None


def test_token_counts_follow_image_size(encoder: ColEncoder, done: dict[str, Any]) -> None:
    counts = {page.n_tokens for page in encoded(encoder, done, with_stats=False)}
    if encoder.model_id in FIXED:
        assert len(counts) == 1
    else:
        assert len(counts) > 1  # the batch really mixes sequence lengths (left padding)


def test_batched_equals_one_at_a_time(encoder: ColEncoder, done: dict[str, Any]) -> None:
    images = _pages()
    batched = encoded(encoder, done, with_stats=True)
    single = [encoder.encode_pages([image], with_stats=True)[0] for image in images]
    for a, b in zip(batched, single, strict=True):
        assert a.grid == b.grid
        np.testing.assert_allclose(a.vectors, b.vectors, atol=2e-5)
        np.testing.assert_allclose(a.centrality, b.centrality, atol=2e-5)
        np.testing.assert_allclose(a.eos_attention, b.eos_attention, atol=2e-5)


@pytest.mark.parametrize("chunk_bytes", [1, 16 * 2**20])
def test_streaming_stats_equal_eager_attention_maps(
    encoder: ColEncoder, done: dict[str, Any], chunk_bytes: int
) -> None:
    """chunk_bytes=1 forces one visual row per chunk; the default takes all rows at once."""
    from vrag_compress.encoders.capture import (
        capture_attention,
        stats_from_attention_maps,
        use_streaming_attention,
    )
    from vrag_compress.encoders.colpali import last_token_index

    batch, visual, eager_embeddings, maps = eager(encoder, done)
    last = last_token_index(batch["attention_mask"])
    assert len(maps) == encoder.n_layers
    want_cent, want_eos = stats_from_attention_maps(maps, visual, last)

    use_streaming_attention(encoder.model)
    with capture_attention(encoder.model, visual, last, chunk_bytes=chunk_bytes) as capture:
        with torch.inference_mode():
            embeddings = encoder.model(**batch)
    cent, eos = capture.results()

    mask = visual.unsqueeze(0).expand_as(cent)
    torch.testing.assert_close(cent[mask], want_cent[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(eos[mask], want_eos[mask], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(embeddings[visual], eager_embeddings[visual], atol=1e-4, rtol=1e-4)


def test_encode_pages_stats_match_reference(encoder: ColEncoder, done: dict[str, Any]) -> None:
    from vrag_compress.encoders.capture import stats_from_attention_maps
    from vrag_compress.encoders.colpali import last_token_index

    pages = encoded(encoder, done, with_stats=True)
    batch, visual, _, maps = eager(encoder, done)
    cent, eos = stats_from_attention_maps(maps, visual, last_token_index(batch["attention_mask"]))
    for b, page in enumerate(pages):
        index = torch.nonzero(visual[b]).flatten()
        assert page.centrality.shape == (encoder.n_layers, page.n_tokens)
        np.testing.assert_allclose(page.centrality, cent[:, b, index].numpy(), atol=1e-5)
        np.testing.assert_allclose(page.eos_attention, eos[:, b, index].numpy(), atol=1e-6)
        assert np.all(page.centrality >= 0) and np.all(page.eos_attention >= 0)


def test_stats_do_not_change_embeddings(encoder: ColEncoder, done: dict[str, Any]) -> None:
    plain = encoded(encoder, done, with_stats=False)
    with_stats = encoded(encoder, done, with_stats=True)
    for a, b in zip(plain, with_stats, strict=True):
        np.testing.assert_allclose(a.vectors, b.vectors, atol=1e-6)


def test_queries_have_no_padding_rows(encoder: ColEncoder) -> None:
    queries = ["hi", "what is the total revenue reported in the table for 2013 and 2014?", ""]
    batched = encoder.encode_queries(queries)
    single = [encoder.encode_queries([q])[0] for q in queries]
    lengths = {len(q) for q in batched}
    assert len(lengths) > 1
    for a, b in zip(batched, single, strict=True):
        assert a.shape == b.shape  # one-query batches have no padding at all
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(a, b, atol=2e-5)


def test_empty_inputs_and_bad_inputs(encoder: ColEncoder) -> None:
    assert encoder.encode_pages([]) == []
    assert encoder.encode_queries([]) == []
    with pytest.raises(EncoderInputError, match="image 1"):
        encoder.encode_pages([Image.new("RGB", (40, 40)), "page.png"])
    with pytest.raises(EncoderInputError, match="list of strings"):
        encoder.encode_queries("a single string")


def test_missing_hub_model_offline_raises_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as error:
        load_encoder("vidore/no-such-model-anywhere")
    message = str(error.value)
    assert "huggingface-cli download vidore/no-such-model-anywhere --local-dir" in message
    assert "tiny-colqwen2" in message and "meaningless" in message


def test_missing_local_folder_raises(tmp_path) -> None:
    with pytest.raises(ModelNotFoundError, match="no such folder"):
        load_encoder(str(tmp_path / "absent"))


def test_unsupported_architecture_raises(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(UnsupportedModelError, match="bert"):
        load_encoder(str(tmp_path))


@pytest.mark.parametrize("kind", ["bool", "additive", "causal-none", "bidirectional-none"])
def test_row_probabilities_match_a_full_softmax(kind: str) -> None:
    """The capture's per-row softmax agrees with a dense softmax for every mask form (GQA too)."""
    from vrag_compress.encoders.capture import (
        AttentionCapture,
        padding_safe_sdpa_mask,
        stats_from_attention_maps,
    )

    torch.manual_seed(0)
    batch, heads, kv_heads, seq, dim = 2, 4, 2, 9, 8
    query = torch.randn(batch, heads, seq, dim)
    key = torch.randn(batch, kv_heads, seq, dim)
    padding = torch.ones(batch, seq, dtype=torch.bool)
    padding[1, :3] = False  # left padding on the second sequence
    mask = None
    if kind in ("bool", "additive"):
        mask = padding_safe_sdpa_mask(
            batch_size=batch,
            q_length=seq,
            kv_length=seq,
            attention_mask=padding,
            allow_is_causal_skip=False,
        )
        assert mask.any(dim=-1).all()  # no fully masked row is left
        if kind == "additive":
            mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    causal = kind != "bidirectional-none"
    visual = torch.zeros(batch, seq, dtype=torch.bool)
    visual[:, 4:8] = True
    last = torch.tensor([seq - 1, seq - 1])

    module = torch.nn.Module()
    capture = AttentionCapture({id(module): 0}, visual, last, chunk_bytes=1)
    capture.record(module, query, key, mask, 0.5, causal and mask is None)
    cent, eos = capture.results()

    full_key = key.repeat_interleave(heads // kv_heads, dim=1)
    scores = query @ full_key.transpose(-1, -2) * 0.5
    if mask is None and causal:
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
    elif mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    maps = [torch.softmax(scores, dim=-1)]
    want_cent, want_eos = stats_from_attention_maps(maps, visual, last)
    torch.testing.assert_close(cent, want_cent, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(eos, want_eos, atol=1e-6, rtol=1e-5)


def test_tiny_build_is_deterministic(tmp_path) -> None:
    from vrag_compress.encoders import build_tiny_model
    from vrag_compress.encoders.colpali import ColEncoder

    a = build_tiny_model("colqwen2", tmp_path / "a", layers=1, heads=2)
    b = build_tiny_model("colqwen2", tmp_path / "b", layers=1, heads=2)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    encoder = ColEncoder.from_folder(a, device="cpu")
    assert (encoder.n_layers, encoder.n_heads, encoder.is_tiny) == (1, 2, True)
