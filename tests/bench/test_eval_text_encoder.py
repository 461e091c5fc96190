"""TextTokenEncoder with the bundled MiniLM: vectors, and streaming statistics equal to the
ones computed from eager ``output_attentions`` (padded batches included)."""

from __future__ import annotations

import numpy as np
import pytest

from vrag_compress.encoders.base import EncodingError
from vrag_compress.encoders.text import TextModelError, TextTokenEncoder, resolve_text_model

TEXTS = [
    "the boundary layer on a flat plate . heat transfer",
    "a short one.",
    "what similarity laws must be obeyed when constructing aeroelastic models of heated aircraft ?",
]


@pytest.fixture(scope="module")
def encoder() -> TextTokenEncoder:
    return TextTokenEncoder("minilm", num_threads=2)


def test_shapes_and_unit_vectors(encoder: TextTokenEncoder) -> None:
    assert (encoder.dim, encoder.n_layers) == (384, 6)
    pages = encoder.encode_documents(TEXTS, with_stats=True)
    tokens = encoder.document_tokens(TEXTS)
    for page, toks in zip(pages, tokens, strict=True):
        assert page.vectors.shape == (len(toks), 384)
        assert page.centrality.shape == page.eos_attention.shape == (6, len(toks))
        np.testing.assert_allclose(np.linalg.norm(page.vectors, axis=1), 1.0, atol=1e-5)
    assert tokens[0][:3] == ["the", "boundary", "layer"]
    plain = encoder.encode_documents(TEXTS[:1])
    assert plain[0].centrality is None
    np.testing.assert_allclose(plain[0].vectors, pages[0].vectors, atol=1e-5)


def test_queries_keep_every_non_padding_token(encoder: TextTokenEncoder) -> None:
    queries = encoder.encode_queries(TEXTS)
    tokens = encoder.document_tokens(TEXTS)
    assert [q.shape[0] for q in queries] == [len(t) + 2 for t in tokens]  # + [CLS], [SEP]


def test_statistics_match_eager_attention(encoder: TextTokenEncoder) -> None:
    import torch
    from transformers import AutoModel

    pages = encoder.encode_documents(TEXTS, with_stats=True)  # one padded batch
    eager = AutoModel.from_pretrained(resolve_text_model("minilm"), attn_implementation="eager")
    eager.eval()
    for text, page in zip(TEXTS, pages, strict=True):
        enc = encoder.tokenizer([text], return_tensors="pt", return_special_tokens_mask=True)
        visual = ~enc.pop("special_tokens_mask")[0].bool()
        with torch.no_grad():
            out = eager(**enc, output_attentions=True)
        cent = np.stack(
            [a[0][:, visual][:, :, visual].sum(1).mean(0).numpy() for a in out.attentions]
        )
        eos = np.stack([a[0][:, -1, visual].mean(0).numpy() for a in out.attentions])
        hidden = out.last_hidden_state[0][visual].numpy()
        np.testing.assert_allclose(page.centrality, cent, atol=1e-5)
        np.testing.assert_allclose(page.eos_attention, eos, atol=1e-5)
        np.testing.assert_allclose(
            page.vectors, hidden / np.linalg.norm(hidden, axis=1, keepdims=True), atol=1e-5
        )


def test_small_batch_budget_gives_the_same_result(encoder: TextTokenEncoder) -> None:
    small = TextTokenEncoder("minilm", max_batch_cells=1)  # one document per forward pass
    a = encoder.encode_documents(TEXTS, with_stats=True)
    b = small.encode_documents(TEXTS, with_stats=True)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x.centrality, y.centrality, atol=1e-5)
        np.testing.assert_allclose(x.vectors, y.vectors, atol=1e-5)


def test_bad_inputs(encoder: TextTokenEncoder, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(EncodingError, match="no non-special tokens"):
        encoder.encode_documents(["ok text", ""])
    with pytest.raises(EncodingError, match="expected str"):
        encoder.encode_documents(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(TextModelError, match="local folder"):
        TextTokenEncoder(tmp_path)
