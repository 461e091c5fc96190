"""Hostile input and crafted index folders against `VisualIndex` and `vrag` (tiny offline model).

Each test reproduces an attack that once lost good pages, crashed a batch or touched files outside
the index folder.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import zlib
from pathlib import Path

import pytest
from PIL import Image
from pypdf import PdfWriter
from pypdf.generic import EncodedStreamObject, NameObject
from typer.testing import CliRunner

from vrag_compress import ingest
from vrag_compress.cli import app
from vrag_compress.index import VisualIndex
from vrag_compress.ingest import Page
from vrag_compress.ingest.page_assets import AssetPathError
from vrag_compress.store import LocalStore
from vrag_compress.store.local import segments

runner = CliRunner()


def _page(doc_id: str, page_no: int = 1, color: str = "white") -> Page:
    image = Image.new("RGB", (224, 300), color)
    return Page(doc_id=doc_id, page_no=page_no, image=image, text="hello", source=None)


@pytest.fixture(scope="module")
def small_index_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("small") / "idx"
    with VisualIndex.create(path, model="tiny-colqwen2", compressor="random") as index:
        index.upsert_pages([_page("doc", 1), _page("doc", 2, "black")])
    return path


@pytest.fixture
def small_index(tmp_path: Path, small_index_template: Path) -> Path:
    """A two-page index of the test's own (a copy: the tests edit it)."""
    path = tmp_path / "idx"
    shutil.copytree(small_index_template, path, symlinks=True)
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


# --- the whole batch: every nasty input beside good files ------------------------------------


def _pdf(path: Path, boxes: list[tuple[float, float]], bomb: int | None = None) -> Path:
    """Blank pages of the given sizes (pt); page ``bomb`` (0-based) gets 40 MiB of flate bomb."""
    writer = PdfWriter()
    for i, (width, height) in enumerate(boxes):
        page = writer.add_blank_page(width, height)
        if i == bomb:
            stream = EncodedStreamObject()
            stream._data = zlib.compress(b" " * (40 << 20), 9)
            stream[NameObject("/Filter")] = NameObject("/FlateDecode")
            page[NameObject("/Contents")] = writer._add_object(stream)
    writer.write(path)
    return path


def test_vrag_index_indexes_the_good_files_and_lists_every_nasty_one(tmp_path):
    folder = tmp_path / "inbox"
    folder.mkdir()
    letter = (612, 792)
    _pdf(folder / "good.pdf", [letter, letter])
    Image.new("RGB", (300, 400), "navy").save(folder / "photo.png")
    _pdf(folder / os.fsdecode(b"r\xe9sum\xe9.pdf"), [letter])  # Latin-1 name, not UTF-8
    _pdf(folder / "strip.pdf", [letter, (14400, 3), letter])  # page 2: 4,800:1
    _pdf(folder / "bomb.pdf", [letter, letter], bomb=1)  # page 2 inflates to 40 MiB
    _pdf(folder / "poster.pdf", [(7200, 7200)])  # rendered smaller, indexed
    os.symlink("loop.pdf", folder / "loop.pdf")
    os.symlink("gone.pdf", folder / "dangling.pdf")
    (folder / "notes.pdf").write_text("just text")
    (folder / "cut.pdf").write_bytes((folder / "good.pdf").read_bytes()[:300])

    index = tmp_path / "idx"
    result = runner.invoke(
        app,
        ["index", str(folder), "--index", str(index), "--model", "tiny-colqwen2", "--json"],
        env={"VRAG_PAGE_MEMORY_MB": "64"},
    )
    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    failed = {(Path(f["path"]).name, f.get("page_no")) for f in report["failures"]}
    assert failed == {
        ("loop.pdf", None),
        ("dangling.pdf", None),
        ("notes.pdf", None),
        ("cut.pdf", None),
        ("strip.pdf", "2"),
        ("bomb.pdf", "2"),
    }
    assert report["pages_indexed"] == 2 + 1 + 1 + 2 + 1 + 1
    with VisualIndex.open(index) as vindex:
        names = {d.source and Path(d.source).name for d in vindex.documents()}
        assert names == {
            "good.pdf",
            "photo.png",
            "r\\xe9sum\\xe9.pdf",
            "strip.pdf",
            "bomb.pdf",
            "poster.pdf",
        }
        assert vindex.verify().ok
        hit = vindex.search("résumé", k=9)[0]
        assert hit.image.size[0] > 0


