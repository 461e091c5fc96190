"""`vrag_compress.testing`: the fake word encoder the integration suites share must behave like
a late-interaction model (pages rank by shared words) and satisfy the `Encoder` protocol."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from vrag_compress import Encoder, maxsim
from vrag_compress.testing import WordEncoder


def test_pages_rank_by_the_words_they_share_with_the_query():
    encoder = WordEncoder()
    assert isinstance(encoder, Encoder)
    pages = [encoder.page_image("apollo moon landing"), encoder.page_image(["Budget", "tax"], 7)]
    vectors = [e.vectors for e in encoder.encode_pages(pages)]
    (query,) = encoder.encode_queries(["moon landing?"])
    scores = [maxsim(query, v) for v in vectors]
    assert scores[0] > scores[1] and np.isclose(scores[0], 2.0)
    assert encoder.pages_encoded == 2


def test_a_saved_page_reads_back_and_a_foreign_image_is_one_unique_token():
    encoder = WordEncoder(dim=8)
    buffer = io.BytesIO()
    encoder.page_image("solar panels").save(buffer, "PNG")
    (page,) = encoder.encode_pages([Image.open(buffer)], with_stats=True)
    assert page.vectors.shape == (2, 8) and page.centrality.shape == (encoder.n_layers, 2)
    (foreign,) = encoder.encode_pages([Image.new("RGB", (10, 10), "blue")])
    assert foreign.n_tokens == 1
