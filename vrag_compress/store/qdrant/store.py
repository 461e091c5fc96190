"""`QdrantStore`: the `MultiVectorStore` protocol over a Qdrant collection (scale-out backend).

When a collection outgrows one machine, Qdrant (sharded, replicated, open source) stores
multi-vectors natively and ranks by MaxSim. Layout, one index = one collection (plus a small
sidecar collection ``<name>__vrag`` for the config and the document rows, which have no vectors):

- ``pages``: the compressed page vectors as a multivector with ``MAX_SIM`` and ``DOT`` (vectors
  are L2-normalised, so this is the exact ColBERT score); HNSW is off on it (``m=0``): it is only
  used to rerank, or scanned in full by exact searches.
- a cheap candidate field searched through ``prefetch``: ``mean`` (dense mean of the page's
  vectors, queried with the mean of the query's vectors) or ``binary`` (a multivector of the signs
  of the vectors, MaxSim over sign agreement), or none (every search exact).
- ``text``: a sparse vector of the page text's BM25 term weights; Qdrant applies the IDF
  (``Modifier.IDF``) at query time, so a query of the text's words scores BM25. The ``text``
  and ``hybrid`` modes search it. Hybrid's reciprocal rank fusion is Qdrant's own fusion query
  over the two sides as prefetches; with ``alpha`` both sides are fetched in one batched
  request and fused here by the embedded store's code (fusion.py).
- payload: ``page_id``, ``doc_id``, ``page_no``, ``metadata`` (the page metadata), ``image_ref``,
  ``text``. Point ids are UUIDv5 of the page id.

Vectors are rounded to fp16 before upload, so scores equal the embedded store's exactly.
Writes go in batches with retries; Qdrant has no multi-point transaction, so pages are written
before their document rows (a crash never marks a document complete without its pages). The
layout is built in schema.py, the queries a search sends in requests.py.
"""

from __future__ import annotations

import dataclasses
import os
import time
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import numpy as np

from vrag_compress.store.base import (
    DocumentRecord,
    DuplicatePageError,
    MultiVectorStore,
    PageNotFoundError,
    PageRecord,
    SearchMode,
    SearchResult,
    StoreClosedError,
    StoreConfigMismatch,
    StoreError,
    StoreExistsError,
    StoreNotFoundError,
    StoreReadOnlyError,
    VerifyReport,
)
from vrag_compress.store.fusion import RRF_K, check_alpha, fuse
from vrag_compress.store.qdrant import requests as rq
from vrag_compress.store.qdrant import schema
from vrag_compress.store.qdrant.access import (
    QdrantLocation,
    QdrantOptions,
    api_key_for,
    key_withheld,
    parse_qdrant_url,
    retry,
    url_options,
)
from vrag_compress.store.qdrant.access import pointer_url as pointer_url  # a backend function
from vrag_compress.store.qdrant.local_mode import check_new_local_folder
from vrag_compress.store.qdrant.requests import HYBRID_DEPTH, TIE_MARGIN
from vrag_compress.store.qdrant.schema import CANDIDATES as CANDIDATES  # the backend's options
from vrag_compress.store.qdrant.schema import CONFIG_ID, SCHEMA_VERSION, SIDECAR_SUFFIX
from vrag_compress.store.qdrant.schema import PAGES as PAGES  # the collection's named vectors
from vrag_compress.store.qdrant.schema import TEXT as TEXT
from vrag_compress.store.validate import (
    TEXT_MODES,
    StoreInputError,
    as_list,
    check_batch,
    check_config,
    check_dim,
    check_document,
    check_expect,
    check_id,
    check_ids,
    check_k,
    check_missing,
    check_mode,
    check_mode_options,
    check_query,
    check_texts,
)
from vrag_compress.version import __version__

try:
    from qdrant_client import QdrantClient, models
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Qdrant backend needs qdrant-client: pip install 'vrag-compress[qdrant]'"
    ) from exc

T = TypeVar("T")


# ----------------------------------------------------------------------------- the backend
# this module's row in vrag_compress.store.open.BACKENDS: create_store, open_store, pointer_url


