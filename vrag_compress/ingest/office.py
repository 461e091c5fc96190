"""Office files -> PDF with LibreOffice headless, ahead of the PDF renderer.

Word, PowerPoint, Excel and OpenDocument files (and RTF) become pages the way a user prints them:
``soffice --headless --convert-to pdf`` writes a PDF that the PDF path then renders, so page 3 of
the result is the third page or slide the user sees. Conversion must not hurt the rest of a batch:

- every conversion starts LibreOffice with a fresh private user profile (``-env:UserInstallation``),
  so concurrent conversions share nothing and no crash-recovery state carries over;
- that profile is written before LibreOffice starts with macros disabled outright
  (``DisableMacrosExecution``), the highest macro security level with no trusted locations, and
  links to other files never updated: a document's macros cannot run whatever it asks for;
- LibreOffice runs in its own process group under coreutils ``timeout -s KILL``: on a timeout the
  whole group is killed, and a converter orphaned by a killed parent still dies at the deadline;
- a converter whose PDF grows past the size cap is killed as it writes, and the result is
  checked for its page count before anything renders it;
- a ZIP container (.docx/.pptx/.xlsx/.odt/...) is checked from its central directory before
  LibreOffice sees it: a zip bomb (huge uncompressed total or ratio) is refused, and a
  password-protected file (an encrypted OOXML package, an ODF manifest with encryption data) is
  reported as such.

Converted PDFs are cached by the content hash of the original file in a user cache folder
(``VRAG_OFFICE_CACHE``, else ``$XDG_CACHE_HOME/vrag-compress/office``): the same deck indexed again,
into any index, by the CLI, a server or a Ray worker on the same machine, converts nothing. A result
is written in a temporary folder next to the cache and renamed into place once complete, so a
conversion killed at any moment (kill -9 included) leaves no partial PDF under a cached name.

Standard library plus pypdfium2 only: no Python package is needed beyond the base install, just
LibreOffice itself (``make system-deps-office``).
"""

from __future__ import annotations

import functools
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pypdfium2 as pdfium

WORD_SUFFIXES = frozenset({".docx", ".doc", ".odt", ".rtf"})
SLIDE_SUFFIXES = frozenset({".pptx", ".ppt", ".odp"})
SHEET_SUFFIXES = frozenset({".xlsx", ".xls", ".ods"})
OFFICE_SUFFIXES = WORD_SUFFIXES | SLIDE_SUFFIXES | SHEET_SUFFIXES
_ZIP_SUFFIXES = frozenset({".docx", ".pptx", ".xlsx", ".odt", ".odp", ".ods"})

OFFICE_PACKAGES = (
    "libreoffice-writer-nogui",
    "libreoffice-impress-nogui",
    "libreoffice-calc-nogui",
)
_LOCKED = ("the file is password-protected", "save a copy without a password")
INSTALL_HINT = (
    "install LibreOffice: `make system-deps-office`, or"
    f" `apt-get install --no-install-recommends {' '.join(OFFICE_PACKAGES)}`"
)
CACHE_ENV = "VRAG_OFFICE_CACHE"
TIMEOUT_ENV = "VRAG_OFFICE_TIMEOUT"
DEFAULT_TIMEOUT_S = 180.0
# Caps on what one file may turn into; the page memory limit still applies to each page.
DEFAULT_MAX_PDF_BYTES = 512 << 20
DEFAULT_MAX_PAGES = 2_000
# ZIP containers: what the members may inflate to before LibreOffice is asked to open them.
DEFAULT_MAX_UNZIPPED_BYTES = 1 << 30
MAX_ZIP_RATIO = 100  # refused above this overall ratio once the total passes _RATIO_FLOOR
_RATIO_FLOOR = 64 << 20
MAX_ZIP_MEMBERS = 20_000
# Temporary conversion folders older than this are left over from a killed run: removed.
_STALE_S = 2 * 3600
_TEMP_PREFIX = ".convert-"
_POLL_S = 0.1  # how often a running conversion's output size and deadline are checked

