"""Hostile and careless input to ingestion: every bad entry is reported, the rest still comes out.

Each test here reproduces an attack that once aborted a whole batch or took gigabytes of memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from pypdf import PdfWriter
from pypdf.generic import EncodedStreamObject, NameObject

from vrag_compress import ingest
from vrag_compress.ingest import (
    BYTES_PER_RENDERED_PIXEL,
    IngestError,
    PageMemoryError,
    PageShapeError,
    UnreadablePathError,
    default_memory_limit,
    display_path,
    find_documents,
    iter_documents,
    iter_pages,
    open_document,
    source_path,
)

MiB = 1 << 20


# --- hostile PDF builders (a raw writer: nothing on the way validates or normalises them) -------


def _stream(data: bytes, extra: str = "", filters: str | None = None) -> bytes:
    head = f"<< /Length {len(data)}" + (f" /Filter {filters}" if filters else "") + f" {extra}>>"
    return head.encode() + b"\nstream\n" + data + b"\nendstream"


def _deflate_zeros(size: int, fill: bytes = b" ") -> bytes:
    """``size`` bytes of ``fill``, deflated: about 1,000 times smaller than they inflate to."""
    packer = zlib.compressobj(9)
    chunk = fill * MiB
    parts = [packer.compress(chunk) for _ in range(size // MiB)]
    return b"".join(parts) + packer.flush()


def write_raw_pdf(path: Path, pages: list[dict]) -> Path:
    """Pages as dicts: ``box`` (w, h) in pt, ``content`` (raw stream object bytes), optional
    ``resources`` (a dict source that may name ``{OBJ}`` placeholders of extra objects)."""
    objects: list[bytes] = [b"", b""]  # catalog, pages tree
    kids = []
    for page in pages:
        extra_ids = []
        for extra in page.get("objects", []):
            objects.append(extra)
            extra_ids.append(len(objects))
        objects.append(page["content"])
        content_id = len(objects)
        resources = page.get("resources", "<< >>").format(*extra_ids)
        width, height = page.get("box", (612, 792))
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width} {height}] "
            f"/Contents {content_id} 0 R /Resources {resources} >>".encode()
        )
        kids.append(len(objects))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    refs = " ".join(f"{k} 0 R" for k in kids)
    objects[1] = f"<< /Type /Pages /Kids [{refs}] /Count {len(kids)} >>".encode()
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    path.write_bytes(bytes(out))
    return path


def good_page(box: tuple[float, float] = (612, 792)) -> dict:
    return {"box": box, "content": _stream(b"0 0 1 rg 72 72 200 200 re f")}


def bomb_page(size: int) -> dict:
    return {"content": _stream(_deflate_zeros(size), filters="/FlateDecode")}


def write_good_pdf(path: Path, pages: int = 1) -> Path:
    return write_raw_pdf(path, [good_page() for _ in range(pages)])


def _pages(paths, **options) -> tuple[list, list[IngestError]]:
    errors: list[IngestError] = []
    pages = [(p.source.name, p.page_no) for p in iter_pages(paths, errors=errors, **options)]
    return pages, errors


# --- item 1: a symlink loop, a non-UTF-8 name or an extreme page shape never stops the batch ----


def test_symlink_loops_and_dangling_links_are_reported_and_the_rest_found(tmp_path):
    write_good_pdf(tmp_path / "good.pdf")
    os.symlink("loop.pdf", tmp_path / "loop.pdf")  # points at itself
    os.symlink("b.pdf", tmp_path / "a.pdf")
    os.symlink("a.pdf", tmp_path / "b.pdf")
    os.symlink("missing.pdf", tmp_path / "dangling.pdf")
    os.symlink(".", tmp_path / "folder-loop")  # a folder link to itself is not followed

    found, errors = find_documents([tmp_path])

    assert found == [tmp_path / "good.pdf"]
    reasons = {e.path.name: e.reason for e in errors}
    assert reasons["loop.pdf"] == "is a symlink loop"
    assert reasons["a.pdf"] == reasons["b.pdf"] == "is a symlink loop"
    assert "symlink to a missing file" in reasons["dangling.pdf"]
    pages, page_errors = _pages([tmp_path])
    assert pages == [("good.pdf", 1)] and len(page_errors) == 4


def test_an_explicit_symlink_loop_is_an_error_not_a_crash(tmp_path):
    os.symlink("self.pdf", tmp_path / "self.pdf")
    found, errors = find_documents([tmp_path / "self.pdf", write_good_pdf(tmp_path / "ok.pdf")])
    assert found == [tmp_path / "ok.pdf"]
    assert [e.reason for e in errors] == ["is a symlink loop"]


def test_a_file_reached_twice_through_links_is_found_once(tmp_path):
    good = write_good_pdf(tmp_path / "good.pdf")
    os.symlink("good.pdf", tmp_path / "alias.pdf")
    found, errors = find_documents([tmp_path, good])
    assert len(found) == 1 and not errors


def test_non_utf8_file_names_are_found_opened_and_reported_safely(tmp_path):
    name = os.fsdecode(b"caf\xe9-\xff.pdf")  # Latin-1 bytes: invalid UTF-8, surrogate-escaped
    path = write_good_pdf(tmp_path / name)
    write_good_pdf(tmp_path / "good.pdf")

    found, errors = find_documents([tmp_path])
    assert not errors and path in found
    with open_document(path) as doc:
        assert doc.page(1).size[0] > 0
    shown = display_path(path)
    assert shown.endswith("caf\\xe9-\\xff.pdf")
    shown.encode("utf-8")  # safe to print, log and bind in SQLite
    error = PageShapeError(path, "page 1 is odd")
    str(error).encode("utf-8")


def test_extreme_aspect_ratio_pages_are_refused_per_page(tmp_path):
    pdf = write_raw_pdf(tmp_path / "strip.pdf", [good_page(), good_page((14400, 3)), good_page()])
    Image.new("RGB", (4000, 10), "white").save(tmp_path / "banner.png")
    Image.new("RGB", (400, 300), "white").save(tmp_path / "photo.png")

    pages, errors = _pages([tmp_path])

    assert pages == [("photo.png", 1), ("strip.pdf", 1), ("strip.pdf", 3)]
    by_name = {e.path.name: e for e in errors}
    assert isinstance(by_name["strip.pdf"], PageShapeError)
    assert "page 2 is 14400x3 pt" in by_name["strip.pdf"].reason
    assert "4,800:1" in by_name["strip.pdf"].reason
    assert isinstance(by_name["banner.png"], PageShapeError)
    with open_document(pdf) as doc, pytest.raises(PageShapeError, match="page 2"):
        doc.page(2)


# --- item 2: decompression bombs and huge pages stay within the page memory limit --------------


def test_flate_bomb_page_is_refused_and_the_other_pages_render(tmp_path):
    path = write_raw_pdf(tmp_path / "bomb.pdf", [good_page(), bomb_page(40 * MiB), good_page()])
    pages, errors = _pages([path], memory_limit=32 * MiB)
    assert pages == [("bomb.pdf", 1), ("bomb.pdf", 3)]
    [error] = errors
    assert isinstance(error, PageMemoryError)
    assert "page 2 decompresses to more than 8 MiB" in error.reason
    assert "32 MiB page memory limit" in error.reason


def test_a_trusted_file_renders_with_a_higher_limit(tmp_path):
    path = write_raw_pdf(tmp_path / "big.pdf", [bomb_page(40 * MiB)])
    pages, errors = _pages([path], memory_limit=256 * MiB)
    assert pages == [("big.pdf", 1)] and not errors


def test_bombs_inside_forms_and_images_are_counted(tmp_path):
    form = _stream(
        _deflate_zeros(40 * MiB),
        "/Type /XObject /Subtype /Form /BBox [0 0 10 10] ",
        "/FlateDecode",
    )
    nested = {
        "objects": [form],
        "resources": "<< /XObject << /Fm0 {0} 0 R >> >>",
        "content": _stream(b"/Fm0 Do"),
    }
    image = _stream(
        zlib.compress(b"\0" * 1000),
        "/Type /XObject /Subtype /Image /Width 30000 /Height 30000 /ColorSpace /DeviceRGB "
        "/BitsPerComponent 8 ",
        "/FlateDecode",
    )
    picture = {
        "objects": [image],
        "resources": "<< /XObject << /Im0 {0} 0 R >> >>",
        "content": _stream(b"q 100 0 0 100 0 0 cm /Im0 Do Q"),
    }
    chained = {  # two Flate stages: 40 MiB -> 40 KiB -> about 40 bytes
        "content": _stream(
            zlib.compress(_deflate_zeros(40 * MiB)), filters="[/FlateDecode /FlateDecode]"
        )
    }
    path = write_raw_pdf(tmp_path / "hidden.pdf", [nested, picture, chained, good_page()])
    pages, errors = _pages([path], memory_limit=32 * MiB)
    assert pages == [("hidden.pdf", 4)]
    assert [type(e) for e in errors] == [PageMemoryError] * 3
    assert [e.reason.split(" decompresses")[0] for e in errors] == ["page 1", "page 2", "page 3"]


def test_huge_pages_render_within_the_memory_limit(tmp_path, caplog):
    limit = 64 * MiB
    pdf = write_raw_pdf(tmp_path / "huge.pdf", [good_page((7200, 7200))])
    with open_document(pdf, memory_limit=limit) as doc:
        page = doc.page(1)
    assert page.width * page.height <= limit // BYTES_PER_RENDERED_PIXEL
    assert page.width == page.height and page.dpi < 150
    Image.new("RGB", (3000, 2000), "white").save(tmp_path / "big.png")
    with open_document(tmp_path / "big.png", memory_limit=limit) as doc:
        image = doc.page(1)
    assert image.width * image.height <= limit // BYTES_PER_RENDERED_PIXEL
    assert image.width / image.height == pytest.approx(1.5, rel=0.01)


def test_page_memory_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("VRAG_PAGE_MEMORY_MB", raising=False)
    assert default_memory_limit() == 1 << 30
    monkeypatch.setenv("VRAG_PAGE_MEMORY_MB", "300")
    assert default_memory_limit() == 300 * MiB
    monkeypatch.setenv("VRAG_PAGE_MEMORY_MB", "lots")
    with pytest.raises(ValueError, match="VRAG_PAGE_MEMORY_MB='lots'"):
        default_memory_limit()


_PEAK = """
import resource, sys
from vrag_compress.ingest import iter_pages
errors = []
pages = list(iter_pages([sys.argv[1]], errors=errors, text=False))
print(len(pages), len(errors), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def _peak_rss_mib(path: Path) -> tuple[int, int, int]:
    env = {**os.environ, "VRAG_PAGE_MEMORY_MB": "256"}
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PEAK), str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    pages, errors, peak = (int(x) for x in run.stdout.split())
    return pages, errors, peak


