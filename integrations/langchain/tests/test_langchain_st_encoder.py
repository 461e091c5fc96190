"""A Sentence Transformers `MultiVectorEncoder` handed to the LangChain retriever as it is."""

from __future__ import annotations

from pathlib import Path

from vrag_compress import VisualIndex
from vrag_compress.testing import tiny_multi_vector_encoder

from langchain_vrag_compress import CompressedColPaliRetriever


def test_retriever_takes_a_multi_vector_encoder(shared_data: Path, tmp_path: Path) -> None:
    # imported here, not at collection: Sentence Transformers (with scikit-learn and pandas)
    # costs every pytest-xdist worker seconds of CPU, and only this test uses it
    import vrag_compress.compat  # noqa: F401  (before transformers: torchvision guard)
    from sentence_transformers import MultiVectorEncoder

    folder = tiny_multi_vector_encoder(tmp_path / "model")
    pdf = shared_data / "pdfs" / "gov" / "nics-background-checks-2015-11.pdf"
    with VisualIndex.create(tmp_path / "ix", model=f"st:{folder}", compressor="uot") as index:
        index.add([pdf], progress=False)
        expected = [hit.page_id for hit in index.search("background checks", k=3)]
    retriever = CompressedColPaliRetriever.from_path(
        tmp_path / "ix", encoder=MultiVectorEncoder(str(folder), device="cpu"), k=3
    )
    documents = retriever.invoke("background checks")
    assert [d.metadata["page_id"] for d in documents] == expected
    assert documents[0].metadata["source"].endswith(pdf.name)