_CFB = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# An OOXML file saved with a password is a compound file holding these streams.
_ENCRYPTED_OOXML = "EncryptedPackage".encode("utf-16-le")
_CONVERT_SECURELY = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry"
 xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Common/Security/Scripting">\
<prop oor:name="DisableMacrosExecution" oor:op="fuse"><value>true</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting">\
<prop oor:name="MacroSecurityLevel" oor:op="fuse"><value>3</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting">\
<prop oor:name="SecureURL" oor:op="fuse"><value/></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting">\
<prop oor:name="BlockUntrustedRefererLinks" oor:op="fuse"><value>true</value></prop></item>
<item oor:path="/org.openoffice.Office.Writer/Content/Update">\
<prop oor:name="Link" oor:op="fuse"><value>2</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Content/Update">\
<prop oor:name="Link" oor:op="fuse"><value>2</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc">\
<prop oor:name="UseLocking" oor:op="fuse"><value>false</value></prop></item>
</oor:items>
"""
# The profile was last used by this LibreOffice (major.minor): otherwise every start counts as the
# first after an upgrade and runs LibreOffice's graphics self-tests, over half of the CPU that a
# conversion costs; they only write a log into the profile, which is thrown away.
_LAST_VERSION = """<item oor:path="/org.openoffice.Setup/Product">\
<prop oor:name="ooSetupLastVersion" oor:op="fuse"><value>{version}</value></prop></item>
"""
# Slides hidden in the deck still get their page, so page N is slide N as the editor numbers it.
_SLIDE_FILTER = 'pdf:impress_pdf_Export:{"ExportHiddenSlides":{"type":"boolean","value":"true"}}'


class ConversionError(Exception):
    """An Office file that cannot become a PDF: ``reason`` says why, ``fix`` what to do."""

    def __init__(self, reason: str, fix: str) -> None:
        self.reason = reason
        self.fix = fix
        super().__init__(f"{reason} ({fix})")


class LibreOfficeMissingError(ConversionError):
    """LibreOffice (``soffice``) is not installed."""


@dataclass(frozen=True)
class OfficeLimits:
    """What one conversion may take: seconds, PDF bytes, pages, and ZIP members' inflated size."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    max_pdf_bytes: int = DEFAULT_MAX_PDF_BYTES
    max_pages: int = DEFAULT_MAX_PAGES
    max_unzipped_bytes: int = DEFAULT_MAX_UNZIPPED_BYTES

    @classmethod
    def from_env(cls) -> OfficeLimits:
        """The defaults, with the timeout from ``VRAG_OFFICE_TIMEOUT`` (seconds) when set."""
        value = os.environ.get(TIMEOUT_ENV, "").strip()
        if not value:
            return cls()
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"{TIMEOUT_ENV}={value!r} is not a number of seconds") from None
        if not seconds > 0:
            raise ValueError(f"{TIMEOUT_ENV}={value!r} must be a positive number of seconds")
        return cls(timeout_s=seconds)


def is_office(path: Path) -> bool:
    """Whether ``path`` names a file this module converts (by suffix)."""
    return path.suffix.lower() in OFFICE_SUFFIXES


def find_soffice() -> str | None:
    """The LibreOffice executable on PATH (``soffice``, else ``libreoffice``), or None."""
    return shutil.which("soffice") or shutil.which("libreoffice")


def cache_dir() -> Path:
    """Where converted PDFs are kept: ``VRAG_OFFICE_CACHE``, else the user cache folder."""
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:  # absolute: LibreOffice's profile is handed over as a file:// URI
        return Path(explicit).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "vrag-compress" / "office"


def cached_pdf(digest: str, folder: Path | None = None) -> Path:
    """The cache path of the PDF converted from a file with SHA-256 ``digest``."""
    return (folder or cache_dir()) / digest[:2] / f"{digest}.pdf"


def to_pdf(
    path: Path,
    digest: str,
    *,
    limits: OfficeLimits | None = None,
    folder: Path | None = None,
) -> Path:
    """The PDF of Office file ``path`` (whose SHA-256 is ``digest``): from the cache, else
    converted, checked and cached. Raises :class:`ConversionError` with the reason and the fix."""
    target = cached_pdf(digest, folder)
    if target.is_file():
        return target
    limits = limits or OfficeLimits.from_env()
    check_container(path, limits)
    soffice = find_soffice()
    if soffice is None:
        raise LibreOfficeMissingError(
            f"LibreOffice is needed to read {path.suffix.lower()} files and is not installed",
            INSTALL_HINT,
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _sweep(target.parent.parent)
        work = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=target.parent.parent))
    except OSError as exc:
        reason = f"the conversion cache {target.parent.parent} is not writable ({exc.strerror})"
        raise ConversionError(reason, f"set {CACHE_ENV} to a writable folder") from exc
    try:
        pdf = _convert(soffice, path, work, limits)
        check_pdf(pdf, limits)
        _fsync(pdf)
        os.replace(pdf, target)
    except OSError as exc:  # a full disk, or the input vanished while it was copied
        reason = f"the conversion could not be written ({exc.strerror or exc})"
        raise ConversionError(reason, f"free space in {target.parent.parent}, then retry") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def check_container(path: Path, limits: OfficeLimits) -> None:
    """Refuse before conversion what must not reach LibreOffice: a password-protected file, a
    ZIP-based file that is not a ZIP, or a zip bomb (from the central directory's sizes)."""
    with open(path, "rb") as handle:
        head = handle.read(8)
    if head.startswith(_CFB):
        if _compound_has(path, _ENCRYPTED_OOXML):
            raise ConversionError(*_LOCKED)
        if path.suffix.lower() in _ZIP_SUFFIXES:
            reason = f"a {path.suffix.lower()} file is a ZIP package; this is an old binary one"
            raise ConversionError(reason, "rename it to its old suffix (.doc, .ppt or .xls)")
        return
    if path.suffix.lower() not in _ZIP_SUFFIXES:
        return
    if not head.startswith(b"PK"):
        reason = f"not a {path.suffix.lower()} file: it is not a ZIP package"
        raise ConversionError(reason, "re-export the file from its application")
    _check_zip(path, limits)