def create_store(url: str, config: dict[str, Any], **options: Any) -> MultiVectorStore:
    """A new Qdrant collection at ``url`` (the key goes only where `api_key_for` allows)."""
    if isinstance(config, dict) and config.get("fp16", True) is False:
        raise StoreInputError(
            f"config fp16=False (vectors kept only as residual codes) needs the embedded "
            f"store; {url} is a Qdrant store"
        )
    options.setdefault("api_key", api_key_for(url))
    return QdrantStore.create(str(url), config, **options)


def open_store(
    url: str, *, readonly: bool, expect: dict[str, Any] | None, **options: Any
) -> MultiVectorStore:
    """Open the Qdrant collection at ``url``; a refusal after a withheld key says why."""
    withheld = key_withheld(url) if "api_key" not in options else None
    options.setdefault("api_key", api_key_for(url))
    try:
        return QdrantStore.open(str(url), readonly=readonly, expect=expect, **options)
    except Exception as error:
        if withheld and getattr(error, "status_code", None) in (401, 403):
            raise StoreInputError(f"the Qdrant server refused the connection: {withheld}") from None
        raise


# ----------------------------------------------------------------------------- the store


class QdrantStore(MultiVectorStore):
    """`MultiVectorStore` over one Qdrant collection; `create`/`open` take a URL or location."""

    def __init__(
        self,
        client: QdrantClient,
        location: QdrantLocation,
        *,
        readonly: bool,
        options: QdrantOptions,
        owns_client: bool,
    ) -> None:
        self.client: QdrantClient | None = client
        self.location = location
        self.collection = location.collection
        self.sidecar = location.collection + SIDECAR_SUFFIX
        self.readonly = readonly
        self.options = options
        self._owns_client = owns_client
        # a client left open is closed when the store is collected or, at the latest, at exit:
        # qdrant-client's own __del__ runs too late there (local mode then fails importing)
        self._closer = weakref.finalize(self, client.close) if owns_client else None
        self._meta = self._load_meta()
        self.dim = check_dim(self._meta["config"])
        self.candidate: str = self._meta["candidate"]

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def create(
        cls,
        location: str | QdrantLocation,
        config: dict[str, Any],
        *,
        candidate: str = "mean",
        client: QdrantClient | None = None,
        api_key: str | None = None,
        **options: Any,
    ) -> QdrantStore:
        """A new collection (and its sidecar) recording ``config``; an existing one is an error.

        ``candidate`` picks the prefetch field: "mean", "binary" or "none" (always exact).
        The collection keeps full (fp16-rounded) vectors and no residual codes, so ``fp16`` and
        ``codes`` of the given config are not recorded (they would describe vectors it lacks)."""
        config = schema.layout_free(check_config(config))
        if candidate not in CANDIDATES:
            raise StoreInputError(f"candidate must be one of {CANDIDATES}, got {candidate!r}")
        loc = _location(location, api_key)
        if client is None and loc.path not in (None, ":memory:"):
            check_new_local_folder(loc.path)
        given = url_options(location) if isinstance(location, str) else {}
        opts = QdrantOptions(**{**given, **options})  # keyword arguments over the URL's
        owns = client is None
        client = client or loc.client(opts.timeout_s)
        try:
            if retry(opts, "collection check", lambda: client.collection_exists(loc.collection)):
                raise StoreExistsError(
                    f"Qdrant collection {loc.collection!r} already exists at {loc.url}; open it, "
                    "or delete it first (QdrantClient.delete_collection)"
                )
            schema.create_collections(client, loc, config["dim"], candidate, opts)
            meta = {
                "schema_version": SCHEMA_VERSION,
                "config": config,
                "candidate": candidate,
                "text_index": "bm25",
                "library_version": __version__,
                "created_at": time.time(),
            }
            client.upsert(
                loc.collection + SIDECAR_SUFFIX,
                [models.PointStruct(id=CONFIG_ID, vector={}, payload={"kind": "config", **meta})],
                wait=True,
            )
        except BaseException:
            if owns:
                client.close()
            raise
        return cls(client, loc, readonly=False, options=opts, owns_client=owns)

    @classmethod
    def open(
        cls,
        location: str | QdrantLocation,
        *,
        readonly: bool = False,
        expect: dict[str, Any] | None = None,
        client: QdrantClient | None = None,
        api_key: str | None = None,
        **options: Any,
    ) -> QdrantStore:
        """Open an existing collection; ``expect`` lists config values that must match.

        A local-mode folder must exist: opening never creates one."""
        loc = _location(location, api_key)
        opts = QdrantOptions(**options)
        owns = client is None
        if owns and loc.path not in (None, ":memory:") and not os.path.isdir(loc.path):
            raise StoreNotFoundError(f"no Qdrant local-mode folder at {loc.path}")
        client = client or loc.client(opts.timeout_s)
        try:
            store = cls(client, loc, readonly=readonly, options=opts, owns_client=owns)
            store._check_expect(expect or {})
            store._check_schema()
        except BaseException:
            if owns:
                client.close()
            raise
        return store

    def close(self) -> None:
        if self._closer is not None:
            self._closer()  # closes an owned client once; a no-op after
        self.client = None

    @property
    def closed(self) -> bool:
        return self.client is None

    @property
    def root(self) -> str:
        return self.location.url

    # ------------------------------------------------------------------ config
    @property
    def config(self) -> dict[str, Any]:
        return check_config(self._meta["config"])

    @property
    def library_version(self) -> str:
        return str(self._meta.get("library_version", ""))

    def update_config(self, **changes: Any) -> None:
        """Merge ``changes`` into the stored config (``dim`` cannot change)."""
        self._writable()
        new = schema.layout_free(check_config({**self._meta["config"], **changes}))
        if new["dim"] != self.dim:
            raise StoreError(
                f"cannot change dim of {self.root} from {self.dim}: the collection's vector size "
                "is fixed; build a new collection"
            )
        self._meta["config"] = new
        self._put_meta()

    def _load_meta(self) -> dict[str, Any]:
        client = self._client()
        if not self._retry("collection check", lambda: client.collection_exists(self.collection)):
            raise StoreNotFoundError(
                f"no Qdrant collection {self.collection!r} at {self.root}; create one"
            )
        if not self._retry("collection check", lambda: client.collection_exists(self.sidecar)):
            raise StoreError(
                f"Qdrant collection {self.collection!r} at {self.root} was not created by "
                f"vrag_compress (no {self.sidecar!r} collection with its config)"
            )
        found = self._retry("read config", lambda: client.retrieve(self.sidecar, [CONFIG_ID]))
        if not found:
            raise StoreError(f"{self.root}: the sidecar collection {self.sidecar!r} has no config")
        payload = dict(found[0].payload or {})
        if payload.get("schema_version") != SCHEMA_VERSION:
            raise StoreError(
                f"{self.root}: schema version {payload.get('schema_version')!r} is not "
                f"{SCHEMA_VERSION}; upgrade vrag_compress"
            )
        return payload

    def _put_meta(self) -> None:
        payload = {"kind": "config", **self._meta}
        point = models.PointStruct(id=CONFIG_ID, vector={}, payload=payload)
        self._retry("write config", lambda: self._client().upsert(self.sidecar, [point], wait=True))

    def _check_expect(self, expect: dict[str, Any]) -> None:
        check_expect(self.root, self._meta["config"], expect)

    def _check_schema(self) -> None:
        """The collection's vector size must be the config's dim (someone may have recreated it)."""
        info = self._retry(
            "collection info", lambda: self._client().get_collection(self.collection)
        )
        vectors = info.config.params.vectors
        params = vectors.get(PAGES) if isinstance(vectors, dict) else None
        if params is None or params.size != self.dim:
            raise StoreConfigMismatch(
                self.root, {"dim": (None if params is None else params.size, self.dim)}
            )

    # ------------------------------------------------------------------ writes
    def add(self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord] = ()) -> None:
        """Store new pages (then upsert document rows); existing page ids are an error."""
        self._write_pages(pages, documents, replace=False)

    def upsert(self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord] = ()) -> None:
        """Like `add`, but pages whose id exists replace the stored ones."""
        self._write_pages(pages, documents, replace=True)

    def put_document(self, doc: DocumentRecord) -> None:
        """Insert or replace one document row."""
        self._writable()
        self._put_documents([check_document(doc)])

    def delete(self, *, doc_id: str | None = None, page_ids: Sequence[str] | None = None) -> int:
        """Delete a document's pages and its row, or the given pages; returns pages removed."""
        if (doc_id is None) == (page_ids is None):
            raise StoreInputError("delete needs exactly one of doc_id= or page_ids=")
        self._writable()
        client = self._client()
        if doc_id is not None:
            check_id(doc_id, "doc_id")
            flt = rq.match("doc_id", doc_id)
            n = self._retry(
                "count", lambda: client.count(self.collection, count_filter=flt, exact=True)
            ).count
            self._retry(
                "delete",
                lambda: client.delete(
                    self.collection, models.FilterSelector(filter=flt), wait=True
                ),
            )
            self._retry(
                "delete",
                lambda: client.delete(
                    self.sidecar,
                    models.PointIdsList(points=[schema.doc_point_id(doc_id)]),
                    wait=True,
                ),
            )
            return int(n)
        ids = check_ids(page_ids)
        present = [r.payload["page_id"] for r in self._retrieve(ids, vectors=False)]
        point_ids: list[models.ExtendedPointId] = [schema.point_id(p) for p in present]
        for chunk in _chunks(point_ids, self.options.batch_size):
            self._retry(
                "delete",
                partial(
                    client.delete, self.collection, models.PointIdsList(points=chunk), wait=True
                ),
            )
        return len(present)

    def _write_pages(
        self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord], *, replace: bool
    ) -> None:
        self._writable()
        batch = check_batch(pages, documents, self.dim)
        pages, docs, vectors = batch.pages, batch.documents, batch.vectors
        if not pages and not docs:
            return
        if not replace:
            existing = sorted(
                r.payload["page_id"]
                for r in self._retrieve([p.page_id for p in pages], vectors=False)
            )
            if existing:
                raise DuplicatePageError(
                    f"{len(existing)} page ids already exist in {self.root} (e.g. "
                    f"{existing[:5]}); use upsert() to replace them"
                )
        points = [self._point(p, v) for p, v in zip(pages, vectors, strict=True)]
        for chunk in _chunks(points, self.options.batch_size):
            self._retry("upsert", partial(self._client().upsert, self.collection, chunk, wait=True))
        given = {d.doc_id for d in docs}
        self._put_documents(docs)
        self._ensure_documents(sorted({p.doc_id for p in pages} - given))

    def _point(self, page: PageRecord, vectors16: np.ndarray) -> models.PointStruct:
        text_index = bool(self._meta.get("text_index"))
        return schema.page_point(page, vectors16, self.candidate, text_index)

    def _put_documents(self, docs: list[DocumentRecord]) -> None:
        points = [
            models.PointStruct(
                id=schema.doc_point_id(d.doc_id),
                vector={},
                payload={
                    "kind": "document",
                    "doc_id": d.doc_id,
                    "source": d.source,
                    "content_hash": d.content_hash,
                    "n_pages": d.n_pages,
                    "complete": d.complete,
                    "metadata": d.metadata,
                },
            )
            for d in docs
        ]
        for chunk in _chunks(points, self.options.batch_size):
            self._retry(
                "write documents", partial(self._client().upsert, self.sidecar, chunk, wait=True)
            )

    def _ensure_documents(self, doc_ids: list[str]) -> None:
        """Every page's document gets a row (incomplete, no metadata) unless it has one."""
        if not doc_ids:
            return
        have = {
            (r.payload or {})["doc_id"]
            for r in self._retry(
                "read documents",
                lambda: self._client().retrieve(
                    self.sidecar, [schema.doc_point_id(d) for d in doc_ids]
                ),
            )
        }
        self._put_documents([DocumentRecord(d) for d in doc_ids if d not in have])

    def compact(self) -> None:
        """Nothing to do: Qdrant's optimizer vacuums deleted points in the background."""
        self._client()

    # ------------------------------------------------------------------ reads
    def count(self) -> int:
        return int(
            self._retry("count", lambda: self._client().count(self.collection, exact=True)).count
        )

    def get(self, page_ids: Sequence[str], *, missing: str = "error") -> list[PageRecord]:
        """Pages in the order asked; unknown ids raise `PageNotFoundError` (or are skipped)."""
        ids = check_ids(page_ids)
        check_missing(missing)
        found = {r.payload["page_id"]: r for r in self._retrieve(ids, vectors=True)}
        absent = [i for i in ids if i not in found]
        if absent and missing == "error":
            raise PageNotFoundError(f"{len(absent)} page ids not in {self.root}: {absent[:5]}")
        return [schema.page_record(found[i]) for i in ids if i in found]

    def documents(self) -> list[DocumentRecord]:
        points = self._scroll(
            self.sidecar,
            rq.match("kind", "document"),
            ["doc_id", "source", "content_hash", "n_pages", "complete", "metadata"],
        )
        return sorted((schema.doc_record(p.payload) for p in points), key=lambda d: d.doc_id)

    def document(self, doc_id: str) -> DocumentRecord | None:
        check_id(doc_id, "doc_id")
        found = self._retry(
            "read documents",
            lambda: self._client().retrieve(self.sidecar, [schema.doc_point_id(doc_id)]),
        )
        return schema.doc_record(found[0].payload or {}) if found else None

    def page_ids(self, doc_id: str | None = None) -> list[str]:
        """All page ids (sorted), or a document's in page order."""
        if doc_id is None:
            return sorted(
                p.payload["page_id"] for p in self._scroll(self.collection, None, ["page_id"])
            )
        check_id(doc_id, "doc_id")
        points = self._scroll(self.collection, rq.match("doc_id", doc_id), ["page_id", "page_no"])
        return [
            p.payload["page_id"]
            for p in sorted(points, key=lambda p: (p.payload["page_no"], p.payload["page_id"]))
        ]

    def _retrieve(self, page_ids: list[str], *, vectors: bool) -> list[Any]:
        found: list[Any] = []
        for chunk in _chunks(page_ids, self.options.batch_size):
            found.extend(
                self._retry(
                    "retrieve",
                    partial(
                        self._client().retrieve,
                        self.collection,
                        [schema.point_id(p) for p in chunk],
                        with_payload=True,
                        with_vectors=[PAGES] if vectors else False,
                    ),
                )
            )
        return found

    def _scroll(self, collection: str, flt: models.Filter | None, fields: list[str]) -> list[Any]:
        points: list[Any] = []
        offset = None
        while True:
            batch, offset = self._retry(
                "scroll",
                partial(
                    self._client().scroll,
                    collection,
                    scroll_filter=flt,
                    limit=1000,
                    offset=offset,
                    with_payload=models.PayloadSelectorInclude(include=fields),
                    with_vectors=False,
                ),
            )
            points.extend(batch)
            if offset is None:
                return points

    # ------------------------------------------------------------------ search
    def search_many(
        self,
        queries: Sequence[np.ndarray] | None,
        k: int = 5,
        *,
        filter: dict[str, Any] | None = None,
        mode: SearchMode = "auto",
        texts: Sequence[str] | None = None,
        alpha: float | None = None,
        text_k: int | None = None,
        fts_syntax: bool = False,
    ) -> list[list[SearchResult]]:
        """`search` for several queries in one batched request.

        ``exact`` scans every (filtered) page's multivector; ``two_stage`` prefetches
        ``options.candidates`` pages through the candidate field and reranks them by MaxSim;
        ``auto`` is exact up to ``options.exact_max_pages`` pages. ``text`` searches the
        sparse BM25 vectors; ``hybrid`` both, fused (``fts_syntax`` is the embedded store's
        alone)."""
        from vrag_compress.store.filters.qdrant import to_qdrant_filter

        k = check_k(k, pages=self.count)
        check_mode_options(check_mode(mode), texts, alpha, text_k, fts_syntax)
        if mode in TEXT_MODES:
            return self._search_with_text(
                queries, texts, k, to_qdrant_filter(filter), mode, alpha, text_k, fts_syntax
            )
        qs = [check_query(q, self.dim, f"queries[{i}]") for i, q in enumerate(as_list(queries))]
        flt = to_qdrant_filter(filter)
        if not qs:
            return []
        exact = self._use_exact(mode)
        requests = [self._request(q, k + TIE_MARGIN, flt, exact) for q in qs]
        responses = self._retry(
            "query", lambda: self._client().query_batch_points(self.collection, requests)
        )
        return [rq.results(r.points, k) for r in responses]

    def _search_with_text(
        self,
        queries: Sequence[np.ndarray] | None,
        texts: Sequence[str] | None,
        k: int,
        flt: models.Filter | None,
        mode: str,
        alpha: float | None,
        text_k: int | None,
        fts_syntax: bool,
    ) -> list[list[SearchResult]]:
        """BM25 over the sparse text vectors (``text``), or fused with MaxSim (``hybrid``):
        every side of every query in one batched request, fused here like the embedded store."""
        if fts_syntax:
            raise StoreInputError(
                "raw FTS syntax is understood by the embedded store only; search the words"
            )
        if not self._meta.get("text_index"):
            raise StoreError(
                f"{self.root} was created before text search; copy it into a new collection "
                "(vrag migrate) to search its page text"
            )
        qs = None
        if mode == "hybrid":
            if queries is None:
                raise StoreInputError("mode='hybrid' needs the query vectors as well as the text")
            qs = [check_query(q, self.dim, f"queries[{i}]") for i, q in enumerate(as_list(queries))]
        words = check_texts(texts, None if qs is None else len(qs), mode)
        alpha = check_alpha(alpha)
        depth = k if mode == "text" else max(k, HYBRID_DEPTH)
        text_depth = depth if text_k is None else check_k(text_k, "text_k", self.count)
        if qs and alpha is None:
            return self._server_rrf(qs, words, k, flt, depth, text_depth)
        requests = [self._text_request(t, text_depth + TIE_MARGIN, flt) for t in words]
        if qs:
            exact = self._use_exact("auto")
            requests += [self._request(q, depth + TIE_MARGIN, flt, exact) for q in qs]
        responses = self._retry(
            "query", lambda: self._client().query_batch_points(self.collection, requests)
        )
        out = []
        for i in range(len(words)):
            matched = [p for p in responses[i].points if p.score > 0]  # no shared term: no hit
            text_hits = rq.results(matched, text_depth)
            sides = {"text": text_hits}
            if qs:
                sides = {"visual": rq.results(responses[len(words) + i].points, depth), **sides}
            payloads = {h.page_id: h for side in sides.values() for h in side}
            fused = fuse(
                {s: [(h.page_id, h.score) for h in hits] for s, hits in sides.items()},
                k,
                alpha=alpha if qs else None,
            )
            out.append(
                [
                    dataclasses.replace(
                        payloads[str(f.key)],
                        score=f.score if qs else f.components["text"]["score"],
                        components=f.components,
                    )
                    for f in fused
                ]
            )
        return out

    def _server_rrf(
        self,
        qs: list[np.ndarray],
        words: list[str],
        k: int,
        flt: models.Filter | None,
        depth: int,
        text_depth: int,
    ) -> list[list[SearchResult]]:
        """Reciprocal rank fusion by Qdrant's own fusion query (both sides as prefetches), with
        the text side alongside to name its ranks and scores; a second request scores the fused
        pages by MaxSim. Qdrant counts positions from 0, so its RRF k is ours plus one; the
        visual rank follows from the fused score minus the text side's share."""
        exact = self._use_exact("auto")
        requests = []
        for q, text in zip(qs, words, strict=True):
            dense = rq.as_prefetch(self._request(q, depth, flt, exact))
            sparse = self._text_request(text, text_depth, flt)
            requests.append(
                models.QueryRequest(
                    prefetch=[dense, rq.as_prefetch(sparse)],
                    query=models.RrfQuery(rrf=models.Rrf(k=RRF_K + 1)),
                    limit=k + TIE_MARGIN,
                    with_payload=True,
                    with_vector=False,
                )
            )
            requests.append(sparse)
        responses = self._retry(
            "query", lambda: self._client().query_batch_points(self.collection, requests)
        )
        fused = [rq.results(responses[2 * i].points, k) for i in range(len(qs))]
        texts = [rq.results(responses[2 * i + 1].points, text_depth) for i in range(len(qs))]
        scores = self._maxsim_of(qs, fused)
        return [
            [rq.with_components(h, texts[i], scores[i]) for h in fused[i]] for i in range(len(qs))
        ]

    def _maxsim_of(
        self, qs: list[np.ndarray], hits: list[list[SearchResult]]
    ) -> list[dict[str, float]]:
        """MaxSim of each query against the pages it found (only those pages are scored)."""
        requests = [
            models.QueryRequest(
                query=q.tolist(),
                using=PAGES,
                filter=models.Filter(
                    must=[models.HasIdCondition(has_id=[schema.point_id(h.page_id) for h in found])]
                ),
                limit=max(1, len(found)),
                with_payload=["page_id"],
                with_vector=False,
            )
            for q, found in zip(qs, hits, strict=True)
        ]
        responses = self._retry(
            "query", lambda: self._client().query_batch_points(self.collection, requests)
        )
        return [{(p.payload or {})["page_id"]: float(p.score) for p in r.points} for r in responses]

    def _text_request(
        self, text: str, limit: int, flt: models.Filter | None
    ) -> models.QueryRequest:
        return rq.text_request(text, limit, flt)

    def _use_exact(self, mode: str) -> bool:
        if self.candidate == "none" or mode == "exact":
            return True
        if mode == "two_stage":
            return False
        approx = self._retry("count", lambda: self._client().count(self.collection, exact=False))
        return approx.count <= self.options.exact_max_pages

    def _request(
        self, q: np.ndarray, limit: int, flt: models.Filter | None, exact: bool
    ) -> models.QueryRequest:
        candidate = None if exact else self.candidate
        return rq.page_request(
            q, limit, flt, candidate=candidate, candidates=self.options.candidates
        )

    # ------------------------------------------------------------------ integrity
    def verify(self) -> VerifyReport:
        """Config readable, vector size = dim, every page has a document row and valid payload."""
        problems: list[str] = []
        try:
            self._check_schema()
        except StoreConfigMismatch as exc:
            problems.append(str(exc))
        pages = self._scroll(self.collection, None, ["page_id", "doc_id", "page_no"])
        docs = {d.doc_id for d in self.documents()}
        for p in pages:
            payload = p.payload or {}
            if str(p.id) != schema.point_id(str(payload.get("page_id"))):
                problems.append(
                    f"point {p.id} has page_id {payload.get('page_id')!r} that does "
                    "not hash to its id"
                )
            elif payload.get("doc_id") not in docs:
                problems.append(
                    f"page {payload['page_id']!r}: no row for document {payload.get('doc_id')!r}"
                )
        return VerifyReport(
            ok=not problems, problems=problems, pages=len(pages), documents=len(docs)
        )

    # ------------------------------------------------------------------ helpers
    def _client(self) -> QdrantClient:
        if self.client is None:
            raise StoreClosedError(f"store {self.root} is closed")
        return self.client

    def _writable(self) -> None:
        self._client()
        if self.readonly:
            raise StoreReadOnlyError(f"store {self.root} was opened with readonly=True")

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        return retry(self.options, what, call)


def _location(location: str | QdrantLocation, api_key: str | None) -> QdrantLocation:
    if isinstance(location, QdrantLocation):
        return location
    return parse_qdrant_url(location, api_key=api_key)


def _chunks(items: list[T], size: int) -> list[list[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
