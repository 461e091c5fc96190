"""Reaching a Qdrant collection: URLs, credentials and retries, without importing qdrant-client.

Parsing ``qdrant://host:port/name``, deciding whether ``QDRANT_API_KEY`` may go to a server and
retrying transient failures are needed by `vrag index --store`, `vrag migrate` and store.json
pointers before (or without) any connection, so they live here and load no client library;
`vrag_compress.store.qdrant.store` (the store, and this backend's functions for
`vrag_compress.store.open.BACKENDS`) imports qdrant-client.
"""

from __future__ import annotations

import ipaddress
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from vrag_compress.store.base import POINTER_NAME, StoreError, StoreLockedError, StorePointer
from vrag_compress.store.validate import StoreInputError

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

API_KEY_ENV = "QDRANT_API_KEY"
# The Qdrant server the user names for this shell: an index folder whose store.json points at the
# same host and port gets QDRANT_API_KEY; any other folder's server never does.
USER_URL_ENV = "VRAG_QDRANT_URL"
# Comma-separated host[:port] names that may also receive QDRANT_API_KEY from a folder's pointer.
API_KEY_HOSTS_ENV = "QDRANT_API_KEY_HOSTS"
_NAME_RE = re.compile(r"^[A-Za-z0-9_\-]{1,200}$")
T = TypeVar("T")


class QdrantUnavailableError(StoreError):
    """The Qdrant server could not be reached (after retries) or refused the request."""


# ----------------------------------------------------------------------------- locations


@dataclass(frozen=True)
class QdrantLocation:
    """Where a collection lives: a server (``host:port``), a local-mode folder, or memory."""

    collection: str
    host: str | None = None
    port: int = 6333
    path: str | None = None
    https: bool = False
    prefer_grpc: bool = False
    grpc_port: int = 6334
    api_key: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The URL this location was parsed from (no API key)."""
        if self.host is not None:
            extra = "?https=true" if self.https else ""
            return f"qdrant://{self.host}:{self.port}/{self.collection}{extra}"
        if self.path == ":memory:":
            return f"qdrant+memory://{self.collection}"
        return f"qdrant+local://{self.path}?collection={self.collection}"

    def client(self, timeout: float = 30.0) -> QdrantClient:
        """A client for this location (qdrant-client is loaded here, on the first connection)."""
        from qdrant_client import QdrantClient

        if self.host is not None:
            self.check_key_transport()
            return QdrantClient(
                host=self.host,
                port=self.port,
                https=self.https,
                api_key=self.api_key,
                prefer_grpc=self.prefer_grpc,
                grpc_port=self.grpc_port,
                timeout=int(timeout),
            )
        if self.path is not None and self.path != ":memory:":
            from vrag_compress.store.qdrant.local_mode import vet_local_folder

            vet_local_folder(self.path)  # its points are pickles: nothing in them may run
        try:
            return (
                QdrantClient(path=os.path.abspath(self.path or "."))  # it fails on ../ past cwd
                if self.path != ":memory:"
                else QdrantClient(location=":memory:")
            )
        except RuntimeError as exc:  # local mode holds a portalocker lock on its folder
            if "already accessed" in str(exc):
                raise StoreLockedError(
                    f"Qdrant local folder {self.path} is open in another client or process; "
                    "local mode allows one client at a time (use a Qdrant server for sharing)"
                ) from exc
            raise

    @property
    def loopback(self) -> bool:
        """Whether the server is on this machine (``localhost``, ``127.x``, ``::1``)."""
        return self.host is not None and is_loopback(self.host)

    def check_key_transport(self) -> None:
        """Refuse to send an API key in clear text (plain HTTP) to another machine."""
        if self.api_key and not self.https and not self.loopback:
            raise StoreInputError(
                f"refusing to send the Qdrant API key over plain HTTP to {self.host}; "
                f"use qdrants://{self.host}:{self.port}/{self.collection} (HTTPS)"
            )


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# Query parameters that would carry a credential: never accepted, since URLs are saved and shown.
SECRET_PARAMS = frozenset({"api_key", "apikey", "api-key", "key", "token", "password"})


def check_no_secrets(url: str) -> None:
    """A store URL must not carry a credential: it is written to store.json and printed."""
    base, _, query = str(url).partition("?")
    named = {k.lower() for k in parse_qs(query, keep_blank_values=True)}
    if named & SECRET_PARAMS:
        raise StoreInputError(
            f"{base}: do not put an API key in the store URL (it would be saved in the index "
            "folder and shown in reports); set the QDRANT_API_KEY environment variable"
        )


def parse_qdrant_url(url: str, *, api_key: str | None = None) -> QdrantLocation:
    """``qdrant://host:port/collection`` (server, ``qdrants://`` for HTTPS, ``?grpc=true``),
    ``qdrant+local://PATH[?collection=NAME]`` (local mode folder), ``qdrant+memory://NAME``."""
    url = str(url)
    check_no_secrets(url)
    base, _, query = url.partition("?")
    params = {k: v[-1] for k, v in parse_qs(query).items()}
    if base.startswith("qdrant+local://"):
        path = base[len("qdrant+local://") :]
        if not path:
            raise StoreInputError(f"{url}: qdrant+local:// needs a folder, e.g. qdrant+local://./q")
        return QdrantLocation(_collection(params.get("collection", "vrag"), url), path=path)
    if base.startswith("qdrant+memory://"):
        return QdrantLocation(
            _collection(base[len("qdrant+memory://") :] or "vrag", url), path=":memory:"
        )
    scheme, sep, rest = base.partition("://")
    if not sep or scheme not in ("qdrant", "qdrants"):
        raise StoreInputError(
            f"{url!r} is not a Qdrant URL; use qdrant://host:port/collection, "
            "qdrants://host:port/collection or qdrant+local://PATH"
        )
    hostport, _, collection = rest.partition("/")
    host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "6333")
    if not host or not port.isdigit():
        raise StoreInputError(f"{url}: expected qdrant://host:port/collection")
    _check_host(host, url)
    return QdrantLocation(
        _collection(collection.strip("/"), url),
        host=host,
        port=_port(port, url),
        https=scheme == "qdrants" or params.get("https") == "true",
        prefer_grpc=params.get("grpc") == "true",
        grpc_port=_port(params.get("grpc_port", "6334"), url),
        api_key=api_key,
    )


