"""VisualIndex end to end with the tiny offline models on real PDFs and real ViDoRe pages."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image

from vrag_compress import VisualIndex, get_compressor, maxsim
from vrag_compress.index import ModelMismatchError
from vrag_compress.ingest import Page

pytestmark = pytest.mark.slow  # end to end with real models and data


def page_count(path: Path) -> int:
    pdf = pdfium.PdfDocument(str(path))
    try:
        return len(pdf)
    finally:
        pdf.close()


GOV_PDFS = (
    "scotus-transcript-p1.pdf",
    "nics-background-checks-2015-11.pdf",
    "senate-expenditures.pdf",
    "amt_handbook_sample.pdf",
)
"""The one-page real government PDFs (the 15- and 16-page ones would only add encoding time)."""
ARXIV_IMAGES = 3
"""ViDoRe page images indexed beside them (with the 5-page PDF: batches of 3 split a document)."""


@pytest.fixture(scope="module")
def gov_folder(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real government PDFs and a 5-page PDF (copied to a temp folder so tests can modify the
    folder)."""
    folder = tmp_path_factory.mktemp("gov")
    for name in GOV_PDFS:
        shutil.copy(shared_data / "pdfs" / "gov" / name, folder / name)
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", folder / "multi_page.pdf")
    return folder


@pytest.fixture(scope="module")
def arxiv_folder(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("arxiv")
    for image in sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())[
        :ARXIV_IMAGES
    ]:
        shutil.copy(image, folder / image.name)
    return folder


@pytest.fixture(scope="module")
def colqwen_index(gov_folder: Path, arxiv_folder: Path, tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("idx") / "gov.vrag"
    index = VisualIndex.create(
        path,
        model="tiny-colqwen2",
        compressor=get_compressor("sap", ratio=0.25, layers=[0, 1]),
        batch_size=3,
    )
    index.add([gov_folder], metadata={"collection": "gov"}, progress=False, ocr="never")
    index.add(arxiv_folder, metadata={"collection": "arxiv"}, progress=False, ocr="never")
    yield index
    index.close()


def expected_pages(gov_folder: Path, arxiv_folder: Path) -> int:
    images = list(arxiv_folder.iterdir())
    return sum(page_count(p) for p in gov_folder.glob("*.pdf")) + len(images)


def test_indexes_every_page_and_verifies(colqwen_index, gov_folder, arxiv_folder):
    assert expected_pages(gov_folder, arxiv_folder) == 12
    assert colqwen_index.store.count() == expected_pages(gov_folder, arxiv_folder)
    assert all(d.complete for d in colqwen_index.documents())
    report = colqwen_index.verify()
    assert report.ok, report.problems


def test_scores_equal_maxsim_of_stored_vectors(colqwen_index):
    query = "background checks by state"
    hits = colqwen_index.search(query, k=5)
    assert len(hits) == 5
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    q = colqwen_index.encoder.encode_queries([query])[0]
    for hit in hits:
        stored = colqwen_index.store.get([hit.page_id])[0].vectors
        assert hit.score == pytest.approx(maxsim(q, stored.astype(np.float32)), rel=1e-4, abs=1e-4)


def test_compression_budget_is_respected(colqwen_index):
    hit = colqwen_index.search("table", k=1)[0]
    stored = colqwen_index.store.get([hit.page_id])[0]
    n_tokens = stored.metadata["n_tokens"]
    assert stored.vectors.shape[0] == int(np.ceil(0.25 * n_tokens))


def test_filters_restrict_results(colqwen_index):
    hits = colqwen_index.search("figure", k=50, filter={"collection": "arxiv"})
    assert hits and {h.metadata["collection"] for h in hits} == {"arxiv"}
    hits = colqwen_index.search("figure", k=50, filter={"filename": "scotus-transcript-p1.pdf"})
    assert hits and {h.source.endswith("scotus-transcript-p1.pdf") for h in hits} == {True}


def test_hits_carry_images_and_text(colqwen_index):
    hits = colqwen_index.search("firearms", k=50, filter={"collection": "gov"})
    assert hits
    hit = hits[0]
    assert hit.image_path is not None and hit.image_path.exists()
    assert isinstance(hit.image, Image.Image) and min(hit.image.size) > 100
    assert any(h.text for h in hits), "born-digital PDF pages carry their text layer"
    again = colqwen_index.page_image(hit.doc_id, hit.page_no)
    assert again.size == hit.image.size


def test_rerunning_add_skips_unchanged(colqwen_index, gov_folder):
    before = colqwen_index.store.count()
    report = colqwen_index.add([gov_folder], progress=False, ocr="never")
    assert report.pages_indexed == 0
    assert len(report.documents_skipped) == len(list(gov_folder.glob("*.pdf")))
    assert colqwen_index.store.count() == before


def test_changed_file_is_reindexed_and_old_version_removed(tmp_path, shared_data):
    src = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    work = tmp_path / "doc.pdf"
    shutil.copy(src, work)
    with VisualIndex.create(tmp_path / "i", model="tiny-colqwen2", compressor="random") as index:
        first = index.add([work], progress=False, ocr="never")
        shutil.copy(shared_data / "pdfs" / "gov" / "amt_handbook_sample.pdf", work)
        second = index.add([work], progress=False, ocr="never")
        assert second.documents_replaced == first.documents_indexed
        docs = index.documents()
        assert [d.doc_id for d in docs] == second.documents_indexed
        assert index.store.count() == page_count(work)


def test_reopen_delete_and_model_mismatch(tmp_path, shared_data):
    path = tmp_path / "arxiv.vrag"
    images = tmp_path / "images"
    images.mkdir()
    for image in sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())[:3]:
        shutil.copy(image, images / image.name)
    with VisualIndex.create(path, model="tiny-colpali", compressor="uot", ratio=0.2) as index:
        index.add(images, progress=False, ocr="never")
        total = index.store.count()
        some_doc = index.documents()[0].doc_id
    with pytest.raises(ModelMismatchError, match="tiny-colpali"):
        VisualIndex.open(path, model="tiny-colqwen2")
    with VisualIndex.open(path) as index:
        assert index.compressor.name == "uot"
        assert index.store.count() == total
        assert index.delete(some_doc) == 1
        assert some_doc not in {h.doc_id for h in index.search("a chart", k=total)}
        assert not (path / "images" / some_doc).exists()
        assert index.verify().ok
        layout_doc = index.documents()[0].doc_id
        layout = index.page_layout(layout_doc, 1)
        assert layout is not None and "assignment" in layout