@pytest.mark.slow
def test_a_flate_bomb_does_not_take_the_memory_it_inflates_to(tmp_path):
    """400 MiB of content in a 400 KiB file: refused with the process under 200 MiB at peak
    (PDFium alone would take twice the inflated size)."""
    bomb = write_raw_pdf(tmp_path / "bomb.pdf", [bomb_page(400 * MiB), good_page()])
    baseline = _peak_rss_mib(write_good_pdf(tmp_path / "good.pdf"))
    pages, errors, peak = _peak_rss_mib(bomb)
    assert (pages, errors) == (1, 1)
    assert peak < baseline[2] + 150, f"peak RSS {peak} MiB (baseline {baseline[2]} MiB)"


# --- item 3: discovery streams --------------------------------------------------------------


def test_discovery_streams_instead_of_walking_everything_first(tmp_path, monkeypatch):
    for folder in ("a", "b", "c"):
        (tmp_path / folder).mkdir()
        write_good_pdf(tmp_path / folder / "x.pdf")
    walked: list[str] = []
    real_walk = os.walk

    def spy(top, **kwargs) -> Iterator:
        for entry in real_walk(top, **kwargs):
            walked.append(Path(entry[0]).name)
            yield entry

    monkeypatch.setattr(ingest.discovery.os, "walk", spy)
    stream = iter_documents([tmp_path])
    first = next(stream)
    assert first == tmp_path / "a" / "x.pdf"
    assert "c" not in walked  # the rest of the tree is still unvisited
    assert [p.parent.name for p in stream] == ["b", "c"]


