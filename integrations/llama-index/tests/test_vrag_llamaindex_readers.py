"""PDFPageReader and PageImageNodeParser on the shared PDFs: one ImageNode per page."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from llama_index.core import SimpleDirectoryReader
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import Document, ImageDocument, ImageNode
from PIL import Image
from vrag_compress.ingest import IngestError, open_document

from llama_index.readers.vrag_compress import PageImageNodeParser, PDFPageReader


@pytest.fixture(scope="module")
def pdf(shared_data) -> Path:
    return shared_data / "pdfs" / "edge" / "multi_page.pdf"


def test_reader_makes_one_document_per_file(pdf, shared_data):
    [doc] = PDFPageReader().load_data(pdf, extra_info={"collection": "edge"})
    with open_document(pdf) as opened:
        assert doc.id_ == opened.doc_id and doc.metadata["n_pages"] == opened.n_pages
    assert doc.metadata["file_name"] == "multi_page.pdf" and doc.metadata["collection"] == "edge"
    gov = PDFPageReader().load_data(shared_data / "pdfs" / "gov")
    assert len(gov) == len(list((shared_data / "pdfs" / "gov").glob("*.pdf")))


def test_reader_rejects_a_bad_file(tmp_path):
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(b"%PDF-1.4 this is not really a pdf")
    with pytest.raises(IngestError, match="broken.pdf"):
        PDFPageReader().load_data(bad)


def test_parser_renders_one_image_node_per_page(pdf, tmp_path):
    docs = PDFPageReader().load_data(pdf)
    nodes = PageImageNodeParser(image_dir=str(tmp_path / "pages"), dpi=40).get_nodes_from_documents(
        docs
    )
    n_pages = docs[0].metadata["n_pages"]
    assert [n.metadata["page_no"] for n in nodes] == list(range(1, n_pages + 1))
    doc_id = docs[0].id_
    for page_no, node in enumerate(nodes, start=1):
        assert isinstance(node, ImageNode)
        assert node.node_id == f"{doc_id}:{page_no}" and node.ref_doc_id == doc_id
        assert node.metadata["source"] == str(pdf) and node.metadata["filename"] == pdf.name
        assert Path(node.image_path).is_file() and node.image_mimetype == "image/png"
    with open_document(pdf, dpi=40) as opened:
        first = opened.page(1)
        assert nodes[0].text == (first.text or "")
        with Image.open(nodes[0].image_path) as image:
            assert image.size == first.image.size
    assert nodes[1].prev_node.node_id == nodes[0].node_id  # LlamaIndex's page order links


def test_parser_inlines_images_without_an_image_dir(pdf):
    nodes = PageImageNodeParser(dpi=30).get_nodes_from_documents(PDFPageReader().load_data(pdf))
    assert nodes[0].image_path is None
    with Image.open(io.BytesIO(base64.b64decode(nodes[0].image))) as image:
        assert image.width > 0


def test_parser_in_an_ingestion_pipeline(pdf, tmp_path, shared_data):
    pipeline = IngestionPipeline(
        transformations=[PageImageNodeParser(image_dir=str(tmp_path), dpi=30)]
    )
    scan = shared_data / "pdfs" / "edge" / "ocr_test.pdf"
    nodes = pipeline.run(documents=PDFPageReader().load_data([pdf, scan]))
    by_file = {}
    for node in nodes:
        by_file.setdefault(node.metadata["filename"], []).append(node)
    assert set(by_file) == {pdf.name, scan.name}
    assert all(isinstance(n, ImageNode) for n in nodes)


def test_simple_directory_reader_with_the_page_reader(pdf, tmp_path):
    reader = SimpleDirectoryReader(input_files=[pdf], file_extractor={".pdf": PDFPageReader()})
    docs = reader.load_data()
    nodes = PageImageNodeParser(dpi=30).get_nodes_from_documents(docs)
    assert len(nodes) == docs[0].metadata["n_pages"]
    assert all(n.ref_doc_id == docs[0].id_ for n in nodes)


def test_image_documents_become_one_page_each(tmp_path):
    path = tmp_path / "scan.png"
    Image.new("RGB", (30, 20), "white").save(path)
    doc = ImageDocument(id_="scan", image_path=str(path), text="scanned words")
    [node] = PageImageNodeParser().get_nodes_from_documents([doc])
    assert node.node_id == "scan:1" and node.text == "scanned words"
    assert node.image_path == str(path) and node.ref_doc_id == "scan"


def test_a_document_without_a_file_or_image_is_refused():
    with pytest.raises(ValueError, match="neither an image nor a file path"):
        PageImageNodeParser().get_nodes_from_documents([Document(id_="x", text="hello")])