def test_bad_files_are_reported_and_good_ones_indexed(tmp_path, shared_data):
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", folder / "good.pdf")
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.7\nthis is not really a pdf")
    good = (shared_data / "pdfs" / "edge" / "multi_page.pdf").read_bytes()
    (folder / "truncated.pdf").write_bytes(good[: len(good) // 3])
    (folder / "empty.pdf").write_bytes(b"")
    with VisualIndex.create(tmp_path / "i", model="tiny-colqwen2", compressor="random") as index:
        report = index.add([folder], progress=False, ocr="never")
        assert index.store.count() == page_count(folder / "good.pdf")
    failed = {Path(f["path"]).name for f in report.failures}
    assert {"corrupt.pdf", "empty.pdf"} <= failed
    assert "good.pdf" not in failed
    assert all(f["reason"] for f in report.failures)


def _index_in_a_child(path: Path, folder: Path) -> None:
    """What the killed process runs. It is forked from this one, which has imported torch and
    transformers already (a fresh interpreter spent ~6 s of CPU importing them again). One torch
    thread: a forked child that starts a GNU OpenMP parallel region after its parent ran one
    hangs."""
    import torch

    torch.set_num_threads(1)
    index = VisualIndex.create(path, model="tiny-colqwen2", compressor="random", batch_size=1)
    index.add([folder], progress=False, ocr="never")


def test_interrupted_indexing_resumes_without_duplicates(tmp_path, shared_data):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("nics-background-checks-2015-11.pdf", "amt_handbook_sample.pdf"):
        shutil.copy(shared_data / "pdfs" / "gov" / name, folder / name)
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", folder / "multi_page.pdf")
    expected = sum(page_count(p) for p in folder.glob("*.pdf"))
    assert expected == 7  # killed after 3 pages, with pages left to resume
    path = tmp_path / "resume.vrag"
    child = multiprocessing.get_context("fork").Process(
        target=_index_in_a_child, args=(path, folder)
    )
    child.start()
    try:
        committed = 0
        deadline = time.monotonic() + 240
        while committed < 3 and child.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.2)
            committed = _committed_pages(path)
        assert child.exitcode is None, "indexing finished before it could be interrupted"
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join()
    finally:
        if child.exitcode is None:
            child.kill()
            child.join()
    interrupted = _committed_pages(path)
    assert 0 < interrupted < expected
    with VisualIndex.open(path) as index:
        report = index.add([folder], progress=False, ocr="never")
        assert report.pages_indexed == expected - interrupted
        assert index.store.count() == expected
        ids = index.store.page_ids()
        assert len(ids) == len(set(ids)) == expected
        assert all(d.complete for d in index.documents())
        assert index.verify().ok


def _committed_pages(path: Path) -> int:
    try:
        with VisualIndex.open(path, readonly=True) as index:
            return index.store.count()
    except Exception:
        return 0


def test_adapter_api_upsert_get_delete_pages(tmp_path, shared_data):
    """What the LlamaIndex / LangChain adapters use: own ids, per-page metadata, upserts."""
    images = sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())[:3]
    pages = [
        Page(
            doc_id=f"doc{i}", page_no=1, image=Image.open(p).convert("RGB"), text=f"t{i}", source=p
        )
        for i, p in enumerate(images)
    ]
    with VisualIndex.create(tmp_path / "i", model="tiny-colqwen2", compressor="random") as index:
        ids = index.upsert_pages(
            pages, page_ids=["a", "b", "c"], metadata=[{"n": i} for i in range(3)]
        )
        assert ids == ["a", "b", "c"] and index.store.count() == 3
        got = index.get(["c", "missing", "a"])
        assert [h.page_id for h in got] == ["c", "a"]
        assert got[0].metadata["n"] == 2 and got[0].text == "t2" and got[0].image.size[0] > 0
        index.upsert_pages(pages[:1], page_ids=["a"], metadata=[{"n": 9}])
        assert index.store.count() == 3 and index.get(["a"])[0].metadata["n"] == 9
        image_file = index.get(["b"])[0].image_path
        assert index.delete_pages(["b", "nope"]) == 1
        assert not image_file.exists() and "doc1" not in {d.doc_id for d in index.documents()}
        assert index.clear() == 2 and index.store.count() == 0 and index.documents() == []
        assert index.verify().ok


