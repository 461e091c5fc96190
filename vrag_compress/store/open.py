"""One entry point for every store backend: a folder path is the embedded `LocalStore`, a
``qdrant://`` / ``qdrant+local://`` URL is a `QdrantStore`. Callers (the index, the CLI, `vrag
migrate`) then need no change beyond a URL, and qdrant-client is imported only when used.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vrag_compress.store.base import MultiVectorStore, StoreCorruptError
from vrag_compress.store.local import LocalStore
from vrag_compress.store.validate import StoreInputError

QDRANT_PREFIXES = ("qdrant://", "qdrants://", "qdrant+local://", "qdrant+memory://")
API_KEY_ENV = "QDRANT_API_KEY"
# The Qdrant server the user names for this shell: an index folder whose store.json points at the
# same host and port gets QDRANT_API_KEY; any other folder's server never does.
USER_URL_ENV = "VRAG_QDRANT_URL"
# Comma-separated host[:port] names that may also receive QDRANT_API_KEY from a folder's pointer.
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

        withheld = key_withheld(target) if "api_key" not in options else None
        options.setdefault("api_key", api_key_for(target))
        try:
            return QdrantStore.open(str(target), readonly=readonly, expect=expect, **options)
        except Exception as error:
            if withheld and getattr(error, "status_code", None) in (401, 403):
                refused = f"the Qdrant server refused the connection: {withheld}"
                raise StoreInputError(refused) from None
            raise
    return LocalStore.open(Path(target), readonly=readonly, expect=expect, **options)


def api_key_for(target: str | os.PathLike[str]) -> str | None:
    """``QDRANT_API_KEY`` for a server the user named in this invocation; None otherwise.

    A URL the user gave (``--store``, ``store=``) gets the key. A URL read from an index folder's
    store.json (a :class:`StorePointer`) gets it only when the user named the same server too:
    ``VRAG_QDRANT_URL`` with that host and port, or the host in ``QDRANT_API_KEY_HOSTS``. Whoever
    wrote the folder must not choose where the key goes, and a loopback port is no exception (any
    local user can listen there): without a match the store connects without the key."""
    key = os.environ.get(API_KEY_ENV) or None
    if key is None or not isinstance(target, StorePointer):
        return key
    return key if _user_named(str(target)) else None


def key_withheld(target: str | os.PathLike[str]) -> str | None:
    """Why ``QDRANT_API_KEY`` is not sent to ``target``'s server (None when it is, or unset)."""
    if not os.environ.get(API_KEY_ENV) or not isinstance(target, StorePointer):
        return None
    if _user_named(str(target)):
        return None
    from vrag_compress.store.qdrant import parse_qdrant_url

    where = parse_qdrant_url(str(target))
    return (
        f"{API_KEY_ENV} was not sent to {where.host}:{where.port}, which "
        f"{target.folder / POINTER_NAME} names and you did not; if you trust it, set "
        f"{USER_URL_ENV}=qdrant://{where.host}:{where.port} or pass the URL with --store / store="
    )


def _user_named(url: str) -> bool:
    """Whether the user named this server: ``VRAG_QDRANT_URL`` or ``QDRANT_API_KEY_HOSTS``."""
    from vrag_compress.store.qdrant import parse_qdrant_url

    where = parse_qdrant_url(url)
    if where.host is None:
        return False
    named = urlsplit(os.environ.get(USER_URL_ENV, "").strip())
    try:
        same_port = (named.port or 6333) == where.port
    except ValueError:  # not a port number: names nothing
        same_port = False
    if (named.hostname or "").lower() == where.host.lower().strip("[]") and same_port:
        return True
    hosts = {h.strip().lower() for h in os.environ.get(API_KEY_HOSTS_ENV, "").split(",")}
    return where.host.lower() in hosts or f"{where.host}:{where.port}".lower() in hosts


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