# --- the pipeline: one page the encoder refuses, streaming plans, finishing replacements -------


def _pngs(folder: Path, widths: list[int], shade: int = 0) -> Path:
    """Images of distinct content (so distinct documents)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, width in enumerate(widths):
        Image.new("RGB", (width, 300), (40 * i, shade, 120)).save(folder / f"img{i}.png")
    return folder


def test_a_page_the_encoder_refuses_is_reported_and_the_batch_goes_on(tmp_path):
    folder = _pngs(tmp_path / "in", [224, 333, 240])
    with VisualIndex.create(tmp_path / "idx", model="tiny-colqwen2", batch_size=4) as index:
        encoder = index.encoder
        real = encoder.encode_pages

        def picky(images, **kwargs):
            if any(image.width == 333 for image in images):
                raise ValueError("absolute aspect ratio must be smaller than 200")
            return real(images, **kwargs)

        encoder.encode_pages = picky
        report = index.add(folder, progress=False, ocr="never")
        assert report.pages_indexed == 2
        [failure] = report.failures
        assert Path(failure["path"]).name == "img1.png" and failure["page_no"] == "1"
        assert "ValueError: absolute aspect ratio" in failure["reason"]
        assert index.store.count() == 2 and index.verify().ok


def test_the_first_batch_commits_before_the_folder_walk_ends(tmp_path, monkeypatch):
    for shade, name in enumerate(("a", "b", "c", "d")):
        _pngs(tmp_path / "in" / name, [224, 230], shade=50 * shade)
    walked: list[str] = []
    real_walk = os.walk

    def spy(top, **kwargs):
        for entry in real_walk(top, **kwargs):
            walked.append(Path(entry[0]).name)
            yield entry

    monkeypatch.setattr(ingest.discovery.os, "walk", spy)
    with VisualIndex.create(tmp_path / "idx", model="tiny-colqwen2", batch_size=1) as index:
        real_add, seen_at_first_commit = index.store.add, []

        def add(*args, **kwargs):
            seen_at_first_commit.append(list(walked))
            return real_add(*args, **kwargs)

        index.store.add = add
        report = index.add(tmp_path / "in", progress=False, ocr="never")
    assert report.pages_indexed == 8
    assert "d" not in seen_at_first_commit[0]  # was: every file opened before the first commit


def test_resume_finishes_retiring_the_old_version_of_a_changed_file(tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    source = folder / "report.png"
    Image.new("RGB", (224, 300), "white").save(source)
    path = tmp_path / "idx"
    with VisualIndex.create(path, model="tiny-colqwen2") as index:
        index.add(folder, progress=False, ocr="never")
        [old] = [d.doc_id for d in index.documents()]
    Image.new("RGB", (224, 300), "black").save(source)  # the file changes

    def crash(self, doc_id):
        raise KeyboardInterrupt  # killed while retiring the old version

    monkeypatch.setattr(VisualIndex, "delete", crash)
    with VisualIndex.open(path) as index, pytest.raises(KeyboardInterrupt):
        index.add(folder, progress=False, ocr="never")
    monkeypatch.undo()
    with VisualIndex.open(path) as index:
        assert len(index.documents()) == 2  # new version complete, old one still searchable
        report = index.add(folder, progress=False, ocr="never")
        assert report.documents_replaced == [old]  # was: [] and the old version stayed forever
        [new] = index.documents()
        assert new.doc_id != old and new.complete


@pytest.mark.parametrize(
    "change, command, match",
    [
        ({"compressor": "no-such-method"}, "index", "no-such-method"),
        ({"images": {"store": True, "format": "bmp", "max_side": 1280}}, "info", "bmp"),
        ({"compressor_params": {"ratio": "lots"}}, "index", "ratio"),
        ({"dpi": "high"}, "search", "index config is invalid"),
    ],
)
def test_a_crafted_index_config_is_a_clear_error(tmp_path, small_index, change, command, match):
    with LocalStore.open(small_index) as store:  # sealed like a real write: passes checksums
        store.update_config(**change)
    args = {
        "index": ["index", str(_pngs(tmp_path / "new", [250])), "--index", str(small_index)],
        "info": ["info", str(small_index)],
        "search": ["search", str(small_index), "anything"],
    }[command]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and match in result.output
