"""`VisualIndex`: the one object users hold. Joins ingestion, encoding, compression and the store.

This module is the front door (create, open, add, search, get, delete, info, verify); the
indexing pipeline behind `add` lives in `vrag_compress.indexing`, the stored settings in
`vrag_compress.index_config`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from vrag_compress.compress import compressor_for
from vrag_compress.compress.base import Compressor
from vrag_compress.encoders.base import Encoder, QueryEncoder, ReadsPageText, query_twin
from vrag_compress.encoders.fingerprint import model_fingerprint, model_folder
from vrag_compress.encoders.select import is_text_model
from vrag_compress.explain import Explanation, Region, explain_vectors, query_token_labels
from vrag_compress.image_query import (
    ImageQuery,
    QueryImage,
    encode_query_image,
    load_query_image,
)
from vrag_compress.index_config import (
    DEFAULT_MODEL,
    DEFAULT_RATIO,
    IndexConfig,
    IndexConfigError,
    IndexOptions,
    ModelChangedWarning,
    VisualIndexError,
    recorded_compressor,
    reopen_options,
)
from vrag_compress.indexing import AddReport, Indexer
from vrag_compress.ingest import Page
from vrag_compress.ingest import page_id as default_page_id
from vrag_compress.ingest.ocr import PageOcr
from vrag_compress.ingest.page_assets import PageAssets
from vrag_compress.microbatch import MicroBatcher
from vrag_compress.scoring import maxsim
from vrag_compress.store import (
    DocumentRecord,
    MultiVectorStore,
    OptimizableStore,
    PageRecord,
    SearchResult,
    StoreExistsError,
    VerifyReport,
)
from vrag_compress.store.base import LayoutStore, SearchMode
from vrag_compress.store.filters import check_user_metadata
from vrag_compress.store.local.catalog import CATALOG_NAME
from vrag_compress.store.local.layout import choose_layout
from vrag_compress.store.open import (
    create_store,
    open_store,
    read_store_pointer,
    write_store_pointer,
)
from vrag_compress.version import __version__

if TYPE_CHECKING:
    from vrag_compress.distributed import RayOptions

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MODEL",
    "AddReport",
    "Hit",
    "IndexConfig",
    "ModelChangedWarning",
    "ModelMismatchError",
    "VisualIndex",
    "VisualIndexError",
]


class ModelMismatchError(VisualIndexError):
    """The index was built with another model than the one asked for."""


@dataclass
class Hit:
    """One search result: a page with its score, provenance, metadata, text and (lazy) image."""

    doc_id: str
    page_no: int
    score: float
    source: str | None
    metadata: dict[str, Any]
    text: str | None
    page_id: str
    regions: list[Region] = field(default_factory=list)
    components: dict[str, dict[str, float]] | None = None
    context: list[Hit] = field(default_factory=list)
    """With ``search(..., neighbours=N)``: the N pages before and after this one in the same
    document, in page order (scores NaN); empty otherwise."""
    query_ocr: str | None = None
    """For an image query on a text-encoder index: the words OCR read from the image, which
    were searched as text; None for every other search."""
    _assets: PageAssets | None = field(default=None, repr=False, compare=False)
    _image_ref: str | None = field(default=None, repr=False, compare=False)
    _explanation: Explanation | None = field(default=None, repr=False, compare=False)

    def explain(self) -> Explanation:
        """Why this page matched: per query token, the stored vector it matched, its share of
        the score and the page patches behind it (see `vrag_compress.explain`)."""
        if self._explanation is None:
            raise VisualIndexError("this hit did not come from a search; use VisualIndex.explain")
        return self._explanation

    @property
    def found_by(self) -> list[str]:
        """Which sides of a text or hybrid search found this page ("visual", "text")."""
        return sorted(self.components or {}, reverse=True)

    @property
    def pages(self) -> list[Hit]:
        """The hit and its `context` in page order: what an answer reads as one passage."""
        return sorted([self, *self.context], key=lambda hit: hit.page_no)

    @property
    def image_path(self) -> Path | None:
        """The stored page image file, when the index keeps images."""
        if self._assets is None:
            return None
        return self._assets.image_path(self._image_ref)

    @property
    def image(self) -> Image.Image:
        """The page image, loaded on first access (from the index folder or the source file)."""
        if self._assets is None:
            raise VisualIndexError("this hit is detached from its index; no image available")
        return self._assets.load(self._image_ref, self.source, self.page_no)

    def to_dict(self) -> dict[str, Any]:
        """The hit as a JSON-ready dict: the image as its stored path, never its pixels."""
        path = self.image_path
        return {
            "doc_id": self.doc_id,
            "page_no": self.page_no,
            "score": self.score,
            "source": self.source,
            "metadata": self.metadata,
            "text": self.text,
            "image_path": str(path) if path else None,
            "page_id": self.page_id,
            "regions": [r.to_dict() for r in self.regions],
            "components": self.components,
            "context": [c.to_dict() for c in self.context],
            "query_ocr": self.query_ocr,
        }


QUERY_BACKEND_ENV = "VRAG_QUERY_BACKEND"
"""``torch`` makes searches load the torch encoder even when an ONNX query export exists."""


def adapt_encoder(encoder: Any) -> Encoder | None:
    """Our encoder for what the user passed (a Sentence Transformers model is wrapped)."""
    if encoder is None:
        return None
    from vrag_compress.encoders.select import adapt_encoder as adapt

    return adapt(encoder)


def _model_config_name(encoder: Encoder) -> str:
    return getattr(encoder, "model_id", type(encoder).__name__)


_Searched = tuple[np.ndarray, list[str] | None, list[SearchResult]]
"""One search's query vectors, their token labels and the store's results."""


@dataclass(frozen=True)
class _SearchRequest:
    """One `VisualIndex.search` call waiting in the micro-batch."""

    query: str | np.ndarray
    k: int
    filter: dict[str, Any] | None
    mode: SearchMode
    alpha: float | None
    text_k: int | None
    fts_syntax: bool

    def group_key(self, position: int) -> Any:
        """Requests with equal keys share one `search_many` call (same k, filter and mode)."""
        where: Any
        try:
            where = json.dumps(self.filter, sort_keys=True)
        except (TypeError, ValueError, RecursionError):
            where = ("alone", position)  # a filter the store will refuse: searched on its own
        return (self.k, where, self.mode, self.alpha, self.text_k, self.fts_syntax)


class VisualIndex:
    """A folder holding a compressed multi-vector index of document pages, plus their images."""

    def __init__(
        self,
        path: Path,
        store: MultiVectorStore,
        encoder: Encoder | None,
        device: str,
        compressor: Compressor | None = None,
    ) -> None:
        self.path = path
        self.store = store
        self._encoder = adapt_encoder(encoder)
        self._query_encoder: Any = None
        self._twin: Any = None
        self._device = device
        self._load_lock = threading.RLock()  # the model loads once, whichever thread asks
        self._query_lock = threading.Lock()  # one thread at a time in the query tokenizer
        self._batcher: MicroBatcher[_SearchRequest, _Searched] = MicroBatcher(self._search_batch)
        self.config = IndexConfig.from_dict(store.config)
        self.model_id: str = self.config.model_id
        self.batch_size: int = self.config.batch_size
        self.dpi: int = self.config.dpi
        self.renderer: str = self.config.renderer
        self._compressor = compressor
        self.assets = PageAssets(
            path, **self.config.images.to_dict(), dpi=self.dpi, renderer=self.renderer
        )

    # ----------------------------------------------------------------- lifecycle
    @classmethod
    def create(
        cls,
        path: str | Path,
        model: str = DEFAULT_MODEL,
        compressor: Compressor | str | None = None,
        *,
        ratio: float = DEFAULT_RATIO,
        device: str = "auto",
        encoder: Encoder | None = None,
        store: str | None = None,
        options: IndexOptions | None = None,
        **keywords: Any,
    ) -> VisualIndex:
        """Create a new index folder. The encoder loads here (to learn the vector dimension);
        a folder that already holds an index raises `StoreExistsError` first (use `open`, or
        `open_or_create`).

        `compressor` is a compressor object, a method name (with `ratio`), or None for SAP at
        `ratio`; `compressor_for` fills in what depends on the model, e.g. a SAP window missing
        from an object (built-in profile, else the uncalibrated fallback with a warning), and
        the config records what was used. `store` is None for the embedded store inside the
        folder, or a URL (``qdrant://host:port/collection``, ``qdrant+local://PATH``): the
        vectors then live there and the folder keeps the images, layouts and a pointer to it.
        `options` (an `IndexOptions`) or its fields as keyword arguments set what else the
        index records: `batch_size`, `dpi`, `renderer`, `store_images`/`image_format`/
        `image_max_side`, `dtype` ("auto", "fp32", "bf16") and `speedup` ("none", "int8":
        dynamic int8 linear layers on the CPU), which trade a little precision for Col*
        encoding speed and are used again whenever the index loads its encoder (`vrag bench
        encode` measures them), `codes` ("none", "4bit", "2bit", "1bit": the residual codes the
        candidate index keeps per vector) and `fp16`. By default (both None) the embedded store
        picks its layout by size: fp16 rows while small, `codes` (4bit unless given) once it
        holds enough vectors for its candidate index (store/local/layout.py; ``codes="none"`` keeps
        fp16 rows for good). ``fp16=True`` always keeps the fp16 rows; ``fp16=False`` (embedded
        store) keeps only the codes: an index several times smaller that reranks on decoded
        vectors. The choice is kept in the index config.
        """
        path = Path(path)
        if cls.exists(path):  # before any model loads: that takes seconds to minutes
            raise StoreExistsError(
                f"{path} already holds an index: open it with VisualIndex.open({str(path)!r}), "
                f"or use VisualIndex.open_or_create({str(path)!r}, ...) to create it only when "
                "it is missing"
            )
        settings = IndexOptions.with_keywords(options, **keywords)
        loading = settings.encoder_options()
        try:
            codes, fp16, layout_rule = choose_layout(
                settings.codes, settings.fp16, embedded=store is None
            )
        except ValueError as error:
            raise VisualIndexError(str(error)) from None
        encoder = adapt_encoder(encoder)
        if encoder is None:
            from vrag_compress.encoders import load_encoder

            encoder = load_encoder(model, device=device, batch_size=settings.batch_size, **loading)
        elif loading and isinstance(encoder, ReadsPageText):
            raise VisualIndexError(
                f"dtype/speedup apply to Col* encoders, not {_model_config_name(encoder)}"
            )
        built = compressor_for(compressor, encoder=encoder, ratio=ratio)
        _check_rebuildable(built)
        model_id = _model_config_name(encoder)
        config = IndexConfig(
            model_id=model_id,
            dim=int(encoder.dim),
            encoder=_encoder_info(encoder),
            compressor=built.name,
            compressor_params=built.params,
            compressor_module=_outside_module(built),
            images=settings.images,
            batch_size=settings.batch_size,
            dpi=settings.dpi,
            renderer=settings.renderer,
            vrag_version=__version__,
            encoder_options=loading,
            codes=codes,
            fp16=fp16,
            layout=layout_rule,
            model_fingerprint=model_fingerprint(model_id),
        ).to_dict()
        if store is None:
            return cls(path, create_store(path, config), encoder, device, built)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise VisualIndexError(f"{path} already exists and is not an empty folder")
        remote = create_store(store, config)
        path.mkdir(parents=True, exist_ok=True)
        write_store_pointer(path, store)
        return cls(path, remote, encoder, device, built)

    @classmethod
    def open_or_create(
        cls,
        path: str | Path,
        *,
        model: str | None = None,
        encoder: Encoder | None = None,
        device: str = "auto",
        **create_options: Any,
    ) -> VisualIndex:
        """Open the index at `path`, or create it there (`create_options` go to `create`).

        An explicit `model` must match an existing index's model; a new index gets `model`
        or `DEFAULT_MODEL`."""
        if cls.exists(path):
            return cls.open(path, model=model, encoder=encoder, device=device)
        return cls.create(
            path, model=model or DEFAULT_MODEL, encoder=encoder, device=device, **create_options
        )

    @staticmethod
    def exists(path: str | Path) -> bool:
        """Whether `path` already holds an index (so `add` should open rather than create)."""
        path = Path(path)
        return (path / CATALOG_NAME).is_file() or read_store_pointer(path) is not None

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        model: str | None = None,
        device: str = "auto",
        encoder: Encoder | None = None,
        readonly: bool = False,
        store: str | None = None,
    ) -> VisualIndex:
        """Open an existing index; the encoder loads lazily on the first add or search.

        The vectors come from `store` when given (a URL or store folder), else from the store
        the folder points at, else from the embedded store inside the folder."""
        path = Path(path)
        if not path.exists() or (store is None and not cls.exists(path)):
            raise VisualIndexError(
                f"{path}: no index here (create one with `vrag index ... --index {path}`)"
            )
        target = store or read_store_pointer(path) or path
        opened = open_store(target, readonly=readonly)
        try:
            index = cls(path, opened, encoder, device)
        except (KeyError, TypeError, ValueError) as exc:  # a config edited by hand or crafted
            opened.close()
            raise IndexConfigError(f"{path}: the index config is invalid ({exc})") from exc
        except BaseException:
            opened.close()
            raise
        given = index._encoder
        asked = model or (_model_config_name(given) if given is not None else None)
        if asked and asked != index.model_id:
            opened.close()
            raise ModelMismatchError(
                f"{path} was indexed with model {index.model_id!r}, not {asked!r}: query vectors "
                "of different models are not comparable. Open it without a model, or re-index."
            )
        index._check_weights()
        return index

    def _check_weights(self) -> None:
        """Warn when the model's weights are not those the index was built with: a folder
        rewritten in place keeps its name (and often its shapes), yet changes every query."""
        recorded = self.config.model_fingerprint
        current = model_fingerprint(self.model_id) if recorded is not None else None
        if current is not None and current != recorded:
            warnings.warn(
                f"{self.path}: the weights of model {self.model_id!r} (in "
                f"{model_folder(self.model_id)}) changed since this index was built, so queries "
                "and stored pages no longer come from one model and rankings may shift. Restore "
                "the model's files, or re-index.",
                ModelChangedWarning,
                stacklevel=3,
            )

    def close(self) -> None:
        """Close the store (and release the writer lock); the index is unusable after."""
        self.store.close()

    def __enter__(self) -> VisualIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def encoder(self) -> Encoder:
        """The Col* encoder recorded in the index, loaded on first use."""
        with self._load_lock:
            if self._encoder is None:
                from vrag_compress.encoders import load_encoder

                self._encoder = load_encoder(
                    self.model_id,
                    device=self._device,
                    batch_size=self.batch_size,
                    **reopen_options(self.config.encoder_options, self._device),
                )
            return self._encoder

    @property
    def query_encoder(self) -> QueryEncoder:
        """What encodes queries: the loaded encoder, else the model's ONNX export on the CPU
        (`vrag export-onnx`: no torch in the process; ``VRAG_QUERY_BACKEND=torch`` declines it),
        else the encoder, loaded."""
        wanted = os.environ.get(QUERY_BACKEND_ENV, "auto") != "torch"
        on_cpu = self._device in ("auto", "cpu")
        with self._load_lock:
            if self._encoder is None and self._query_encoder is None and on_cpu and wanted:
                from vrag_compress.encoders.onnx_query import load_onnx_query_encoder

                self._query_encoder = load_onnx_query_encoder(
                    self.model_id, dim=self.config.dim, fingerprint=self.config.model_fingerprint
                )
            if self._encoder is None and self._query_encoder is not None:
                return self._query_encoder
            encoder = self.encoder
            if self._twin is None or self._twin[0] is not encoder:
                self._twin = (encoder, query_twin(encoder))
            return self._twin[1]

    @property
    def compressor(self) -> Compressor:
        """The compressor recorded in the index, rebuilt from its name and parameters."""
        if self._compressor is None:
            self._compressor = recorded_compressor(self.config)
        return self._compressor

    # ----------------------------------------------------------------- reading
    def search(
        self,
        query: str | np.ndarray | None = None,
        k: int = 5,
        *,
        image: QueryImage | ImageQuery | None = None,
        filter: dict[str, Any] | None = None,
        mode: SearchMode = "auto",
        alpha: float | None = None,
        text_k: int | None = None,
        fts_syntax: bool = False,
        neighbours: int = 0,
        compress_query: bool = True,
        ocr: PageOcr | None = None,
    ) -> list[Hit]:
        """Top-k pages for the query: words, ready-made query vectors, or ``image``.

        ``mode`` "auto", "exact" or "two_stage" rank by MaxSim of the query against the
        compressed page vectors; "text" by BM25 over the page text (no model is loaded);
        "hybrid" fuses both: reciprocal rank fusion, or with ``alpha`` (0 text only .. 1 visual
        only) min-max normalised score interpolation. Text and hybrid hits carry
        ``components``: the rank and score of each side that found them. ``text_k`` is how many
        text candidates hybrid fuses; ``fts_syntax`` reads the query as raw SQLite FTS5 syntax
        (phrases, NEAR, prefix*) on the embedded store.

        ``image`` (a path, a PIL image or the file's bytes) searches with a picture instead of
        words: a Col* index encodes it as a page (compressed with the index's compressor unless
        ``compress_query=False``); a text-encoder index reads its words by OCR (``ocr``, default
        `PageOcr("always")`) and searches them as text, and each hit's ``query_ocr`` holds them.
        ``neighbours`` N gives each hit the N pages before and after it in its document
        (`Hit.context`), for answers that run over a page break.

        An empty (or whitespace-only) query raises `ValueError`, as in every integration; so
        does an image that is not one, is empty or is too large (`ImageQueryError`)."""
        if isinstance(neighbours, bool) or not isinstance(neighbours, int) or neighbours < 0:
            raise ValueError(f"neighbours must be a whole number >= 0, got {neighbours!r}")
        read: ImageQuery | None = None
        if image is not None:
            if query is not None:
                raise ValueError("give either a query or an image to search with, not both")
            read = (
                image
                if isinstance(image, ImageQuery)
                else self.read_image(image, compress=compress_query, ocr=ocr)
            )
            if read.read_by == "page" and mode in ("text", "hybrid"):
                raise ValueError(
                    f"mode={mode!r} searches page text, and this index's model reads the query "
                    "image as a page: use mode 'auto', 'exact' or 'two_stage'"
                )
            query = read.text if read.read_by == "ocr" else read.vectors
        if query is None:
            raise ValueError("nothing to search with: give the query words or image=")
        hits = self._search(query, k, filter, mode, alpha, text_k, fts_syntax)
        for hit in hits:
            hit.query_ocr = read.text if read is not None and read.read_by == "ocr" else None
        if neighbours:
            self._attach_context(hits, neighbours)
        return hits

    def read_image(
        self, image: QueryImage, *, compress: bool = True, ocr: PageOcr | None = None
    ) -> ImageQuery:
        """A query image made ready to search (see `search`): its page vectors, or its words
        read by OCR for a text-encoder index. Pass the result to ``search(image=...)`` to report
        how the image was read even when nothing matches."""
        picture = load_query_image(image)
        with self._load_lock:
            encoder = self.encoder
            if self._twin is None or self._twin[0] is not encoder:
                self._twin = (encoder, query_twin(encoder))
            twin = self._twin[1]  # its own processor: pages may encode on another thread
        with self._query_lock:
            return encode_query_image(picture, twin, self.compressor, compress=compress, ocr=ocr)

    def _attach_context(self, hits: list[Hit], n: int) -> None:
        """Each hit's `context`: its document's pages within ``n`` of it, by their page ids
        (no further than the document's last page, however large ``n`` is)."""
        last = {doc_id: self._last_page(doc_id) for doc_id in {hit.doc_id for hit in hits}}
        around = {
            hit.page_id: [
                default_page_id(hit.doc_id, number)
                for number in range(
                    max(1, hit.page_no - n), min(hit.page_no + n, last[hit.doc_id]) + 1
                )
                if number != hit.page_no
            ]
            for hit in hits
        }
        wanted = list(dict.fromkeys(i for ids in around.values() for i in ids))
        records = {r.page_id: r for r in self.store.get(wanted, missing="skip")}
        for hit in hits:
            found = [records[i] for i in around[hit.page_id] if i in records]
            hit.context = [self._hit(r, score=float("nan")) for r in found]

    def _last_page(self, doc_id: str) -> int:
        """The highest page number a document can have (its page count, else the index's)."""
        record = self.store.document(doc_id)
        return record.n_pages if record is not None and record.n_pages else self.store.count()

    def _search(
        self,
        query: str | np.ndarray,
        k: int,
        filter: dict[str, Any] | None,
        mode: SearchMode,
        alpha: float | None,
        text_k: int | None,
        fts_syntax: bool,
    ) -> list[Hit]:
        """One search by words or query vectors (see `search`)."""
        if isinstance(query, str) and not query.strip():
            raise ValueError("empty query: give the words or question to search for")
        text = query if isinstance(query, str) else None
        if alpha is not None and mode != "hybrid":
            raise ValueError(f"alpha weighs the two sides of mode='hybrid', not mode={mode!r}")
        if text_k is not None and mode != "hybrid":
            raise ValueError(
                f"text_k is how many text candidates mode='hybrid' fuses, not {mode!r}"
            )
        if fts_syntax and mode not in ("text", "hybrid"):
            raise ValueError(
                f"fts_syntax reads the query text of mode='text' or 'hybrid', not {mode!r}"
            )
        if mode in ("text", "hybrid") and text is None:
            raise ValueError(f"mode={mode!r} searches the page text: give the query as a string")
        if mode == "text":
            results = self.store.search(
                None, k, filter=filter, mode="text", text=text, fts_syntax=fts_syntax
            )
            return [self._hit(r) for r in results]
        request = _SearchRequest(query, k, filter, mode, alpha, text_k, fts_syntax)
        vectors, labels, results = self._batcher(request)
        hits = [self._hit(r) for r in results]
        records = {r.page_id: r for r in self.store.get([h.page_id for h in hits], missing="skip")}
        for hit in hits:
            if hit.page_id in records:
                hit._explanation = self._explain_record(vectors, records[hit.page_id], labels)
                hit.regions = hit._explanation.regions
        return hits

    def _search_batch(self, requests: list[_SearchRequest]) -> list[_Searched | BaseException]:
        """Concurrent searches as one batch: the text queries in one encoder forward, then one
        `search_many` per group of requests with the same options (see `microbatch`)."""
        encoded = self._encode_many([r.query for r in requests])
        answers: list[_Searched | BaseException] = []
        groups: dict[Any, list[int]] = {}
        for i, found in enumerate(encoded):
            answers.append(found if isinstance(found, BaseException) else (*found, []))
            if not isinstance(found, BaseException):
                groups.setdefault(requests[i].group_key(i), []).append(i)
        for members in groups.values():
            vectors = [answers[i][0] for i in members]  # type: ignore[index]
            searched = self._search_group(requests, members, vectors)
            for i, results in zip(members, searched, strict=True):
                answer = answers[i]
                if isinstance(results, BaseException) or isinstance(answer, BaseException):
                    answers[i] = results if isinstance(results, BaseException) else answer
                else:
                    answers[i] = (answer[0], answer[1], results)
        return answers

    def _search_group(
        self, requests: list[_SearchRequest], members: list[int], vectors: list[np.ndarray]
    ) -> list[list[SearchResult] | BaseException]:
        """One `search_many` for requests that share their options; when it fails, each
        request alone, so an error reaches only the caller whose query caused it."""
        first = requests[members[0]]
        texts = [str(requests[i].query) for i in members] if first.mode == "hybrid" else None
        try:
            return list(
                self.store.search_many(
                    vectors,
                    first.k,
                    filter=first.filter,
                    mode=first.mode,
                    texts=texts,
                    alpha=first.alpha,
                    text_k=first.text_k,
                    fts_syntax=first.fts_syntax,
                )
            )
        except Exception as error:
            if len(members) == 1:
                return [error]
        return [
            self._search_group(requests, [i], [v])[0] for i, v in zip(members, vectors, strict=True)
        ]

    def _encode_many(
        self, queries: list[str | np.ndarray]
    ) -> list[tuple[np.ndarray, list[str] | None] | BaseException]:
        """(vectors, token labels) per query: the text ones in one forward (one at a time when
        that fails, so an error reaches only the caller whose query caused it)."""
        texts = [q for q in queries if isinstance(q, str)]
        with self._query_lock:
            try:
                encoder = self.query_encoder
            except Exception as error:
                return [error if isinstance(q, str) else (q, None) for q in queries]
            vectors: Iterator[np.ndarray | BaseException]
            try:
                vectors = iter(encoder.encode_queries(texts)) if texts else iter(())
            except Exception:
                if len(texts) == 1:
                    raise
                vectors = iter(self._encode_one_by_one(encoder, texts))
            out: list[tuple[np.ndarray, list[str] | None] | BaseException] = []
            for query in queries:
                if not isinstance(query, str):
                    out.append((query, None))
                    continue
                found = next(vectors)
                if isinstance(found, BaseException):
                    out.append(found)
                else:
                    out.append((found, query_token_labels(encoder, query, len(found))))
            return out

    @staticmethod
    def _encode_one_by_one(encoder: Any, texts: list[str]) -> list[np.ndarray | BaseException]:
        out: list[np.ndarray | BaseException] = []
        for text in texts:
            try:
                out.append(encoder.encode_queries([text])[0])
            except Exception as error:
                out.append(error)
        return out

    def explain(self, query: str | np.ndarray, doc_id: str, page_no: int) -> Explanation:
        """How `query` scores against one stored page, token by token, placed on the page."""
        found = self._encode_many([query])[0]
        if isinstance(found, BaseException):
            raise found
        vectors, labels = found
        records = self.store.get([default_page_id(doc_id, page_no)], missing="skip")
        if not records:
            raise KeyError(f"no page {page_no} of document {doc_id!r} in {self.path}")
        return self._explain_record(vectors, records[0], labels)

    def _explain_record(
        self, query: np.ndarray, record: PageRecord, labels: list[str] | None
    ) -> Explanation:
        layout = self.assets.load_layout(record.doc_id, record.page_no, record.page_id)
        return explain_vectors(
            query,
            record.vectors,
            layout,
            labels=labels,
            page_id=record.page_id,
            doc_id=record.doc_id,
            page_no=record.page_no,
        )

    def score_pages(self, query: str | np.ndarray, pages: Sequence[str | Page]) -> list[float]:
        """MaxSim of ``query`` against each page, in order: for reranking another retriever's
        hits. A page id scores the page's stored compressed vectors (no model runs for it); a
        `Page` (rendered by the caller, e.g. `open_document(path).page(n)`) is encoded and
        compressed here with the index's encoder and compressor, as `add` would store it, and
        is not stored. A page with nothing to encode (no text for a text encoder) scores 0.

        An unknown page id raises `KeyError` naming it; an empty query `ValueError`."""
        if isinstance(query, str) and not query.strip():
            raise ValueError("empty query: give the words or question to search for")
        pages = list(pages)
        ids = [p for p in pages if isinstance(p, str)]
        records = {r.page_id: r for r in self.store.get(ids, missing="skip")}
        unknown = [i for i in ids if i not in records]
        if unknown:
            shown = ", ".join(repr(i) for i in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            raise KeyError(f"no page {shown}{more} in {self.path}; pass it as a rendered Page")
        found = self._encode_many([query])[0]
        if isinstance(found, BaseException):
            raise found
        vectors = found[0]
        fresh = self._page_vectors([p for p in pages if not isinstance(p, str)])
        return [
            maxsim(vectors, records[p].vectors if isinstance(p, str) else next(fresh))
            for p in pages
        ]

    def _page_vectors(self, pages: list[Page]) -> Iterator[np.ndarray]:
        """The compressed vectors `add` would store for each page (empty for a page without
        tokens), encoded in batches of `batch_size`."""
        indexer = self.indexer()
        for start in range(0, len(pages), self.batch_size):
            chunk = pages[start : start + self.batch_size]
            encodings, compressed = indexer.encode(chunk)
            packed = iter(compressed)
            for encoding in encodings:
                if encoding.n_tokens == 0:
                    yield np.zeros((0, self.config.dim), dtype=np.float32)
                else:
                    yield next(packed).vectors

    def get(self, page_ids: Sequence[str]) -> list[Hit]:
        """Stored pages by id, in the order asked; unknown ids are left out. Scores are NaN."""
        records = self.store.get(list(page_ids), missing="skip")
        return [self._hit(r, score=float("nan")) for r in records]

    def _hit(self, result: Any, score: float | None = None) -> Hit:
        """A `Hit` from a search result, or from a stored `PageRecord` with the given score."""
        metadata = dict(result.metadata or {})
        return Hit(
            doc_id=result.doc_id,
            page_no=result.page_no,
            score=float(result.score) if score is None else score,
            source=metadata.get("source"),
            metadata=metadata,
            text=result.text,
            page_id=result.page_id,
            components=getattr(result, "components", None),
            _assets=self.assets,
            _image_ref=result.image_ref,
        )

    def documents(self) -> list[DocumentRecord]:
        """Every document row of the index, in document id order."""
        return self.store.documents()

    def page_image(self, doc_id: str, page_no: int) -> Image.Image:
        """One page's image: stored, or re-rendered from the source (reference-only indexes)."""
        records = self.store.get([default_page_id(doc_id, page_no)], missing="skip")
        if not records:
            raise KeyError(f"no page {page_no} of document {doc_id!r} in {self.path}")
        record = records[0]
        return self.assets.load(record.image_ref, record.metadata.get("source"), page_no)

    def page_layout(self, doc_id: str, page_no: int) -> dict[str, Any] | None:
        """Which source patches a stored page kept (or merged), for `vrag show`."""
        return self.assets.load_layout(doc_id, page_no)

    def verify(self) -> VerifyReport:
        """Check the store end to end (see `MultiVectorStore.verify`)."""
        return self.store.verify()

    def info(self, *, measure_recall: bool = False) -> dict[str, Any]:
        """Model, compressor, counts, size and the candidate index's parameters (from the
        recorded config, no model load); with ``measure_recall`` also its recall@10 against
        exact search on sampled stored pages."""
        docs = self.documents()
        store = self.store
        return {
            "path": str(self.path),
            "model_id": self.model_id,
            "dim": self.config.dim,
            "compressor": self.config.compressor,
            "compressor_params": self.config.compressor_params,
            "documents": len(docs),
            "incomplete_documents": sum(not d.complete for d in docs),
            "pages": self.store.count(),
            "images": self.config.images.to_dict(),
            "size_mb": round(_folder_size(self.path) / 2**20, 3),
            "vrag_version": self.config.vrag_version,
            "candidate_index": (
                store.index_info(measure_recall=measure_recall)
                if isinstance(store, OptimizableStore)
                else None
            ),
            # an index without fp16 vectors keeps fp16 rows until its codes are trained
            "staged_vectors": (
                store.staged_vectors() if isinstance(store, OptimizableStore) else 0
            ),
            "vector_layout": (store.vector_layout() if isinstance(store, LayoutStore) else None),
        }

    def optimize(
        self,
        *,
        codes: str | None = None,
        retrain: bool = False,
        recall_target: float | None = None,
        fp16: bool | None = None,
    ) -> dict[str, Any]:
        """Compact the store and (re)train its candidate index; returns the index's parameters
        (``retrain``, ``recall_target`` and ``fp16``: see `LocalStore.optimize`;
        ``fp16=False`` converts the index to codes only, in place)."""
        if not isinstance(self.store, OptimizableStore):
            raise VisualIndexError(
                f"{self.path}: this store backend keeps no candidate index to optimize"
            )
        if fp16 is not None and not isinstance(self.store, LayoutStore):
            raise VisualIndexError(f"{self.path}: only the embedded store can drop fp16 vectors")
        kwargs: dict[str, Any] = {} if fp16 is None else {"fp16": fp16}
        details = self.store.optimize(
            codes=codes, retrain=retrain, recall_target=recall_target, **kwargs
        )
        self.config = IndexConfig.from_dict(self.store.config)  # the codes may have changed
        return details

    # ----------------------------------------------------------------- writing
    def delete(self, doc_id: str) -> int:
        """Delete a document's pages (and stored images); returns how many pages went."""
        removed = self.store.delete(doc_id=doc_id)
        self.assets.remove_document(doc_id)
        return removed

    def delete_pages(self, page_ids: Sequence[str]) -> int:
        """Delete pages by id with their stored files; a document left without pages goes too.

        Unknown ids are ignored. Returns how many pages were deleted."""
        records = self.store.get(list(page_ids), missing="skip")
        if not records:
            return 0
        removed = self.store.delete(page_ids=[r.page_id for r in records])
        for record in records:
            self.assets.remove_page(record.doc_id, record.page_no, record.image_ref, record.page_id)
        for doc_id in {r.doc_id for r in records}:
            if not self.store.page_ids(doc_id):
                self.delete(doc_id)
        return removed

    def clear(self) -> int:
        """Delete every document and page; returns how many pages were deleted."""
        removed = sum(self.delete(d.doc_id) for d in self.documents())
        leftover = self.store.page_ids()
        return removed + (self.store.delete(page_ids=leftover) if leftover else 0)

    def upsert_pages(
        self,
        pages: Sequence[Page],
        *,
        page_ids: Sequence[str] | None = None,
        metadata: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        """Encode, compress and store rendered pages under the given ids, replacing existing ones.

        For adapters (LlamaIndex nodes, LangChain documents) whose entries carry their own ids and
        metadata; files go through `add`, which also skips unchanged documents and resumes.
        Default ids are ``<doc_id>:<page_no>``. Commits one atomic batch per `batch_size` pages.
        """
        pages = list(pages)
        ids = list(page_ids) if page_ids is not None else [p.page_id for p in pages]
        metas = list(metadata) if metadata is not None else [{} for _ in pages]
        if not len(ids) == len(metas) == len(pages):
            raise ValueError(
                f"upsert_pages: {len(pages)} pages, {len(ids)} ids, {len(metas)} metadata dicts"
            )
        return self.indexer().upsert(pages, ids, metas)

    def upsert_vectors(
        self,
        vectors: Sequence[np.ndarray],
        *,
        page_ids: Sequence[str],
        doc_ids: Sequence[str],
        metadata: Sequence[dict[str, Any]] | None = None,
        texts: Sequence[str | None] | None = None,
    ) -> list[str]:
        """Store ready-made multi-vectors ``[n, dim]`` as one-page entries, replacing existing ids.

        For adapters that embed texts with their own model (a LangChain `Embeddings`): nothing is
        encoded or compressed here, and each entry is page 1 of its own complete document."""
        n = len(vectors)
        metas = list(metadata) if metadata is not None else [{} for _ in range(n)]
        bodies = list(texts) if texts is not None else [None] * n
        if not len(page_ids) == len(doc_ids) == len(metas) == len(bodies) == n:
            raise ValueError(
                f"upsert_vectors: {n} vectors, {len(page_ids)} ids, {len(doc_ids)} doc ids, "
                f"{len(metas)} metadata dicts, {len(bodies)} texts"
            )
        records = [
            PageRecord(page_id=i, doc_id=d, page_no=1, vectors=v, metadata=m, text=t)
            for i, d, v, m, t in zip(page_ids, doc_ids, vectors, metas, bodies, strict=True)
        ]
        documents = [DocumentRecord(doc_id=d, n_pages=1, complete=True) for d in doc_ids]
        self.store.upsert(records, documents)
        return list(page_ids)

    def add(
        self,
        items: str | Path | Iterable[str | Path] | Sequence[Page],
        metadata: dict[str, Any] | None = None,
        *,
        progress: bool = True,
        ocr: str | PageOcr = "auto",
        ray: bool | str | RayOptions | None = None,
        passwords: Mapping[str, str] | None = None,
    ) -> AddReport:
        """Index files, folders or already-rendered `Page`s; unchanged documents are skipped.

        Returns a report of what was indexed, skipped and failed (with reasons); one bad file
        never stops the rest. `ocr` ("auto", "always", "never" or a `PageOcr`) gives pages
        without a text layer their OCR'd text (see `vrag_compress.ingest.ocr`). Metadata a filter
        could not select (a ``$`` key, a built-in field name, NaN) raises `UserInputError` up
        front.

        `ray` renders, encodes and compresses files on a Ray cluster (the ``[ray]`` extra):
        True for the cluster Ray finds (or a local one), an address ("host:6379",
        "ray://host:10001"), or `RayOptions`; commits stay here, so the store is the same as
        a single-process one (see `vrag_compress.distributed`).

        `passwords` opens protected PDFs: ``{file name or path: password}`` (see
        `vrag_compress.ingest.passwords`); they are used to open the files, never stored.
        """
        extra = check_user_metadata(metadata or {})  # before any page is rendered
        page_ocr = ocr if isinstance(ocr, PageOcr) else PageOcr(ocr)
        page_ocr.prepare()  # `always` without an OCR engine fails here, before any work
        if self.reads_page_text:
            page_ocr.check_text_sources(items, self.model_id)  # scans need OCR: say so now
        if ray is not None and ray is not False:
            from vrag_compress.distributed import RayOptions, add_on_ray

            if isinstance(ray, RayOptions):
                options = ray
            else:
                options = RayOptions(address=None if ray is True else ray)
            return add_on_ray(
                self.indexer(passwords),
                items,
                extra,
                progress=progress,
                page_ocr=page_ocr,
                options=options,
            )
        return self.indexer(passwords).add(items, extra, progress=progress, page_ocr=page_ocr)

    @property
    def reads_page_text(self) -> bool:
        """Whether the encoder reads page text (MiniLM) rather than page images, known without
        loading it: such an index has no patches to draw a heatmap on."""
        if self._encoder is not None:
            return isinstance(self._encoder, ReadsPageText)
        return is_text_model(self.model_id)

    def indexer(self, passwords: Mapping[str, str] | None = None) -> Indexer:
        """The index's write path as an `Indexer`, for callers that drive indexing in steps
        rather than through `add`: plan the documents (`Indexer.plan`), encode pages elsewhere
        (`Indexer.process`, as the Ray actors do) and commit them through this one writer
        (`Indexer.write`, `Indexer.finish`), or add pages (`Indexer.add`, `Indexer.upsert`).
        Everything it commits goes through the index's store and page files, so searches of
        this index find it. ``passwords`` opens protected PDFs, as in `add`. For plain
        indexing, call `add`."""
        return Indexer(
            self.store,
            self.assets,
            lambda: self.encoder,
            lambda: self.compressor,
            self.delete,
            model_id=self.model_id,
            batch_size=self.batch_size,
            dpi=self.dpi,
            renderer=self.renderer,
            passwords=passwords,
        )


def _check_rebuildable(compressor: Compressor) -> None:
    """The index records the compressor's name and params; refuse one that `open` could not
    rebuild as the same class."""
    from vrag_compress.compress.registry import COMPRESSORS

    if COMPRESSORS.get(compressor.name) is not type(compressor):
        raise VisualIndexError(
            f"{type(compressor).__name__} (name {compressor.name!r}) is not the class registered "
            "under that name; register it with register_compressor so the index can rebuild it "
            "when it is opened again"
        )


def _outside_module(compressor: Compressor) -> str | None:
    """The module of a compressor class defined outside vrag_compress (recorded in the config)."""
    module = type(compressor).__module__
    return None if module.split(".")[0] == "vrag_compress" else module


def _encoder_info(encoder: Encoder) -> dict[str, Any]:
    info = getattr(encoder, "info", None)
    if callable(info):
        return info()
    return {
        "model_id": _model_config_name(encoder),
        "dim": encoder.dim,
        "n_layers": encoder.n_layers,
    }


def _folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
