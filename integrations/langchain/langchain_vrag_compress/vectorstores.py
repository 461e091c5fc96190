"""`VragVectorStore`: a `VisualIndex` behind LangChain's `VectorStore` interface.

Pages are multi-vectors scored by MaxSim. Text entries fit the same store: with a text
`Embeddings` object each text (and query) is a one-token multi-vector, so MaxSim reduces to the
cosine similarity of ordinary dense retrieval; without one, texts go through the Col* model's
text tower. Page images always go through the index's Col* encoder and compressor.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever
from PIL import Image
from vrag_compress import (
    Hit,
    Page,
    PageEncoding,
    SearchMode,
    VisualIndex,
    VisualIndexError,
    get_compressor,
    open_document,
)

from langchain_vrag_compress._documents import (
    KIND_KEY,
    TEXT_KIND,
    entry_doc_id,
    hit_to_document,
)

log = logging.getLogger(__name__)
# LangChain forwards every invoke kwarg; `verbose` is its own and means nothing to a search.
_IGNORED_KWARGS = frozenset({"verbose"})

ImageInput = str | Path | Image.Image


class VragStoreError(ValueError):
    """A `VragVectorStore` call that cannot work as asked; the message says how to fix it."""


class EmbeddingsEncoder:
    """Adapts a LangChain text `Embeddings` to the `Encoder` protocol: one vector per text.

    It lets an index be created for text embeddings; it cannot encode page images.
    """

    n_layers = 0

    def __init__(self, embedding: Embeddings) -> None:
        self.embedding = embedding
        self.model_id = embeddings_model_id(embedding)
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        """The embedding width, probed once with a short query."""
        if self._dim is None:
            self._dim = int(len(self.embedding.embed_query("dimension probe")))
        return self._dim

    def encode_pages(
        self, images: list[Image.Image], *, with_stats: bool = False
    ) -> list[PageEncoding]:
        """Refused: a text embedding cannot encode page images (the error says what to use)."""
        raise VragStoreError(
            f"this store embeds text with {self.model_id}, which cannot encode page images; "
            "create the store on a VisualIndex built with a Col* model "
            "(VragVectorStore(index=VisualIndex.create(path, model=...))) to add images"
        )

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        """Each query embedded as a one-row multi-vector [1, D], L2-normalised."""
        return [_unit_rows(self.embedding.embed_query(q), f"query {q!r}") for q in queries]

    def encode_texts(self, texts: list[str]) -> list[np.ndarray]:
        """Each text embedded as a one-row multi-vector [1, D], L2-normalised."""
        vectors = self.embedding.embed_documents(texts)
        return [_unit_rows(v, f"text {i}") for i, v in enumerate(vectors)]


def embeddings_model_id(embedding: Embeddings) -> str:
    """The model id an index records for a text `Embeddings` (reopening must match it)."""
    name = getattr(embedding, "model", None) or getattr(embedding, "model_name", None)
    return f"langchain-embeddings:{type(embedding).__name__}" + (f":{name}" if name else "")


def _reject_unknown(method: str, kwargs: dict[str, Any], accepted: str) -> None:
    """A misspelled option (``alpah``) is an error, not a silently different search."""
    unknown = sorted(set(kwargs) - _IGNORED_KWARGS)
    if unknown:
        raise TypeError(f"{method} got unknown keyword arguments {unknown}; it takes {accepted}")


def _unit_rows(vector: Any, what: str) -> np.ndarray:
    """A [M, D] float32 array with unit rows (a flat vector becomes one row)."""
    array = np.atleast_2d(np.asarray(vector, dtype=np.float32))
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if array.ndim != 2 or not np.all(np.isfinite(array)) or np.any(norms == 0):
        raise VragStoreError(f"{what}: embeddings must be finite, non-zero vectors")
    return array / norms


class VragVectorStore(VectorStore):
    """LangChain vector store over a compressed multi-vector `VisualIndex`.

    Build it on an existing index (``VragVectorStore(index)``: texts and queries use the index's
    Col* model), from a model name (``VragVectorStore(model="vidore/colqwen2-v1.0", path=...)``,
    also ``"minilm"`` or ``"auto"``: the index is opened or created with that model), or for text
    embeddings (``VragVectorStore(embedding=emb, path=...)``). With no path the index lives in a
    temporary folder removed on `close`. Ids are page ids: for files
    added with `add_files` they are ``"<doc_id>:<page_no>"``, otherwise the ids you give (or
    fresh UUIDs). Adding an existing id replaces that entry.
    """

    def __init__(
        self,
        index: VisualIndex | None = None,
        *,
        embedding: Embeddings | None = None,
        model: str | None = None,
        path: str | Path | None = None,
        include_image_base64: bool = False,
        image_format: str = "jpeg",
        image_max_side: int | None = 1024,
        search_mode: SearchMode = "auto",
    ) -> None:
        self._embedding = embedding
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._owns_index = index is None
        if index is None and model is not None:
            if embedding is not None:
                raise VragStoreError("give model= (a Col* or minilm model) or embedding=, not both")
            index = VisualIndex.open_or_create(self._folder(path), model=model)
            self._owns_index = True
        self.index = index if index is not None else self._embeddings_index(embedding, path)
        if embedding is not None and self.index.model_id != embeddings_model_id(embedding):
            raise VragStoreError(
                f"the index at {self.index.path} was built with {self.index.model_id!r}; text "
                f"embeddings from {embeddings_model_id(embedding)!r} are not comparable with it. "
                "Pass embedding=None to use the index's own model for texts and queries."
            )
        self.include_image_base64 = include_image_base64
        self.image_format = image_format
        self.image_max_side = image_max_side
        self.search_mode = search_mode

    def _embeddings_index(self, embedding: Embeddings | None, path: str | Path | None) -> Any:
        if embedding is None:
            raise VragStoreError(
                "VragVectorStore needs index= (a VisualIndex), model= (e.g. "
                "'vidore/colqwen2-v1.0', 'minilm' or 'auto') or embedding= (a text Embeddings)"
            )
        encoder = EmbeddingsEncoder(embedding)
        return VisualIndex.open_or_create(
            self._folder(path), encoder=encoder, compressor=get_compressor("identity")
        )

    def _folder(self, path: str | Path | None) -> Path:
        """`path`, or a temporary folder removed on `close`."""
        if path is not None:
            return Path(path)
        self._tmp = tempfile.TemporaryDirectory(prefix="vrag-langchain-")
        return Path(self._tmp.name) / "index"

    @property
    def embeddings(self) -> Embeddings | None:
        """The text `Embeddings` given to this store (None: the index's own encoder embeds)."""
        return self._embedding

    def close(self) -> None:
        """Close the index if this store opened it, and remove a temporary index folder."""
        if self._owns_index:
            self.index.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> VragVectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- embedding
    def _embed_texts(self, texts: list[str]) -> list[np.ndarray]:
        if self._embedding is not None:
            return EmbeddingsEncoder(self._embedding).encode_texts(texts)
        return [
            _unit_rows(v, f"text {i}")
            for i, v in enumerate(self.index.encoder.encode_queries(texts))
        ]

    def _embed_query(self, query: str) -> np.ndarray:
        if not query.strip():
            raise VragStoreError("empty query: give the words or question to search for")
        if self._embedding is not None:
            return _unit_rows(self._embedding.embed_query(query), f"query {query!r}")
        return self.index.encoder.encode_queries([query])[0]

    # ----------------------------------------------------------------- writing
    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        *,
        ids: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed and store texts; returns their ids (given ones kept, missing ones generated)."""
        texts = list(texts)
        metadatas = _per_item(metadatas, len(texts), "metadatas")
        entry_ids = _ids(ids, len(texts))
        if not texts:
            return []
        self.index.upsert_vectors(
            self._embed_texts(texts),
            page_ids=entry_ids,
            doc_ids=[entry_doc_id(i) for i in entry_ids],
            metadata=[{**m, KIND_KEY: TEXT_KIND} for m in metadatas],
            texts=texts,
        )
        return entry_ids

    def add_images(
        self,
        uris: Sequence[ImageInput],
        metadatas: list[dict] | None = None,
        *,
        ids: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Encode page images (files or PIL images) with the index's Col* model and store them."""
        uris = list(uris)
        metadatas = _per_item(metadatas, len(uris), "metadatas")
        entry_ids = _ids(ids, len(uris))
        images = [_load_image(u) for u in uris]  # every input is checked before any write
        pages = [
            Page(entry_doc_id(i), 1, image, None, None)  # type: ignore[arg-type]
            for i, image in zip(entry_ids, images, strict=True)
        ]
        # the file path goes into the metadata as given (a Page `source` would be resolved)
        metadata = [{**m, **_file_metadata(u)} for u, m in zip(uris, metadatas, strict=True)]
        try:
            self.index.upsert_pages(pages, page_ids=entry_ids, metadata=metadata)
        except VisualIndexError as error:  # e.g. an image without visual tokens
            raise VragStoreError(str(error)) from error
        return entry_ids

    def add_files(
        self, paths: str | Path | Sequence[str | Path], metadata: dict[str, Any] | None = None
    ) -> list[str]:
        """Index PDFs / images / folders page by page; returns the page ids they now hold.

        Unchanged files are skipped (their ids are still returned); failures are logged and
        never stop the other files (use `VisualIndex.add` for the full report).
        """
        report = self.index.add(paths, metadata=metadata, progress=False)
        for failure in report.failures:
            log.warning("not indexed: %s", failure)
        ids: list[str] = []
        for doc_id in dict.fromkeys(report.documents_indexed + report.documents_skipped):
            ids += self.index.store.page_ids(doc_id)
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete entries by id (unknown ids are ignored); ``ids=None`` deletes everything."""
        if ids is None:
            self.index.clear()
        else:
            self.index.delete_pages(list(ids))  # a document left empty goes with its images
        return True

    # ----------------------------------------------------------------- reading
    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Entries by id, in the order asked; unknown ids are left out."""
        return [self._document(hit, with_score=False) for hit in self.index.get(list(ids))]

    def _document(self, hit: Hit, *, with_score: bool) -> Document:
        return hit_to_document(
            hit,
            with_score=with_score,
            image_base64=self.include_image_base64,
            image_format=self.image_format,
            image_max_side=self.image_max_side,
        )

    def _search_vectors(
        self, vectors: np.ndarray, k: int, filter: dict[str, Any] | None
    ) -> list[tuple[Document, float]]:
        if self.index.store.count() == 0:
            return []
        hits = self.index.search(vectors, k=k, filter=filter, mode=self.search_mode)
        return [(self._document(h, with_score=False), h.score) for h in hits]

    def similarity_search(
        self, query: str, k: int = 5, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        """Top-k entries by MaxSim, best first (`similarity_search_with_score` without scores)."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def similarity_search_with_score(
        self, query: str, k: int = 5, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Top-k entries with their MaxSim score (a sum over query tokens), best first."""
        return self._search_vectors(self._embed_query(query), k, filter)

    def similarity_search_by_vector(
        self,
        embedding: list[float] | np.ndarray,
        k: int = 5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Search with a dense vector [D] or a multi-vector query [M, D]."""
        vectors = _unit_rows(embedding, "query embedding")
        return [doc for doc, _ in self._search_vectors(vectors, k, filter)]

    def similarity_search_by_image(
        self,
        image: str | Path | Image.Image | bytes,
        k: int = 5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Entries most like a picture (a page, a photo of a form, a figure), best first.

        A Col* index encodes the image as a page; a text-encoder index (minilm) reads its
        words by OCR and searches them as text, and each document's metadata then holds those
        words as ``query_ocr``. An image that is not one, is empty or is too large raises
        `vrag_compress.ImageQueryError` (a ValueError) saying which."""
        found = self.similarity_search_by_image_with_score(image, k, filter, **kwargs)
        return [doc for doc, _ in found]

    def similarity_search_by_image_with_score(
        self,
        image: str | Path | Image.Image | bytes,
        k: int = 5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """`similarity_search_by_image` with each entry's MaxSim (or BM25) score."""
        _reject_unknown("similarity_search_by_image", kwargs, "k and filter")
        if self._embedding is not None:
            raise VragStoreError(
                f"this store embeds text with {embeddings_model_id(self._embedding)}, which "
                "cannot read images; search by image on a store over a Col* or minilm index"
            )
        if self.index.store.count() == 0:
            return []
        mode: SearchMode = "auto" if self.search_mode in ("text", "hybrid") else self.search_mode
        hits = self.index.search(image=image, k=k, filter=filter, mode=mode)
        return [(self._document(h, with_score=False), h.score) for h in hits]

    def _similarity_search_with_relevance_scores(
        self, query: str, k: int = 5, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Relevance in [0, 1]: the MaxSim score averaged over query tokens, mapped from [-1, 1]."""
        vectors = self._embed_query(query)
        results = self._search_vectors(vectors, k, kwargs.get("filter"))
        return [(doc, _relevance(score, len(vectors))) for doc, score in results]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 5,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """`k` entries that are relevant to `query` and different from each other.

        The `fetch_k` best entries by MaxSim are re-ranked greedily by
        ``lambda_mult * relevance - (1 - lambda_mult) * max similarity to those already chosen``;
        relevance is the MaxSim score averaged over query tokens, similarity between two
        entries is their symmetric (Chamfer) MaxSim over their stored vectors, both in [-1, 1].
        """
        return self.max_marginal_relevance_search_by_vector(
            self._embed_query(query), k, fetch_k, lambda_mult, filter, **kwargs
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float] | np.ndarray,
        k: int = 5,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """MMR with a dense query vector [D] or a multi-vector query [M, D]."""
        if not 0.0 <= lambda_mult <= 1.0:
            raise VragStoreError(f"lambda_mult must be in [0, 1], got {lambda_mult}")
        vectors = _unit_rows(embedding, "query embedding")
        if self.index.store.count() == 0 or k < 1:
            return []
        hits = self.index.search(vectors, k=max(k, fetch_k), filter=filter, mode=self.search_mode)
        stored = {r.page_id: r.vectors for r in self.index.store.get([h.page_id for h in hits])}
        relevance = [h.score / len(vectors) for h in hits]
        chosen = _mmr([stored[h.page_id] for h in hits], relevance, k, lambda_mult)
        return [self._document(hits[i], with_score=True) for i in chosen]

    def hybrid_search_with_score(
        self,
        query: str,
        k: int = 5,
        filter: dict[str, Any] | None = None,
        *,
        alpha: float | None = None,
        text_k: int | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """Top-k entries by the fusion of MaxSim and BM25 over the stored text: reciprocal rank
        fusion, or with ``alpha`` (0 text only .. 1 vectors only) normalised score interpolation;
        ``text_k`` text candidates are fused. Each document's metadata holds
        ``search_components``: the rank and score of each side that found it."""
        _reject_unknown("hybrid_search", kwargs, "k, filter, alpha, text_k")
        return self._search_text_modes(query, k, filter, "hybrid", alpha, text_k)

    def hybrid_search(
        self, query: str, k: int = 5, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        """Top-k entries by MaxSim and BM25 fused (`hybrid_search_with_score` without scores)."""
        return [doc for doc, _ in self.hybrid_search_with_score(query, k, filter, **kwargs)]

    def text_search_with_score(
        self, query: str, k: int = 5, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Top-k entries by BM25 over the stored text alone (no embedding is computed)."""
        _reject_unknown("text_search", kwargs, "k, filter")
        return self._search_text_modes(query, k, filter, "text", None, None)

    def text_search(
        self, query: str, k: int = 5, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        """Top-k entries by BM25 over the stored text (`text_search_with_score` without scores)."""
        return [doc for doc, _ in self.text_search_with_score(query, k, filter, **kwargs)]

    def _search_text_modes(
        self,
        query: str,
        k: int,
        filter: dict[str, Any] | None,
        mode: SearchMode,
        alpha: float | None,
        text_k: int | None,
    ) -> list[tuple[Document, float]]:
        if not query.strip():
            raise VragStoreError("empty query: give the words or question to search for")
        if self.index.store.count() == 0:
            return []
        hits = self.index.search(query, k=k, filter=filter, mode=mode, alpha=alpha, text_k=text_k)
        return [(self._document(h, with_score=False), h.score) for h in hits]

    def as_retriever(self, **kwargs: Any) -> VragVectorStoreRetriever:
        """A retriever; ``search_type`` may also be "hybrid" (``search_kwargs``: k, filter,
        alpha, text_k) or "text" (BM25 over the stored text)."""
        tags = kwargs.pop("tags", None) or [*self._get_retriever_tags()]
        return VragVectorStoreRetriever(vectorstore=self, tags=tags, **kwargs)

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | None,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        index: VisualIndex | None = None,
        path: str | Path | None = None,
        model: str | None = None,
        **kwargs: Any,
    ) -> VragVectorStore:
        """A store holding ``texts``: on ``index`` if given, else an index for ``model`` (with
        ``embedding=None``), else a new text-embeddings index."""
        store = cls(index=index, embedding=embedding, model=model, path=path, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store


class VragVectorStoreRetriever(VectorStoreRetriever):
    """LangChain's vector store retriever, plus ``search_type="hybrid"`` and ``"text"``."""

    allowed_search_types: ClassVar[Collection[str]] = (
        *VectorStoreRetriever.allowed_search_types,
        "hybrid",
        "text",
    )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        store = self.vectorstore
        if self.search_type == "hybrid" and isinstance(store, VragVectorStore):
            return store.hybrid_search(query, **(self.search_kwargs | kwargs))
        if self.search_type == "text" and isinstance(store, VragVectorStore):
            return store.text_search(query, **(self.search_kwargs | kwargs))
        return super()._get_relevant_documents(query, run_manager=run_manager, **kwargs)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        if self.search_type in ("hybrid", "text"):  # CPU/GPU-bound: off the event loop
            return await run_in_executor(
                None,
                self._get_relevant_documents,
                query,
                run_manager=run_manager.get_sync(),
                **kwargs,
            )
        return await super()._aget_relevant_documents(query, run_manager=run_manager, **kwargs)


def _chamfer(a: np.ndarray, b: np.ndarray) -> float:
    """Symmetric MaxSim of two multi-vectors with unit rows, in [-1, 1]."""
    sims = np.asarray(a, np.float32) @ np.asarray(b, np.float32).T
    return float((sims.max(axis=1).mean() + sims.max(axis=0).mean()) / 2.0)


def _mmr(
    vectors: list[np.ndarray], relevance: list[float], k: int, lambda_mult: float
) -> list[int]:
    """Greedy maximal marginal relevance over candidates (indices into `vectors`, best first)."""
    chosen: list[int] = []
    redundancy = np.full(len(vectors), -np.inf)  # max similarity to anything chosen so far
    while len(chosen) < min(k, len(vectors)):
        scores = [
            -np.inf
            if i in chosen
            else lambda_mult * relevance[i] - (1 - lambda_mult) * (redundancy[i] if chosen else 0.0)
            for i in range(len(vectors))
        ]
        best = int(np.argmax(scores))
        chosen.append(best)
        for i in range(len(vectors)):
            redundancy[i] = max(redundancy[i], _chamfer(vectors[i], vectors[best]))
    return chosen


def _relevance(score: float, n_query_tokens: int) -> float:
    # fp16 storage can put a perfect match a hair above 1: clip to the documented range.
    return min(1.0, max(0.0, (1.0 + score / n_query_tokens) / 2.0))


def _per_item(metadatas: list[dict] | None, n: int, what: str) -> list[dict]:
    if metadatas is None:
        return [{} for _ in range(n)]
    metadatas = list(metadatas)
    if len(metadatas) != n:
        raise VragStoreError(f"{what} has {len(metadatas)} entries for {n} items; give one each")
    return [dict(m or {}) for m in metadatas]


def _ids(ids: Sequence[str | None] | None, n: int) -> list[str]:
    """The given ids, with missing ones (None) replaced by fresh UUIDs."""
    if ids is None:
        return [str(uuid.uuid4()) for _ in range(n)]
    ids = list(ids)
    if len(ids) != n:
        raise VragStoreError(f"ids has {len(ids)} entries for {n} items; give one each")
    return [str(uuid.uuid4()) if i is None else i for i in ids]


def _load_image(item: ImageInput) -> Image.Image:
    if isinstance(item, Image.Image):
        return item.convert("RGB")
    with open_document(item) as document:
        if document.kind != "image":
            raise VragStoreError(f"{item}: add_images takes image files; index PDFs with add_files")
        return document.page(1).image


def _file_metadata(item: ImageInput) -> dict[str, Any]:
    """``source`` (as given) and ``filename`` of an image file; nothing for a PIL image."""
    if isinstance(item, Image.Image):
        return {}
    return {"source": str(item), "filename": Path(item).name}
