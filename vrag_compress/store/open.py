"""One entry point for every store backend, through one table (`BACKENDS`): a folder path is the
embedded `LocalStore`; a URL's scheme names the module that builds its store (``qdrant://``,
``qdrants://``, ``qdrant+local://``, ``qdrant+memory://`` -> `vrag_compress.store.qdrant.store`).
Callers (the index, the CLI, `vrag migrate`) then need no change beyond a URL, and a backend's
client library is imported only when one of its URLs is used. Adding a backend = its module
(with the three functions of `Backend`) + one row.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any, Protocol, cast

from vrag_compress.durable import atomic_write
from vrag_compress.store.base import (
    POINTER_NAME,
    MultiVectorStore,
    StoreCorruptError,
    StorePointer,
)
from vrag_compress.store.local.store import LocalStore
from vrag_compress.store.user_input import check_path_text
from vrag_compress.store.validate import StoreInputError

BACKENDS: dict[str, str] = {
    "qdrant": "vrag_compress.store.qdrant.store",
    "qdrants": "vrag_compress.store.qdrant.store",
    "qdrant+local": "vrag_compress.store.qdrant.store",
    "qdrant+memory": "vrag_compress.store.qdrant.store",
}
"""URL scheme -> the module whose `Backend` functions create and open that kind of store."""


class Backend(Protocol):
    """What a backend module in `BACKENDS` provides (module-level functions)."""

    def create_store(self, url: str, config: dict[str, Any], **options: Any) -> MultiVectorStore:
        """A new, empty store at ``url`` recording ``config``; an existing one is an error."""
        ...

    def open_store(
        self, url: str, *, readonly: bool, expect: dict[str, Any] | None, **options: Any
    ) -> MultiVectorStore:
        """The existing store at ``url``; ``expect`` lists config values that must match."""
        ...

    def pointer_url(self, url: str) -> str:
        """``url`` as store.json records it (checked to hold no secret, made location-free)."""
        ...


def _scheme(target: str | os.PathLike[str]) -> str | None:
    scheme, sep, _ = str(target).partition("://")
    return scheme if sep else None


def is_store_url(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` names a backend's store by URL rather than an embedded store folder."""
    return _scheme(target) in BACKENDS


def check_target(target: str | os.PathLike[str]) -> None:
    """Refuse text that looks like a URL of a scheme no backend has (``s3://``, ``file://``):
    taken as a folder path it would quietly make a store in ``./s3:/...``; and a folder path
    no file system takes (`user_input.check_path_text`)."""
    scheme = _scheme(target)
    if scheme is not None and scheme not in BACKENDS:
        schemes = ", ".join(f"{s}://" for s in BACKENDS)
        raise StoreInputError(
            f"{str(target)!r}: {scheme}:// is not a store this version can use (one of "
            f"{schemes}); an embedded store is a folder path without a scheme"
        )
    if scheme is None:
        check_path_text(os.fspath(target), "store folder")


def backend(url: str | os.PathLike[str]) -> Backend:
    """The backend module for ``url``'s scheme (imported now)."""
    module = BACKENDS.get(_scheme(url) or "")
    if module is None:
        schemes = ", ".join(f"{s}://" for s in BACKENDS)
        raise StoreInputError(f"{url!r} is not a store URL (one of {schemes})")
    return cast(Backend, importlib.import_module(module))


def create_store(
    target: str | os.PathLike[str], config: dict[str, Any], **options: Any
) -> MultiVectorStore:
    """A new store at a folder path (embedded) or a backend's URL."""
    check_target(target)
    if is_store_url(target):
        url = cast(str, target)  # a str (or a StorePointer, which backends check for)
        return backend(url).create_store(url, config, **options)
    return LocalStore.create(Path(target), config, **options)


def open_store(
    target: str | os.PathLike[str],
    *,
    readonly: bool = False,
    expect: dict[str, Any] | None = None,
    **options: Any,
) -> MultiVectorStore:
    """Open an existing store at a folder path (embedded) or a backend's URL."""
    check_target(target)
    if is_store_url(target):
        url = cast(str, target)  # a str (or a StorePointer, which backends check for)
        return backend(url).open_store(url, readonly=readonly, expect=expect, **options)
    return LocalStore.open(Path(target), readonly=readonly, expect=expect, **options)


def write_store_pointer(index_dir: str | os.PathLike[str], url: str) -> None:
    """Record in an index folder that its vectors live in the store at ``url`` (no secrets)."""
    pointer = Path(index_dir) / POINTER_NAME
    atomic_write(pointer, json.dumps({"url": backend(url).pointer_url(str(url))}, indent=2))


def read_store_pointer(index_dir: str | os.PathLike[str]) -> str | None:
    """The store URL an index folder points at, or None for an embedded index."""
    pointer = Path(index_dir) / POINTER_NAME
    if not pointer.is_file():
        return None
    try:
        url = json.loads(pointer.read_text())["url"]
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreCorruptError(str(pointer), f"not a store pointer ({exc})") from exc
    if not isinstance(url, str) or not is_store_url(url):
        raise StoreCorruptError(str(pointer), f"{url!r} is not a store URL")
    return StorePointer(url, Path(index_dir))
