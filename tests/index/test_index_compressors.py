"""Compressors inside an index: a user-written one end to end, and the SAP window the index
picks and records for the model."""

from __future__ import annotations

import importlib
import math
import sys
import textwrap
from pathlib import Path

import pytest

from vrag_compress import VisualIndex, get_compressor
from vrag_compress.compress import UncalibratedWindowWarning
from vrag_compress.compress.registry import COMPRESSORS
from vrag_compress.index import VisualIndexError

USER_MODULE = '''
"""A compressor written outside vrag_compress, using only the package's public names."""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from vrag_compress import BaseCompressor, CompressedPage, register_compressor


@register_compressor
@dataclass(frozen=True)
class StridePruner(BaseCompressor):
    """Keeps every `stride`-th visual token."""

    name: ClassVar[str] = "test-stride"
    stride: int = 2

    def _compress(self, page):
        kept = np.arange(0, page.n_tokens, self.stride)
        return CompressedPage(vectors=page.vectors[kept], kept=kept)
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / "my_compressors.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(folder))
    module = importlib.import_module("my_compressors")
    yield module
    COMPRESSORS.pop("test-stride", None)
    sys.modules.pop("my_compressors", None)


def images(shared_data: Path, n: int) -> list[Path]:
    return sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())[:n]


def test_a_user_compressor_round_trips_through_create_add_open_search(
    tmp_path: Path, shared_data: Path, user_module
):
    path = tmp_path / "user.vrag"
    first, second = images(shared_data, 3)[:2], images(shared_data, 3)[2:]
    with VisualIndex.create(
        path, model="tiny-colqwen2", compressor=user_module.StridePruner(stride=3)
    ) as index:
        assert index.add(first, progress=False, ocr="never").pages_indexed == 2
        info = index.info()
    assert (info["compressor"], info["compressor_params"]) == ("test-stride", {"stride": 3})
    assert index.config.compressor_module == "my_compressors"

    with VisualIndex.open(path) as index:
        assert index.compressor == user_module.StridePruner(stride=3)  # rebuilt from the config
        assert index.add(second, progress=False, ocr="never").pages_indexed == 1
        for record in index.store.get(index.store.page_ids()):
            n_tokens = record.metadata["n_tokens"]
            assert record.vectors.shape[0] == math.ceil(n_tokens / 3)
        hits = index.search("a chart", k=3)
    assert len(hits) == 3 and len({h.page_id for h in hits}) == 3


def test_an_index_opens_for_search_before_its_compressor_is_registered(
    tmp_path: Path, shared_data: Path, user_module
):
    path = tmp_path / "user.vrag"
    with VisualIndex.create(path, model="tiny-colqwen2", compressor="test-stride") as index:
        index.add(images(shared_data, 2), progress=False, ocr="never")
    COMPRESSORS.pop("test-stride")  # a new process that has not imported my_compressors
    with VisualIndex.open(path) as index:
        assert len(index.search("a chart", k=2)) == 2
        assert index.info()["compressor"] == "test-stride"
        with pytest.raises(VisualIndexError, match="'my_compressors'.*register_compressor"):
            index.add(images(shared_data, 3)[2:], progress=False, ocr="never")


def test_an_unregistered_compressor_object_is_refused_at_create(tmp_path: Path, user_module):
    class Unregistered(user_module.StridePruner):
        pass

    with pytest.raises(VisualIndexError, match="register it with register_compressor"):
        VisualIndex.create(tmp_path / "i", model="tiny-colqwen2", compressor=Unregistered())
    assert not (tmp_path / "i").exists()


class ModelStub:
    """An encoder as far as `create` needs one (no pages are added)."""

    def __init__(self, model_id: str, n_layers: int) -> None:
        self.model_id, self.n_layers, self.dim = model_id, n_layers, 8


def test_an_explicit_sap_compressor_gets_and_records_the_models_calibrated_window(tmp_path):
    encoder = ModelStub("vidore/colqwen2-v1.0", 28)
    sap = get_compressor("sap", ratio=0.1)  # no window: as in the README's Python example
    with VisualIndex.create(tmp_path / "i", encoder=encoder, compressor=sap) as index:
        params = index.info()["compressor_params"]
        assert params == {"ratio": 0.1, "layers": list(range(18, 24)), "n_layers": 28}
        assert index.compressor.layers == tuple(range(18, 24))
    with VisualIndex.open(tmp_path / "i") as index:
        assert index.compressor.layers == tuple(range(18, 24))


def test_an_explicit_sap_compressor_on_an_uncalibrated_model_records_the_fallback(tmp_path):
    encoder = ModelStub("my/own-colmodel", 10)
    with pytest.warns(UncalibratedWindowWarning, match="uncalibrated fallback layers"):
        index = VisualIndex.create(
            tmp_path / "i", encoder=encoder, compressor=get_compressor("sap", ratio=0.1)
        )
    with index:
        assert index.info()["compressor_params"]["layers"] == [6, 7]