def check_pdf(pdf: Path, limits: OfficeLimits) -> int:
    """The converted PDF's page count; ConversionError when it is missing, empty or over a cap."""
    if not pdf.is_file():
        raise ConversionError(
            "LibreOffice could not convert it: the file is damaged, password-protected or not"
            " what its suffix says",
            "open it in its application and save a fresh copy",
        )
    size = pdf.stat().st_size
    if size >= limits.max_pdf_bytes:
        raise ConversionError(_over_pdf_cap(limits), "split the document")
    try:
        document = pdfium.PdfDocument(str(pdf))
    except pdfium.PdfiumError as exc:
        reason = f"LibreOffice wrote a PDF that cannot be read ({exc})"
        raise ConversionError(reason, "open it in its application and save a fresh copy") from exc
    try:
        pages = len(document)
    finally:
        document.close()
    if pages < 1:
        raise ConversionError("it converts to zero pages", "remove it from the input")
    if pages > limits.max_pages:
        reason = f"it converts to {pages:,} pages, over the {limits.max_pages:,}-page cap"
        raise ConversionError(reason, "split the document, or index a PDF export of it")
    return pages


# --- helpers ------------------------------------------------------------------------------------


def _check_zip(path: Path, limits: OfficeLimits) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            encrypted = _odf_encrypted(archive, members)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        reason = f"the ZIP package is damaged ({exc})"
        raise ConversionError(reason, "re-download or re-export the file") from exc
    if encrypted:
        raise ConversionError(*_LOCKED)
    if len(members) > MAX_ZIP_MEMBERS:
        reason = f"a zip bomb? {len(members):,} members, over {MAX_ZIP_MEMBERS:,}"
        raise ConversionError(reason, "re-export the file from its application")
    inflated = sum(member.file_size for member in members)
    packed = max(1, path.stat().st_size)
    if inflated > limits.max_unzipped_bytes or (
        inflated > _RATIO_FLOOR and inflated / packed > MAX_ZIP_RATIO
    ):
        reason = (
            f"a zip bomb? {packed:,} bytes unpack to {inflated:,}"
            f" (caps: {limits.max_unzipped_bytes:,} bytes, ratio {MAX_ZIP_RATIO}:1)"
        )
        raise ConversionError(reason, "convert it to PDF yourself if you trust the file")


def _odf_encrypted(archive: zipfile.ZipFile, members: list[zipfile.ZipInfo]) -> bool:
    """An OpenDocument file saved with a password lists encryption data in its manifest."""
    manifest = next((m for m in members if m.filename == "META-INF/manifest.xml"), None)
    if manifest is None or manifest.file_size > 4 << 20:
        return False
    return b"encryption-data" in archive.read(manifest)


def _compound_has(path: Path, name: bytes, limit: int = 64 << 20) -> bool:
    """Whether a compound (CFB) file's directory names stream ``name``; read in chunks."""
    overlap = len(name)
    tail = b""
    with open(path, "rb") as handle:
        while handle.tell() < limit and (chunk := handle.read(1 << 20)):
            if name in tail + chunk:
                return True
            tail = chunk[-overlap:]
    return False


