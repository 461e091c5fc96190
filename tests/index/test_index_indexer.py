"""`VisualIndex.indexer()`: the index's write path, driven in steps as `vrag_compress.distributed`
does (plan, render, process, write, finish), commits pages the index then finds."""

from __future__ import annotations

from pathlib import Path

from vrag_compress import VisualIndex
from vrag_compress.indexing import AddReport, Indexer
from vrag_compress.ingest.ocr import PageOcr
from vrag_compress.progress import IndexProgress


def test_pages_an_indexer_commits_are_found_by_the_index(tmp_path: Path, shared_data: Path):
    pdfs = [
        shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf",
        shared_data / "pdfs" / "edge" / "multi_page.pdf",
    ]
    with VisualIndex.create(tmp_path / "steps.vrag", model="tiny-colqwen2") as index:
        indexer = index.indexer()
        assert isinstance(indexer, Indexer) and indexer.store is index.store
        report, ocr = AddReport(), PageOcr("never")
        with IndexProgress(0, enabled=False) as bar:
            states = list(indexer.plan(pdfs, {"team": "law"}, report, bar))
            for state, page in indexer.stream(states, report):
                if page is not None:
                    processed = indexer.process([page], report, ocr)
                    indexer.write([(state, page)], processed, report, bar)
            indexer.finish(states, report)
        assert report.ok and report.pages_indexed == 6 and len(report.documents_indexed) == 2
        hits = index.search("the court", k=10, filter={"team": "law"})
        assert len(hits) == 6 and {h.page_no for h in hits} == {1, 2, 3, 4, 5}
        assert index.add(pdfs, progress=False, ocr="never").pages_indexed == 0  # all committed
