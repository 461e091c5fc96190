"""Office files in as pages: real LibreOffice conversions of files written here with python-docx,
python-pptx and openpyxl (known words on known pages and slides), and the hostile cases.

The tests that run LibreOffice are `slow` (each start is a few seconds); the module fixture
converts the main files once into a shared cache. Checks that refuse a file before LibreOffice
starts (zip bombs, passwords, damaged packages, LibreOffice missing) are fast.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from PIL import Image
from typer.testing import CliRunner

from vrag_compress.cli import app
from vrag_compress.cli.common import EXIT_PARTIAL
from vrag_compress.ingest import (
    OFFICE_SUFFIXES,
    SUPPORTED_SUFFIXES,
    IngestError,
    OfficeConversionError,
    OfficeUnavailableError,
    content_hash,
    find_documents,
    iter_pages,
    office,
    open_document,
)
from vrag_compress.ingest.office import OfficeLimits

needs_soffice = pytest.mark.skipif(
    office.find_soffice() is None, reason="LibreOffice is not installed (make system-deps-office)"
)

# Words that appear on exactly one page or slide of the generated files.
DOCX_PAGES = ["aardvark bramble", "bison cobalt", "cheetah dulcimer"]
SLIDES = ["narwhal quartz", "ocelot rhubarb", "pelican saffron"]
SHEETS = {"Income": "walrus", "Costs": "yak"}
RTF_PAGES = ["ibis lantern", "jackal marble"]
# Every page also gets these, so that each has a text layer (no OCR) and none is found by them.
FILLER = "figures for the quarterly review"


# --- generators ---------------------------------------------------------------------------------


def write_docx(path: Path, pages: list[str]) -> Path:
    from docx import Document
    from docx.enum.text import WD_BREAK

    document = Document()
    for number, words in enumerate(pages):
        if number:
            document.add_paragraph().add_run().add_break(WD_BREAK.PAGE)
        document.add_paragraph(f"Section {number + 1}: {words}, {FILLER}")
    document.save(str(path))
    return path


def write_pptx(path: Path, slides: list[str], hidden: int | None = None) -> Path:
    from pptx import Presentation

    deck = Presentation()
    for words in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = words
        slide.placeholders[1].text = FILLER
    if hidden is not None:  # a slide hidden in the deck keeps its number
        deck.slides[hidden - 1]._element.set("show", "0")
    deck.save(str(path))
    return path


def write_xlsx(path: Path, sheets: dict[str, str]) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, word in sheets.items():
        sheet = book.create_sheet(name)
        sheet["A1"] = word
        sheet["A2"] = 1234
        sheet["A3"] = FILLER
    book.save(str(path))
    return path


def write_rtf(path: Path, pages: list[str]) -> Path:
    body = r"\page ".join(f"{words}, {FILLER}" for words in pages)
    path.write_text(r"{\rtf1\ansi{\fonttbl\f0 Helvetica;}\f0 " + body + r"\par}")
    return path


def convert_with_soffice(source: Path, suffix: str, out: Path) -> Path:
    """A copy of ``source`` in another Office format (for the kinds no Python writer makes).
    Its profile has the library's settings, which spare LibreOffice's start-up self-tests."""
    soffice = office.find_soffice() or "soffice"
    profile = office.write_profile(out / ".profile", soffice)
    command = [
        soffice,
        f"-env:UserInstallation={profile.as_uri()}",
        "--headless",
        "--norestore",
        "--convert-to",
        suffix.lstrip("."),
        "--outdir",
        str(out),
        str(source),
    ]
    subprocess.run(command, capture_output=True, timeout=120, check=True)
    return out / f"{source.stem}{suffix}"


def write_bomb(path: Path, inflated: int) -> Path:
    """A .docx-shaped ZIP whose one member inflates to ``inflated`` bytes of zeros."""
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            for _ in range(inflated // len(chunk)):
                member.write(chunk)
    return path


def write_encrypted_docx(path: Path, plain: Path) -> Path:
    from msoffcrypto.format.ooxml import OOXMLFile

    with open(plain, "rb") as handle:
        out = io.BytesIO()
        OOXMLFile(handle).encrypt("secret", out)
    path.write_bytes(out.getvalue())
    return path


def texts(path: Path) -> list[str]:
    with open_document(path) as document:
        return [document.page(n).text or "" for n in range(1, document.n_pages + 1)]


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One conversion cache for the module (so each file converts once)."""
    folder = tmp_path_factory.mktemp("office-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(office.CACHE_ENV, str(folder))
        yield folder


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("office-files")
    return {
        "docx": write_docx(folder / "report.docx", DOCX_PAGES),
        "pptx": write_pptx(folder / "deck.pptx", SLIDES, hidden=2),
        "xlsx": write_xlsx(folder / "budget.xlsx", SHEETS),
        "rtf": write_rtf(folder / "notes.rtf", RTF_PAGES),
    }


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(office.CACHE_ENV, str(folder))
    return folder


def test_a_relative_cache_folder_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LibreOffice gets its profile inside the cache as a file:// URI, which needs an absolute path
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(office.CACHE_ENV, "office-cache")
    assert office.cache_dir() == tmp_path / "office-cache"
    assert office.cached_pdf("ab" * 32).is_absolute()


def only_on(pages: list[str], words: str, page_no: int) -> None:
    """``words`` are on page ``page_no`` (1-based) and on no other page."""
    found = [n for n, text in enumerate(pages, start=1) if words.split()[0] in text.lower()]
    assert found == [page_no], (words, pages)


# --- real conversions ---------------------------------------------------------------------------


@pytest.mark.slow
@needs_soffice
def test_word_pages_keep_their_words(files: dict[str, Path]) -> None:
    pages = texts(files["docx"])
    assert len(pages) == len(DOCX_PAGES)
    for page_no, words in enumerate(DOCX_PAGES, start=1):
        only_on(pages, words, page_no)
    with open_document(files["docx"]) as document:  # pages name the original file
        page = document.page(2)
        assert page.source == files["docx"] and document.doc_id == content_hash(files["docx"])[:16]
        assert page.image.size[0] > 100


@pytest.mark.slow
@needs_soffice
def test_slide_n_is_page_n_hidden_slides_included(files: dict[str, Path]) -> None:
    pages = texts(files["pptx"])
    assert len(pages) == len(SLIDES)  # slide 2 is hidden in the deck and still page 2
    for page_no, words in enumerate(SLIDES, start=1):
        only_on(pages, words, page_no)


@pytest.mark.slow
@needs_soffice
def test_sheets_and_rtf_pages(files: dict[str, Path]) -> None:
    sheets = texts(files["xlsx"])
    for page_no, word in enumerate(SHEETS.values(), start=1):
        only_on(sheets, word, page_no)
    rtf = texts(files["rtf"])
    for page_no, words in enumerate(RTF_PAGES, start=1):
        only_on(rtf, words, page_no)


@pytest.mark.slow
@needs_soffice
def test_old_binary_and_opendocument_kinds(files: dict[str, Path], tmp_path: Path) -> None:
    """The six files are made, then converted by the library, all at once (each conversion is
    a LibreOffice process of its own); their pages are then read one file at a time."""
    sources = {".odt": "docx", ".doc": "docx", ".odp": "pptx", ".ppt": "pptx"}
    sources |= {".ods": "xlsx", ".xls": "xlsx"}

    def make(suffix: str) -> Path:
        return convert_with_soffice(files[sources[suffix]], suffix, tmp_path / suffix[1:])

    lock = threading.Lock()  # pdfium, which checks each PDF, is not thread-safe
    check_pdf = office.check_pdf

    def check_one_at_a_time(pdf: Path, limits: OfficeLimits) -> int:
        with lock:
            return check_pdf(pdf, limits)

    with ThreadPoolExecutor(len(sources)) as pool, pytest.MonkeyPatch.context() as patch:
        made = dict(zip(sources, pool.map(make, sources), strict=True))
        patch.setattr(office, "check_pdf", check_one_at_a_time)
        list(pool.map(lambda path: office.to_pdf(path, content_hash(path)), made.values()))
    expected = {".odt": DOCX_PAGES, ".doc": DOCX_PAGES, ".odp": SLIDES, ".ppt": SLIDES}
    expected |= {".ods": list(SHEETS.values()), ".xls": list(SHEETS.values())}
    for suffix, path in made.items():
        pages = texts(path)  # (from the conversion cache)
        assert len(pages) == len(expected[suffix]), (suffix, pages)
        for page_no, words in enumerate(expected[suffix], start=1):
            only_on(pages, words, page_no)


@pytest.mark.slow
@needs_soffice
def test_an_unchanged_file_converts_once(
    files: dict[str, Path], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts(files["docx"])
    cached = office.cached_pdf(content_hash(files["docx"]), cache)
    assert cached.is_file() and not list(cache.glob(".convert-*"))
    monkeypatch.setattr(office, "find_soffice", lambda: None)  # a conversion would fail now
    assert len(texts(files["docx"])) == len(DOCX_PAGES)
    changed = write_docx(files["docx"].with_name("changed.docx"), ["different words"])
    with pytest.raises(OfficeUnavailableError):  # new bytes: not in the cache
        open_document(changed)


@pytest.mark.slow
@needs_soffice
def test_page_cap_and_output_cap(files: dict[str, Path], tmp_path: Path) -> None:
    texts(files["docx"])
    cached = office.cached_pdf(content_hash(files["docx"]))
    with pytest.raises(office.ConversionError, match="3 pages, over the 2-page cap"):
        office.check_pdf(cached, OfficeLimits(max_pages=2))
    noise = Image.frombytes("RGB", (1600, 1600), os.urandom(1600 * 1600 * 3))
    picture = tmp_path / "noise.png"
    noise.save(picture)
    from docx import Document

    document = Document()
    document.add_paragraph("a page with a large picture")
    document.add_picture(str(picture))
    big = tmp_path / "big.docx"
    document.save(str(big))
    limits = OfficeLimits(max_pdf_bytes=1 << 20)  # the picture alone is several MB in the PDF
    with pytest.raises(office.ConversionError, match="larger than the 1 MiB cap"):
        office.to_pdf(big, content_hash(big), limits=limits, folder=tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("*.pdf"))


@pytest.mark.slow
@needs_soffice
def test_a_slow_conversion_is_killed_with_its_process_group(
    files: dict[str, Path], tmp_path: Path
) -> None:
    limits = OfficeLimits(timeout_s=0.3)
    folder = tmp_path / "cache"
    with pytest.raises(office.ConversionError, match="did not finish within 0.3 s"):
        office.to_pdf(files["pptx"], "ab" * 32, limits=limits, folder=folder)
    assert not list(folder.rglob("*.pdf")) and not list(folder.glob(".convert-*"))
    time.sleep(1.5)  # the watchdog's deadline (ceil of the timeout) has passed too
    assert not _converters_under(folder)


def _converters_under(folder: Path) -> list[int]:
    """LibreOffice processes whose command line names ``folder`` (a conversion's profile)."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(folder) in cmdline and "soffice" in cmdline and process.pid != os.getpid():
            found.append(process.pid)
    return found


@pytest.mark.slow
@needs_soffice
def test_kill_9_during_conversion_leaves_no_partial_pdf(
    files: dict[str, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "cache"
    source = files["pptx"]
    digest = content_hash(source)
    script = (
        "import sys; from pathlib import Path; from vrag_compress.ingest import office;"
        "office.to_pdf(Path(sys.argv[1]), sys.argv[2], folder=Path(sys.argv[3]),"
        " limits=office.OfficeLimits(timeout_s=4))"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(source), digest, str(folder)])
    deadline = time.monotonic() + 60
    while not _converters_under(folder) and time.monotonic() < deadline:
        time.sleep(0.05)  # LibreOffice has started converting
    assert _converters_under(folder), "the conversion never started"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert not office.cached_pdf(digest, folder).exists()
    deadline = time.monotonic() + 30
    while _converters_under(folder) and time.monotonic() < deadline:
        time.sleep(0.2)  # orphaned, LibreOffice still dies at the watchdog's deadline
    assert not _converters_under(folder)
    assert not office.cached_pdf(digest, folder).exists()  # nothing renamed into place
    stale = next(folder.glob(".convert-*"))
    os.utime(stale, (time.time() - 3 * 3600,) * 2)
    pdf = office.to_pdf(source, digest, folder=folder)  # the next run converts it whole
    assert office.check_pdf(pdf, OfficeLimits()) == len(SLIDES)
    assert not stale.exists()  # and cleared what the killed run left


ODT_WITH_MACRO = """<?xml version="1.0" encoding="UTF-8"?>
<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"
 xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"
 xmlns:script="urn:oasis:names:tc:opendocument:xmlns:script:1.0"
 xmlns:xlink="http://www.w3.org/1999/xlink" office:version="1.2">
<office:scripts><office:event-listeners>
<script:event-listener script:language="ooo:script" script:event-name="dom:load"
 xlink:href="vnd.sun.star.script:Standard.Module1.Main?language=Basic&amp;location=document"
 xlink:type="simple"/>
</office:event-listeners></office:scripts>
<office:body><office:text><text:p>kestrel macro page</text:p></office:text></office:body>
</office:document-content>"""
BASIC_MODULE = """<?xml version="1.0" encoding="UTF-8"?>
<script:module xmlns:script="http://openoffice.org/2000/script" script:name="Module1"
 script:language="StarBasic">Sub Main
Open "{marker}" For Output As #1
Print #1, "the macro ran"
Close #1
End Sub
</script:module>"""
BASIC_LIBRARY = """<?xml version="1.0" encoding="UTF-8"?>
<library:library xmlns:library="http://openoffice.org/2000/library" library:name="Standard"
 library:readonly="false" library:passwordprotected="false">
<library:element library:name="Module1"/></library:library>"""
BASIC_LIBRARIES = """<?xml version="1.0" encoding="UTF-8"?>
<library:libraries xmlns:library="http://openoffice.org/2000/library"
 xmlns:xlink="http://www.w3.org/1999/xlink">
<library:library library:name="Standard" library:link="false"/></library:libraries>"""


def write_odt_with_macro(path: Path, marker: Path) -> Path:
    entries = {
        "content.xml": ODT_WITH_MACRO,
        "Basic/script-lc.xml": BASIC_LIBRARIES,
        "Basic/Standard/script-lb.xml": BASIC_LIBRARY,
        "Basic/Standard/Module1.xml": BASIC_MODULE.format(marker=marker),
    }
    manifest = "".join(
        f'<manifest:file-entry manifest:full-path="{name}" manifest:media-type="text/xml"/>'
        for name in entries
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        for name, text in entries.items():
            archive.writestr(name, text)
        archive.writestr(
            "META-INF/manifest.xml",
            "<manifest:manifest"
            ' xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0">'
            '<manifest:file-entry manifest:full-path="/"'
            ' manifest:media-type="application/vnd.oasis.opendocument.text"/>'
            f"{manifest}</manifest:manifest>",
        )
    return path


@pytest.mark.slow
@needs_soffice
def test_a_document_macro_never_runs(tmp_path: Path, own_cache: Path) -> None:
    marker = tmp_path / "macro-ran.txt"
    document = write_odt_with_macro(tmp_path / "macro.odt", marker)
    assert "kestrel" in texts(document)[0]  # converted and read
    assert not marker.exists()


def test_the_profile_disables_macros_before_libreoffice_starts() -> None:
    settings = office._CONVERT_SECURELY
    assert '"DisableMacrosExecution" oor:op="fuse"><value>true' in settings
    assert '"MacroSecurityLevel" oor:op="fuse"><value>3' in settings


def test_the_profile_names_the_libreoffice_version_it_was_last_used_by(tmp_path: Path) -> None:
    """So that no start counts as the first after an upgrade (LibreOffice's self-tests then run);
    an install whose registry is not found gets the plain settings."""
    program = tmp_path / "lo" / "program"
    (tmp_path / "lo" / "share" / "registry").mkdir(parents=True)
    program.mkdir()
    (tmp_path / "lo" / "share" / "registry" / "main.xcd").write_text(
        '<prop oor:name="ooSetupVersion">\n  <value>24.8</value>\n</prop>'
    )
    settings = office._profile_settings(str(program / "soffice"))
    assert settings.startswith(office._CONVERT_SECURELY.removesuffix("</oor:items>\n"))
    assert '"ooSetupLastVersion" oor:op="fuse"><value>24.8</value>' in settings
    assert office._profile_settings(str(tmp_path / "bare" / "soffice")) == office._CONVERT_SECURELY


# --- refused before conversion (fast: no LibreOffice starts) ------------------------------------


def test_office_suffixes_are_supported() -> None:
    expected = {".docx", ".doc", ".odt", ".rtf", ".pptx", ".ppt", ".odp", ".xlsx", ".xls", ".ods"}
    assert OFFICE_SUFFIXES == expected and expected <= SUPPORTED_SUFFIXES


def test_without_libreoffice_one_line_names_the_install(
    tmp_path: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(office, "find_soffice", lambda: None)
    deck = write_pptx(tmp_path / "deck.pptx", SLIDES)
    with pytest.raises(OfficeUnavailableError) as info:
        open_document(deck)
    message = str(info.value)
    assert "\n" not in message and "make system-deps-office" in message
    packages = "libreoffice-writer-nogui libreoffice-impress-nogui libreoffice-calc-nogui"
    assert f"apt-get install --no-install-recommends {packages}" in message
    assert "make system-deps-office" in info.value.reason  # what indexing reports show


def test_a_zip_bomb_is_refused_from_its_central_directory(tmp_path: Path, own_cache: Path) -> None:
    bomb = write_bomb(tmp_path / "bomb.docx", 80 << 20)  # ~80 KB on disk, ratio ~1000:1
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(OfficeConversionError, match="zip bomb"):
        open_document(bomb)
    small = write_bomb(tmp_path / "small.xlsx", 3 << 20)
    with pytest.raises(office.ConversionError, match="zip bomb"):
        office.check_container(small, OfficeLimits(max_unzipped_bytes=2 << 20))
    assert not list(own_cache.rglob("*"))  # refused before any conversion started


def test_password_protected_files_are_reported(tmp_path: Path, own_cache: Path) -> None:
    plain = write_docx(tmp_path / "plain.docx", ["secret words"])
    locked = write_encrypted_docx(tmp_path / "locked.docx", plain)
    odt = tmp_path / "locked.odt"
    with zipfile.ZipFile(odt, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        archive.writestr(
            "META-INF/manifest.xml",
            '<manifest:file-entry manifest:full-path="content.xml">'
            '<manifest:encryption-data manifest:checksum-type="SHA1/1K"/></manifest:file-entry>',
        )
    for path in (locked, odt):
        with pytest.raises(OfficeConversionError, match="password-protected") as info:
            open_document(path)
        assert info.value.path == path and "without a password" in info.value.fix


def test_damaged_and_mislabelled_packages(tmp_path: Path, own_cache: Path) -> None:
    text = tmp_path / "notes.docx"
    text.write_text("not a word file")
    truncated = tmp_path / "cut.pptx"
    whole = write_pptx(tmp_path / "whole.pptx", SLIDES).read_bytes()
    truncated.write_bytes(whole[: len(whole) // 2])
    cases = {text: "not a ZIP package", truncated: "ZIP package is damaged"}
    for path, words in cases.items():
        with pytest.raises(OfficeConversionError, match=words):
            open_document(path)


@needs_soffice
def test_an_unwritable_cache_is_reported_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(office.CACHE_ENV, str(blocker / "cache"))
    deck = write_pptx(tmp_path / "deck.pptx", SLIDES)
    errors: list[IngestError] = []
    assert list(iter_pages([deck], errors=errors)) == []
    assert isinstance(errors[0], OfficeConversionError)
    assert "not writable" in errors[0].reason and office.CACHE_ENV in errors[0].fix


def test_office_timeout_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(office.TIMEOUT_ENV, "12.5")
    assert OfficeLimits.from_env().timeout_s == 12.5
    monkeypatch.setenv(office.TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="VRAG_OFFICE_TIMEOUT"):
        OfficeLimits.from_env()


# --- a mixed batch ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory, files: dict[str, Path], cache: Path) -> Path:
    """A folder of PDFs, a scan, the Office kinds and hostile files."""
    folder = tmp_path_factory.mktemp("mixed")
    for path in files.values():
        (folder / path.name).write_bytes(path.read_bytes())
    texts(files["docx"])
    cached = office.cached_pdf(content_hash(files["docx"]), cache)
    (folder / "plain.pdf").write_bytes(cached.read_bytes())
    with open_document(cached) as document:
        # at half the rendered size: OCR reads its words all the same, in a fifth of the time
        document.page(1).image.reduce(2).save(folder / "scan.png")
    write_bomb(folder / "bomb.xlsx", 80 << 20)
    write_encrypted_docx(folder / "locked.docx", files["docx"])
    return folder


@pytest.mark.slow
@needs_soffice
def test_a_mixed_folder_lands_and_hostile_files_are_reported(mixed: Path) -> None:
    errors: list[IngestError] = []
    pages = list(iter_pages(mixed, errors=errors, dpi=30))
    by_file: dict[str, int] = {}
    for page in pages:
        by_file[page.source.name] = by_file.get(page.source.name, 0) + 1
    assert by_file == {
        "budget.xlsx": 2,
        "deck.pptx": 3,
        "notes.rtf": 2,
        "plain.pdf": 3,
        "report.docx": 3,
        "scan.png": 1,
    }
    reasons = {error.path.name: error.reason for error in errors}
    assert set(reasons) == {"bomb.xlsx", "locked.docx"}
    assert "zip bomb" in reasons["bomb.xlsx"] and "password" in reasons["locked.docx"]
    found, _ = find_documents(mixed)
    assert {p.suffix for p in found} == {".docx", ".pptx", ".xlsx", ".rtf", ".pdf", ".png"}


@pytest.mark.slow
@needs_soffice
def test_vrag_index_and_search_find_a_slide_by_its_own_words(mixed: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    index = tmp_path / "idx"
    options = ["--index", str(index), "--model", "minilm"]  # OCR reads the scan
    result = runner.invoke(app, ["index", str(mixed), *options])
    assert result.exit_code == EXIT_PARTIAL, result.output  # the rest landed, two files failed
    assert "indexed 14 pages from 6 documents" in " ".join(result.output.split())
    assert "bomb.xlsx" in result.output and "locked.docx" in result.output
    search = runner.invoke(app, ["search", str(index), "ocelot rhubarb", "-k", "1", "--json"])
    assert search.exit_code == 0, search.output
    hit = json.loads(search.stdout)["hits"][0]
    assert Path(hit["source"]).name == "deck.pptx" and int(hit["page_no"]) == 2, hit
