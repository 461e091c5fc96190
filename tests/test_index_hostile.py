"""Hostile input and crafted index folders against `VisualIndex` and `vrag` (tiny offline model).

Each test reproduces an attack that once lost good pages, crashed a batch or touched files outside
the index folder.
"""

from __future__ import annotations

import dataclasses
import errno
import json

import pytest
from PIL import Image
from typer.testing import CliRunner

from vrag_compress.cli import app
from vrag_compress.index import VisualIndex
from vrag_compress.ingest import Page
from vrag_compress.page_assets import AssetPathError
from vrag_compress.store import segments

runner = CliRunner()


def _page(doc_id: str, page_no: int = 1, color: str = "white") -> Page:
    image = Image.new("RGB", (224, 300), color)
    return Page(doc_id=doc_id, page_no=page_no, image=image, text="hello", source=None)


@pytest.fixture
def small_index(tmp_path):
    path = tmp_path / "idx"
    with VisualIndex.create(path, model="tiny-colqwen2", compressor="random") as index:
        index.upsert_pages([_page("doc", 1), _page("doc", 2, "black")])
    return path


def test_image_refs_cannot_reach_outside_the_index_folder(tmp_path, small_index):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    with VisualIndex.open(small_index) as index:
        record = index.store.get(["doc:1"])[0]
        crafted = dataclasses.replace(record, image_ref="../../victim.txt")
        index.store.upsert([crafted])  # what an edited catalog holds

        with pytest.raises(AssetPathError, match="outside the index's images/ folder"):
            index.page_image("doc", 1)
        assert index.delete_pages(["doc:1"]) == 1
    assert victim.read_text() == "precious"


def test_vrag_show_refuses_a_crafted_image_ref_without_a_traceback(tmp_path, small_index):
    (tmp_path / "secret.png").write_bytes(b"not for you")
    with VisualIndex.open(small_index) as index:
        record = index.store.get(["doc:2"])[0]
        index.store.upsert([dataclasses.replace(record, image_ref="images/../../secret.png")])
    result = runner.invoke(app, ["show", str(small_index), "doc", "2"])
    assert result.exit_code == 1
    assert "outside the index's images/ folder" in result.output
    assert "Traceback" not in result.output


def test_a_symlinked_image_leading_outside_is_refused(tmp_path, small_index):
    with VisualIndex.open(small_index) as index:
        ref = index.store.get(["doc:1"])[0].image_ref
        stored = small_index / ref
        stored.unlink()
        stored.symlink_to(tmp_path / "elsewhere.webp")
        with pytest.raises(AssetPathError):
            index.page_image("doc", 1)


def test_a_full_disk_says_what_is_full_and_what_was_committed(tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    for i, color in enumerate(("white", "black", "red")):
        Image.new("RGB", (224, 300), color).save(folder / f"p{i}.png")
    real, calls = segments.append, []

    def fills_up(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(segments, "append", fills_up)
    index = tmp_path / "idx"
    args = ["index", str(folder), "--index", str(index), "--model", "tiny-colqwen2"]
    result = runner.invoke(app, [*args, "--batch-size", "1", "--json"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    report = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    assert report["pages_committed"] == 1 and "disk full" in report["error"]
    assert f"device holding {index}" in report["error"]
    monkeypatch.setattr(segments, "append", real)
    again = runner.invoke(app, args)  # space freed: the same command resumes
    assert again.exit_code == 0, again.output
    with VisualIndex.open(index) as vindex:
        assert vindex.store.count() == 3 and vindex.verify().ok