def test_unreadable_explicit_paths_still_come_back_as_errors(tmp_path):
    items = list(iter_documents([tmp_path / "missing.pdf", write_good_pdf(tmp_path / "g.pdf")]))
    assert isinstance(items[0], UnreadablePathError) and items[1] == tmp_path / "g.pdf"


def test_a_displayed_non_utf8_path_leads_back_to_the_file(tmp_path):
    path = write_good_pdf(tmp_path / os.fsdecode(b"d\xe9j\xe0-vu.pdf"))
    shown = display_path(path)
    assert shown.endswith("d\\xe9j\\xe0-vu.pdf")
    assert source_path(shown) == path and source_path(str(tmp_path)) == tmp_path


def test_the_progress_bar_shows_discovery():
    from vrag_compress.progress import IndexProgress

    with IndexProgress(0, enabled=False) as bar:
        bar.discover(1, 3)
        bar.discover(2, 5)
        task = bar._progress.tasks[0]
        assert task.total == 8 and "discovering: 3 files" in task.description
        bar.discovery_done()
        assert bar._progress.tasks[0].description == "indexing 3 files"


def _inline_image_page(width: int, height: int) -> dict:
    data = zlib.compress(b"\0" * (width * height * 3), 9)
    head = f"q 200 0 0 200 72 72 cm BI /W {width} /H {height} /CS /RGB /BPC 8 /F /Fl ID "
    return {"content": _stream(head.encode() + data + b" EI Q")}


def test_inline_image_bombs_in_content_streams_are_counted(tmp_path):
    path = write_raw_pdf(
        tmp_path / "inline.pdf", [_inline_image_page(3000, 3000), _inline_image_page(10, 10)]
    )
    pages, errors = _pages([path], memory_limit=32 * MiB)
    assert pages == [("inline.pdf", 2)]
    assert [type(e) for e in errors] == [PageMemoryError] and "page 1" in errors[0].reason


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-256"])
def test_encrypted_bombs_are_counted_too(tmp_path, algorithm):
    """A PDF encrypted with an empty user password opens without one, so it is checked too."""
    writer = PdfWriter()
    for bomb in (True, False):
        page = writer.add_blank_page(612, 792)
        if bomb:
            stream = EncodedStreamObject()
            stream._data = _deflate_zeros(40 * MiB)
            stream[NameObject("/Filter")] = NameObject("/FlateDecode")
            page[NameObject("/Contents")] = writer._add_object(stream)
    writer.encrypt(user_password="", owner_password="owner", algorithm=algorithm)
    path = tmp_path / "locked.pdf"
    writer.write(path)
    pages, errors = _pages([path], memory_limit=32 * MiB)
    assert pages == [("locked.pdf", 2)]
    assert [type(e) for e in errors] == [PageMemoryError]
