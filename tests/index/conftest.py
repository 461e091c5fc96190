"""Fixtures of the index tests that several modules read."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def arxivqa_uot_index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny-colqwen2 index of the 10 ViDoRe ArxivQA sample pages compressed by UOT at 0.25,
    built once per session (per xdist worker) for the estimate modules: they only read it (a
    test that writes copies it first)."""
    from vrag_compress import VisualIndex

    path = tmp_path_factory.mktemp("arxivqa-uot") / "tiny.vrag"
    images = sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())
    with VisualIndex.create(path, model="tiny-colqwen2", compressor="uot", ratio=0.25) as index:
        index.add(images, progress=False, ocr="never")
    return path
