"""Sentence Transformers `MultiVectorEncoder`s as index encoders (`st:NAME_OR_PATH`).

Tiny models are built offline from transformers configs (random weights, real classes, real
`save_pretrained` / `MultiVectorEncoder(folder)` loading), for a text family (BERT) and an image
family (transformers' ColQwen2ForRetrieval). Their vectors and attention statistics must equal what
our own text path and a direct transformers forward give for the same weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vrag_compress.compat  # noqa: F401  (before transformers)
from vrag_compress import VisualIndex
from vrag_compress.encoders import StatsUnavailableError, load_encoder
from vrag_compress.encoders.text import TextTokenEncoder
from vrag_compress.testing import tiny_multi_vector_encoder

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Aerodynamic heating of a blunt body at hypersonic speed, measured in a shock tunnel",
    "short",
]


@pytest.fixture(scope="module")
def text_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(tiny BERT folder, MultiVectorEncoder folder over it) with MiniLM's real tokenizer."""
    root = tmp_path_factory.mktemp("st_text")
    mve = tiny_multi_vector_encoder(root)
    return root / "bert", mve


@pytest.fixture(scope="module")
def image_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny transformers-native ColQwen2ForRetrieval with its processor."""
    from transformers import (
        ColQwen2Config,
        ColQwen2ForRetrieval,
        ColQwen2Processor,
        Qwen2VLConfig,
        Qwen2VLVideoProcessor,
    )

    from vrag_compress.encoders import tiny_families as recipes
    from vrag_compress.encoders.tiny import TinySpec

    out = tmp_path_factory.mktemp("st_image") / "colqwen2"
    spec = TinySpec("colqwen2", image_size=112, layers=2, heads=4)
    tokenizer = recipes._qwen_tokenizer()
    processor = ColQwen2Processor(
        image_processor=recipes._qwen_image_processor(spec, 14),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
    )
    vision = {
        "depth": 2,
        "embed_dim": 32,
        "hidden_size": spec.heads * recipes.HEAD_DIM,
        "num_heads": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    }
    vlm = Qwen2VLConfig(
        text_config=recipes._qwen_text(spec, tokenizer),
        vision_config=vision,
        **recipes._qwen_ids(tokenizer),
    )
    torch.manual_seed(0)
    ColQwen2ForRetrieval(ColQwen2Config(vlm_config=vlm, embedding_dim=32)).eval().save_pretrained(
        out
    )
    processor.save_pretrained(out)
    return out


def _pages() -> list[Image.Image]:
    noise = np.random.default_rng(0).integers(0, 256, (90, 120, 3), dtype=np.uint8)
    return [Image.new("RGB", (100, 140), "white"), Image.fromarray(noise)]


def test_text_vectors_and_statistics_equal_our_text_path(text_model: tuple[Path, Path]) -> None:
    bert, mve = text_model
    encoder = load_encoder(f"st:{mve}", device="cpu")
    ours = TextTokenEncoder(bert)
    theirs = encoder.encode_page_texts(TEXTS, with_stats=True)
    expected = ours.encode_documents(TEXTS, with_stats=True)
    for got, want in zip(theirs, expected, strict=True):
        np.testing.assert_allclose(got.vectors, want.vectors, atol=1e-5)
        np.testing.assert_allclose(got.centrality, want.centrality, atol=1e-5)
        np.testing.assert_allclose(got.eos_attention, want.eos_attention, atol=1e-5)
    query = encoder.encode_queries(["what is hypersonic heating"])[0]
    want = ours.encode_queries(["what is hypersonic heating"])[0]
    np.testing.assert_allclose(query, want, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(query, axis=1), 1.0, atol=1e-5)
    assert encoder.model_id == f"st:{mve}"


def test_image_vectors_equal_a_transformers_forward(image_model: Path) -> None:
    from transformers import ColQwen2ForRetrieval, ColQwen2Processor

    from vrag_compress.encoders.capture import stats_from_attention_maps
    from vrag_compress.encoders.colpali import last_token_index

    encoder = load_encoder(f"st:{image_model}", device="cpu")
    pages = encoder.encode_pages(_pages(), with_stats=True)

    model = ColQwen2ForRetrieval.from_pretrained(image_model).eval()
    batch = ColQwen2Processor.from_pretrained(image_model)(images=_pages(), return_tensors="pt")
    visual = batch["input_ids"] == model.config.vlm_config.image_token_id
    model.vlm.set_attn_implementation({"text_config": "eager", "vision_config": "sdpa"})
    with torch.inference_mode():  # the reference: every layer's full map, kept
        output = model(**batch, output_attentions=True)
    embeddings = output.embeddings
    centrality, eos = stats_from_attention_maps(
        output.attentions, visual, last_token_index(batch["attention_mask"])
    )
    for b, page in enumerate(pages):
        rows = embeddings[b][visual[b]].numpy()
        rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        np.testing.assert_allclose(page.vectors, rows, atol=1e-5)
        index = torch.nonzero(visual[b]).flatten()
        np.testing.assert_allclose(page.centrality, centrality[:, b, index].numpy(), atol=1e-4)
        np.testing.assert_allclose(page.eos_attention, eos[:, b, index].numpy(), atol=1e-4)
    assert encoder.encode_queries(["a white page"])[0].shape[1] == encoder.dim


def test_a_backbone_without_capture_still_encodes_but_says_why(
    text_model: tuple[Path, Path],
) -> None:
    from sentence_transformers import MultiVectorEncoder

    _, mve = text_model
    model = MultiVectorEncoder(str(mve), device="cpu")

    def refuse(*_: object, **__: object) -> None:
        raise ValueError("no custom attention here")

    model[0].auto_model.set_attn_implementation = refuse
    from vrag_compress.encoders.st import wrap_multi_vector_encoder

    encoder = wrap_multi_vector_encoder(model, model_id=f"st:{mve}")
    assert encoder.encode_page_texts(TEXTS)[0].vectors.shape[1] == 32
    with pytest.raises(StatsUnavailableError, match="no custom attention"):
        encoder.encode_page_texts(TEXTS, with_stats=True)


def test_index_takes_a_multi_vector_encoder_and_reopens_it(
    text_model: tuple[Path, Path], shared_data: Path, tmp_path: Path
) -> None:
    """SAP (attention statistics) through the wrapped model; `open` rebuilds it from the record."""
    from sentence_transformers import MultiVectorEncoder

    _, mve = text_model
    pdf = shared_data / "pdfs" / "gov" / "nics-background-checks-2015-11.pdf"
    path = tmp_path / "ix"
    with VisualIndex.create(path, encoder=MultiVectorEncoder(str(mve), device="cpu")) as index:
        report = index.add([pdf])
        assert report.pages_indexed > 0
        hits = index.search("background checks", k=3)
        assert index.model_id == f"st:{mve}"
    with VisualIndex.open(path) as reopened:
        again = reopened.search("background checks", k=3)
    assert [h.page_id for h in again] == [h.page_id for h in hits]
    assert [h.score for h in again] == pytest.approx([h.score for h in hits], abs=1e-4)


def test_cli_indexes_and_searches_with_an_st_model(
    text_model: tuple[Path, Path], shared_data: Path, tmp_path: Path
) -> None:
    """Both commands run in this process (a `vrag` process would import torch and Sentence
    Transformers again for each)."""
    from typer.testing import CliRunner

    from vrag_compress.cli import app

    _, mve = text_model
    pdf = shared_data / "pdfs" / "gov" / "nics-background-checks-2015-11.pdf"
    index = tmp_path / "cli.vrag"
    runner = CliRunner()
    done = runner.invoke(app, ["index", str(pdf), "--index", str(index), "--model", f"st:{mve}"])
    assert done.exit_code == 0, done.output
    found = runner.invoke(app, ["search", str(index), "background checks", "-k", "2", "--json"])
    assert found.exit_code == 0, found.output
    assert pdf.name in found.stdout


def test_a_missing_st_model_is_a_load_error(tmp_path: Path) -> None:
    from vrag_compress.encoders import EncoderLoadError

    with pytest.raises(EncoderLoadError, match="cannot load"):
        load_encoder(f"st:{tmp_path / 'nothing'}", device="cpu")