def _convert(soffice: str, path: Path, work: Path, limits: OfficeLimits) -> Path:
    """Run LibreOffice on a copy of ``path`` inside ``work``; the PDF it wrote."""
    profile, source, out, scratch = work / "profile", work / "in", work / "out", work / "tmp"
    for folder in (source, out, scratch):
        folder.mkdir(parents=True)
    write_profile(profile, soffice)
    copy = source / f"document{path.suffix.lower()}"
    shutil.copyfile(path, copy)  # a plain name; and the bytes hashed are the bytes converted
    target = _SLIDE_FILTER if path.suffix.lower() in SLIDE_SUFFIXES else "pdf"
    command = [
        *_guards(limits),
        soffice,
        f"-env:UserInstallation={profile.as_uri()}",
        "--headless",
        "--invisible",
        "--nologo",
        "--nodefault",
        "--nolockcheck",
        "--norestore",
        "--convert-to",
        target,
        "--outdir",
        str(out),
        str(copy),
    ]
    env = {**os.environ, "HOME": str(work), "TMPDIR": str(scratch)}
    code = _run(command, limits, env, out)
    if code in (124, 137, -signal.SIGKILL):  # coreutils timeout's codes, or killed outright
        raise _timed_out(limits)
    pdf = out / "document.pdf"
    if code != 0 and not pdf.is_file():
        reason = f"LibreOffice failed on it (exit status {code})"
        raise ConversionError(reason, "open it in its application and save a fresh copy")
    return pdf


def write_profile(profile: Path, soffice: str) -> Path:
    """A LibreOffice user profile at ``profile`` with this module's settings (macros off, no
    links or network; the version ``soffice`` is, which spares each start the first-start
    self-tests); pass it as ``-env:UserInstallation=<its URI>``. A profile used before keeps
    its other files; its settings are written again."""
    (profile / "user").mkdir(parents=True, exist_ok=True)
    (profile / "user" / "registrymodifications.xcu").write_text(_profile_settings(soffice))
    return profile


def _profile_settings(soffice: str) -> str:
    """The profile's registry: `_CONVERT_SECURELY`, plus `_LAST_VERSION` when it is known."""
    version = _libreoffice_version(soffice)
    if version is None:
        return _CONVERT_SECURELY
    last = _LAST_VERSION.format(version=version)
    return _CONVERT_SECURELY.replace("</oor:items>", last + "</oor:items>")


@functools.lru_cache(maxsize=4)
def _libreoffice_version(soffice: str) -> str | None:
    """The major.minor version of the LibreOffice that ``soffice`` starts, read from its
    registry (``ooSetupVersion`` in main.xcd next to its program folder); None if not found."""
    program = Path(soffice).resolve().parent
    for registry in (
        program.parent / "share" / "registry",
        program.parent / "Resources" / "registry",
    ):
        try:
            text = (registry / "main.xcd").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found = re.search(r'<prop oor:name="ooSetupVersion">\s*<value>(\d+\.\d+)</value>', text)
        if found:
            return found.group(1)
    return None


def _guards(limits: OfficeLimits) -> list[str]:
    """coreutils ``timeout``, which kills LibreOffice's whole process group at the deadline even
    when this process was killed first; without it (not Debian) this process's own deadline
    still applies. (A kernel file-size limit is not used: LibreOffice then drops the pictures
    it cannot buffer and writes a PDF without them, silently.)"""
    killer = shutil.which("timeout")
    return [killer, "-s", "KILL", f"{math.ceil(limits.timeout_s)}"] if killer else []


def _run(command: list[str], limits: OfficeLimits, env: dict[str, str], out: Path) -> int:
    """Run ``command`` in its own process group; its exit status. The group is killed on this
    process's deadline, as soon as what it wrote to ``out`` passes the PDF cap, and after it
    exits (helpers it left behind)."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    deadline = time.monotonic() + limits.timeout_s
    try:
        while process.poll() is None:
            if _written(out) >= limits.max_pdf_bytes:
                raise ConversionError(_over_pdf_cap(limits), "split the document")
            if time.monotonic() > deadline:
                raise _timed_out(limits)
            time.sleep(_POLL_S)
    finally:
        _kill_group(process)
    return process.returncode


def _timed_out(limits: OfficeLimits) -> ConversionError:
    return ConversionError(
        f"LibreOffice did not finish within {limits.timeout_s:g} s",
        f"raise {TIMEOUT_ENV} (seconds) if the file is just large",
    )


def _written(folder: Path) -> int:
    """Bytes of the files under ``folder`` now (one may vanish while LibreOffice renames it)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:
            continue
    return total


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _over_pdf_cap(limits: OfficeLimits) -> str:
    return f"its PDF is larger than the {limits.max_pdf_bytes / 2**20:,.0f} MiB cap"


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _sweep(folder: Path) -> None:
    """Remove conversion folders a killed run left behind (old enough that none is running)."""
    cutoff = time.time() - _STALE_S
    try:
        entries = list(folder.glob(f"{_TEMP_PREFIX}*"))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue
