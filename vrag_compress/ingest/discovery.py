"""Files and folders -> the supported files in them: folders are walked lazily (any size in
bounded memory), a file reached twice is yielded once, and a path that cannot be used is an
`IngestError` in the stream rather than a crash."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from vrag_compress.ingest.errors import IngestError, UnreadablePathError, UnsupportedFileError
from vrag_compress.ingest.files import SUPPORTED_SUFFIXES, read_head, sniff


def find_documents(
    paths: Iterable[str | Path] | str | Path, *, recursive: bool = True
) -> tuple[list[Path], list[IngestError]]:
    """Expand files and folders into a sorted, de-duplicated list of supported files.

    Explicit paths that are missing, unreadable or unsupported come back as errors; inside folders,
    unsupported and hidden files are skipped silently (a folder of mixed files is normal).
    """
    found: list[Path] = []
    errors: list[IngestError] = []
    for item in iter_documents(paths, recursive=recursive):
        if isinstance(item, IngestError):
            errors.append(item)
        else:
            found.append(item)
    return found, errors


def iter_documents(
    paths: Iterable[str | Path] | str | Path,
    *,
    recursive: bool = True,
    unsupported: dict[str, int] | None = None,
) -> Iterator[Path | IngestError]:
    """:func:`find_documents` as a stream: each supported file, or the error of a path that cannot
    be used, as soon as the walk reaches it. Memory stays flat whatever the folder size (a file seen
    twice, through two arguments or links, is yielded once). ``unsupported``, when given, counts
    the unsupported files skipped inside folders by suffix (``{".docx": 2, "(no suffix)": 1}``)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    seen: set[tuple[int, int]] = set()
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            candidates: Iterable[Path | IngestError] = _walk(path, recursive, unsupported)
        else:
            candidates = [_checked(path)]
        for item in candidates:
            if isinstance(item, IngestError):
                yield item
                continue
            key = _identity(item)
            if isinstance(key, IngestError):
                yield key
            elif key not in seen:
                seen.add(key)
                yield item


def check_file(path: Path) -> None:
    """Raise UnreadablePathError unless ``path`` is a regular file this process can open."""
    if not path.exists():
        if path.is_symlink():
            raise UnreadablePathError(path, _link_problem(path, _stat_error(path)))
        raise UnreadablePathError(path, "does not exist")
    if path.is_dir():
        fix = "pass folders to find_documents or iter_pages"
        raise UnreadablePathError(path, "is a directory, expected a file", fix)
    if not path.is_file():
        raise UnreadablePathError(path, "is not a regular file (socket, device or pipe)")
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise UnreadablePathError(path, f"cannot be read ({exc.strerror or exc})") from exc


def check_suffix(path: Path) -> None:
    """Raise UnsupportedFileError unless ``path`` has a supported suffix, saying what its bytes
    look like (a PDF saved as ``.bin`` is named as one)."""
    if path.suffix.lower() not in SUPPORTED_SUFFIXES:
        what = sniff(read_head(path))
        suffix = path.suffix or "(no suffix)"
        raise UnsupportedFileError(path, f"unsupported file type {suffix!r}{what}")


def _checked(path: Path) -> Path | IngestError:
    try:
        check_file(path)
        check_suffix(path)
    except IngestError as exc:
        return exc
    return path


def _walk(
    folder: Path, recursive: bool, unsupported: dict[str, int] | None = None
) -> Iterator[Path | IngestError]:
    """Supported, non-hidden files under ``folder``, each folder's sorted, as the walk reaches
    them; unreadable subfolders are errors, other files are counted in ``unsupported`` by
    suffix. Symlinked folders are not followed (no loops)."""
    errors: list[IngestError] = []

    def on_error(exc: OSError) -> None:
        reason = f"folder cannot be listed ({exc.strerror})"
        errors.append(UnreadablePathError(exc.filename or folder, reason))

    for root, dirs, files in os.walk(folder, onerror=on_error):
        yield from errors
        errors.clear()
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if recursive else []
        for name in sorted(files):
            path = Path(root) / name
            if name.startswith("."):
                continue
            suffix = path.suffix.lower()
            if suffix in SUPPORTED_SUFFIXES:
                yield path
            elif unsupported is not None:
                kind = suffix or "(no suffix)"
                unsupported[kind] = unsupported.get(kind, 0) + 1
    yield from errors


def _identity(path: Path) -> tuple[int, int] | IngestError:
    """The file's (device, inode), so one file reached twice is indexed once; a symlink loop or a
    dangling link is an error here rather than a crash later."""
    try:
        stat = path.stat()
    except OSError as exc:
        return UnreadablePathError(path, _link_problem(path, exc))
    return (stat.st_dev, stat.st_ino)


def _link_problem(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a symlink loop"
    if path.is_symlink():
        return f"is a symlink to a missing file ({os.readlink(path)!r})"
    return f"cannot be read ({exc.strerror or exc})"


def _stat_error(path: Path) -> OSError:
    try:
        path.stat()
    except OSError as exc:
        return exc
    return OSError(errno.ENOENT, "does not exist")