def _port(text: str, url: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise StoreInputError(f"{url}: port {text!r} is not a TCP port (1-65535)")
    return int(text)


def _check_host(host: str, url: str) -> None:
    """Refuse a host the HTTP client cannot connect to (``256.1.1.1``, spaces), as httpx
    parses it, before a client is built."""
    import httpx

    try:
        httpx.URL(f"http://{host}/")
    except httpx.InvalidURL as error:
        raise StoreInputError(f"{url}: {host!r} is not a host name or address ({error})") from None


def _collection(name: str, url: str) -> str:
    if not _NAME_RE.match(name):
        raise StoreInputError(
            f"{url}: collection name {name!r} must be 1-200 letters, digits, '_' or '-'"
        )
    return name


# ----------------------------------------------------------------------------- options


@dataclass
class QdrantOptions:
    """Tuning knobs (not persisted; pass them to `create`/`open`)."""

    candidates: int = 200  # pages the prefetch returns for the MaxSim rerank
    exact_max_pages: int = 10_000  # `auto` scans all pages exactly up to this many
    batch_size: int = 64  # points per upsert/retrieve request
    retries: int = 3  # extra attempts on transient errors (network, 5xx)
    retry_backoff_s: float = 0.5  # doubled after every failed attempt
    timeout_s: float = 30.0
    on_disk: bool = False  # server: keep the page multivectors on disk (memory-mapped)
    shards: int | None = None  # server: shards of a new collection (Qdrant's default: 1)
    replicas: int | None = None  # server: copies of each shard of a new collection (default: 1)


COLLECTION_PARAMS = {"shards": "shards", "replicas": "replicas", "on_disk": "on_disk"}
"""URL query parameters that set `QdrantOptions` for a new collection."""


def url_options(url: str) -> dict[str, Any]:
    """The collection options a store URL carries:
    ``qdrant://host:6333/name?shards=4&replicas=2&on_disk=true``."""
    _, _, query = str(url).partition("?")
    options: dict[str, Any] = {}
    for key, values in parse_qs(query).items():
        if key not in COLLECTION_PARAMS:
            continue
        value = values[-1].strip().lower()
        if key == "on_disk":
            if value not in ("true", "false"):
                raise StoreInputError(f"{url}: on_disk must be true or false, got {value!r}")
            options[key] = value == "true"
        elif not value.isdigit() or not 1 <= int(value) <= 10_000:
            raise StoreInputError(f"{url}: {key} must be a whole number >= 1, got {value!r}")
        else:
            options[key] = int(value)
    return options


def with_retries(call: Callable[[], T], *, retries: int, backoff_s: float, what: str) -> T:
    """Run ``call``; transient failures (connection, timeouts, HTTP 5xx) are retried."""
    for attempt in range(retries + 1):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - classified below
            if not _transient(exc):
                raise
            if attempt == retries:
                raise QdrantUnavailableError(
                    f"Qdrant {what} failed after {retries + 1} attempts: {exc}. Check that the "
                    "server is up and reachable (curl http://HOST:6333/readyz)"
                ) from exc
            time.sleep(backoff_s * 2**attempt)
    raise AssertionError("unreachable")


def retry(opts: QdrantOptions, what: str, call: Callable[[], T]) -> T:
    """`with_retries` with the retries and backoff of ``opts``."""
    return with_retries(call, retries=opts.retries, backoff_s=opts.retry_backoff_s, what=what)


def _transient(exc: Exception) -> bool:
    """Worth another attempt: a connection or timeout failure, or a server error (5xx)."""
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, UnexpectedResponse):
        return exc.status_code is not None and exc.status_code >= 500
    if isinstance(exc, (ResponseHandlingException, ConnectionError, TimeoutError)):
        return True
    return type(exc).__name__ in ("_InactiveRpcError", "RpcError")  # grpc, if used


# ----------------------------------------------------------------------------- credentials


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
    where = parse_qdrant_url(str(target))
    return (
        f"{API_KEY_ENV} was not sent to {where.host}:{where.port}, which "
        f"{target.folder / POINTER_NAME} names and you did not; if you trust it, set "
        f"{USER_URL_ENV}=qdrant://{where.host}:{where.port} or pass the URL with --store / store="
    )


def _user_named(url: str) -> bool:
    """Whether the user named this server: ``VRAG_QDRANT_URL`` or ``QDRANT_API_KEY_HOSTS``."""
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


# ----------------------------------------------------------------------------- store.json


def pointer_url(url: str) -> str:
    """``url`` as an index folder's store.json records it: no credential, a local folder absolute
    (so the pointer works from any working directory)."""
    check_no_secrets(url)
    prefix = "qdrant+local://"
    if not url.startswith(prefix):
        return url
    path, sep, query = url[len(prefix) :].partition("?")
    return prefix + str(Path(path).resolve()) + sep + query
