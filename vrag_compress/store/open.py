"""One entry point for every store backend: a folder path is the embedded `LocalStore`, a
``qdrant://`` / ``qdrant+local://`` URL is a `QdrantStore`. Callers (the index, the CLI, `vrag
migrate`) then need no change beyond a URL, and qdrant-client is imported only when used.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vrag_compress.store.base import MultiVectorStore, StoreCorruptError
from vrag_compress.store.local import LocalStore
from vrag_compress.store.validate import StoreInputError

QDRANT_PREFIXES = ("qdrant://", "qdrants://", "qdrant+local://", "qdrant+memory://")
API_KEY_ENV = "QDRANT_API_KEY"
# Comma-separated hosts that may receive QDRANT_API_KEY when an index folder (not the user)
# names the server.
API_KEY_HOSTS_ENV = "QDRANT_API_KEY_HOSTS"
POINTER_NAME = "store.json"  # in an index folder whose vectors live elsewhere


class StorePointer(str):
    """A store URL read from an index folder's store.json rather than given by the user.

    Whoever wrote the folder chose it, so credentials from the environment go to its host only
    when the user named that host too (see :func:`api_key_for`)."""

    folder: Path

    def __new__(cls, url: str, folder: Path) -> StorePointer:
        pointer = super().__new__(cls, url)
        pointer.folder = folder
        return pointer


def is_store_url(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` names a remote/Qdrant store rather than an embedded store folder."""
    return str(target).startswith(QDRANT_PREFIXES)


def create_store(
    target: str | os.PathLike[str], config: dict[str, Any], **options: Any
) -> MultiVectorStore:
    """A new store at a folder path (embedded) or a Qdrant URL."""
    if is_store_url(target):
        from vrag_compress.store.qdrant import QdrantStore

        if isinstance(config, dict) and config.get("fp16", True) is False:
            raise StoreInputError(
                f"config fp16=False (vectors kept only as residual codes) needs the embedded "
                f"store; {target} is a Qdrant store"
            )

        options.setdefault("api_key", api_key_for(target))
        return QdrantStore.create(str(target), config, **options)
    return LocalStore.create(Path(target), config, **options)


def open_store(
    target: str | os.PathLike[str],
    *,
    readonly: bool = False,
    expect: dict[str, Any] | None = None,
    **options: Any,
) -> MultiVectorStore:
    """Open an existing store at a folder path (embedded) or a Qdrant URL."""
    if is_store_url(target):
        from vrag_compress.store.qdrant import QdrantStore

        options.setdefault("api_key", api_key_for(target))
        return QdrantStore.open(str(target), readonly=readonly, expect=expect, **options)
    return LocalStore.open(Path(target), readonly=readonly, expect=expect, **options)


def api_key_for(target: str | os.PathLike[str]) -> str | None:
    """``QDRANT_API_KEY`` for a server the user named; None when it is unset or not needed.

    A URL from an index folder's store.json (a :class:`StorePointer`) gets the key only for a
    loopback host or one listed in ``QDRANT_API_KEY_HOSTS``: a folder from someone else must not
    choose where the key goes. Otherwise this raises a clear error instead of a confusing 401."""
    key = os.environ.get(API_KEY_ENV) or None
    if key is None or not isinstance(target, StorePointer):
        return key
    from vrag_compress.store.qdrant import is_loopback, parse_qdrant_url

    host = parse_qdrant_url(str(target)).host
    if host is None or is_loopback(host):
        return key
    named = {h.strip().lower() for h in os.environ.get(API_KEY_HOSTS_ENV, "").split(",")}
    if host.lower() in named:
        return key
    raise StoreInputError(
        f"{target.folder / POINTER_NAME} points at the Qdrant server {host}, which you have not "
        f"named, so {API_KEY_ENV} is not sent there. If you trust it, pass the URL yourself "
        f"(--store / store=) or add {host} to {API_KEY_HOSTS_ENV}"
    )


def absolute_store_url(url: str) -> str:
    """``qdrant+local://rel/dir`` made absolute, so a pointer works from any working directory."""
    prefix = "qdrant+local://"
    if not url.startswith(prefix):
        return url
    path, sep, query = url[len(prefix) :].partition("?")
    return prefix + str(Path(path).resolve()) + sep + query


def write_store_pointer(index_dir: str | os.PathLike[str], url: str) -> None:
    """Record in an index folder that its vectors live in the store at ``url`` (no secrets)."""
    if not is_store_url(url):
        raise StoreInputError(f"{url!r} is not a store URL (qdrant://... or qdrant+local://...)")
    from vrag_compress.store.qdrant import check_no_secrets

    check_no_secrets(url)
    pointer = Path(index_dir) / POINTER_NAME
    tmp = pointer.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": absolute_store_url(str(url))}, indent=2))
    os.replace(tmp, pointer)


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