def test_identical_files_are_indexed_once(tmp_path, shared_data):
    folder = tmp_path / "docs"
    folder.mkdir()
    src = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    shutil.copy(src, folder / "report.pdf")
    shutil.copy(src, folder / "report (1).pdf")
    with VisualIndex.create(tmp_path / "i", model="tiny-colqwen2", compressor="random") as index:
        report = index.add([folder], progress=False, ocr="never")
        assert report.failures == []
        assert len(report.documents_indexed) == 1 and len(report.documents_skipped) == 1
        assert index.store.count() == page_count(src)


def test_a_page_that_fails_to_render_does_not_lose_the_rest(tmp_path, shared_data, monkeypatch):
    import vrag_compress.indexing as index_module
    from vrag_compress.ingest import CorruptPDFError

    real_open = index_module.open_document

    class BrokenPageTwo:
        def __init__(self, document):
            self._document = document

        def __getattr__(self, name):
            return getattr(self._document, name)

        def page(self, page_no):
            if page_no == 2:
                raise CorruptPDFError(self._document.source, "page 2 is damaged")
            return self._document.page(page_no)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._document.close()

    monkeypatch.setattr(
        index_module, "open_document", lambda *a, **k: BrokenPageTwo(real_open(*a, **k))
    )
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    with VisualIndex.create(tmp_path / "i", model="tiny-colqwen2", compressor="random") as index:
        report = index.add([pdf], progress=False, ocr="never")
        assert [(f["page_no"], f["reason"]) for f in report.failures] == [
            ("2", "page 2 is damaged")
        ]
        stored = sorted(h.page_no for h in index.get(index.store.page_ids()))
        assert stored == [n for n in range(1, page_count(pdf) + 1) if n != 2]
        (document,) = index.documents()
        assert document.complete and document.metadata["failed_pages"] == [2]


def test_adapter_ids_that_look_like_paths_stay_inside_the_index(tmp_path, shared_data):
    images = sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())[:2]
    doc_id = str(tmp_path / "outside" / "x.pdf")  # e.g. SimpleDirectoryReader(filename_as_id=True)
    pages = [
        Page(doc_id=doc_id, page_no=1, image=Image.open(p).convert("RGB"), text=None, source=None)
        for p in images
    ]
    with VisualIndex.create(tmp_path / "i", model="tiny-colqwen2", compressor="random") as index:
        index.upsert_pages(pages, page_ids=["node-a", "node-b"])
        a, b = index.get(["node-a", "node-b"])
        assert a.image_path != b.image_path, "two ids on one (doc, page) must not share a file"
        assert (tmp_path / "i") in a.image_path.parents and not (tmp_path / "outside").exists()
        assert a.image.size != b.image.size or list(a.image.getdata()) != list(b.image.getdata())
        index.delete(doc_id)
        assert not a.image_path.exists() and not b.image_path.exists()


def test_open_or_create_creates_then_opens_and_checks_the_model(tmp_path):
    path = tmp_path / "i"
    VisualIndex.open_or_create(path, model="tiny-colqwen2", compressor="random").close()
    with VisualIndex.open_or_create(path) as index:
        assert index.model_id == "tiny-colqwen2" and index.compressor.name == "random"
    with pytest.raises(ModelMismatchError):
        VisualIndex.open_or_create(path, model="tiny-colpali")
