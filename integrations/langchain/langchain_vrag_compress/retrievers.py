"""`CompressedColPaliRetriever`: a `VisualIndex` as a LangChain retriever (sync and async)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field
from vrag_compress import Encoder, SearchMode, VisualIndex

from langchain_vrag_compress._documents import hit_to_document

# LangChain forwards every invoke kwarg; `verbose` is its own and means nothing to a search.
_IGNORED_KWARGS = frozenset({"verbose"})
_FUSION_KWARGS = frozenset({"alpha", "text_k"})  # hybrid settings (also in search_kwargs)


class CompressedColPaliRetriever(BaseRetriever):
    """Retrieves document pages by exact MaxSim over a compressed Col* index.

    Each `Document` is one page: `page_content` is the page text, its text layer or the OCR text
    stored at indexing time (empty for a scan indexed without OCR; see `vrag_compress.ingest.ocr`);
    metadata holds `score`, `page` (1-based), `doc_id`, `page_id`, `source`, `filename`,
    `image_path`, the metadata given at indexing time and, with `include_image_base64`,
    `image_base64` + `image_mime_type` ready for a multimodal prompt.

    `k`, `filter` and `include_image_base64` are fields and can be overridden per call:
    ``retriever.invoke("query", k=2, filter={"year": {"$gte": 2020}})``.

    `search_type` "similarity" ranks by MaxSim (with `search_mode`), "text" by BM25 over the
    page text, "hybrid" fuses both (reciprocal rank fusion, or normalised scores weighted by
    `search_kwargs["alpha"]`, 0 text only .. 1 visual only; `search_kwargs["text_k"]` text
    candidates); text and hybrid documents carry `search_components` in their metadata.

    `neighbours` N also returns, after each page, the N pages before and after it in its
    document (each page once, in page order, metadata ``neighbour_of`` naming the page they came
    with, no score): `create_visual_qa_chain` then shows the model a table that runs over a
    page break whole, and cites whichever page the answer came from.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: VisualIndex
    k: int = Field(default=5, ge=1)
    filter: dict[str, Any] | None = None
    include_image_base64: bool = False
    image_format: str = "jpeg"
    image_max_side: int | None = 1024
    search_mode: SearchMode = "auto"
    search_type: Literal["similarity", "hybrid", "text"] = "similarity"
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    neighbours: int = Field(default=0, ge=0)

    @classmethod
    def from_path(
        cls, path: str | Path, *, encoder: Encoder | None = None, **kwargs: Any
    ) -> CompressedColPaliRetriever:
        """Open an index folder read-only (no writer lock) and wrap it."""
        index = VisualIndex.open(path, encoder=encoder, readonly=True)
        return cls(index=index, **kwargs)

    def _search(
        self,
        query: str,
        k: int | None = None,
        filter: dict[str, Any] | None = None,
        include_image_base64: bool | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        unknown = set(kwargs) - _IGNORED_KWARGS - _FUSION_KWARGS
        if unknown:
            raise TypeError(
                f"CompressedColPaliRetriever got unknown search arguments {sorted(unknown)}; "
                "it accepts k, filter, include_image_base64, alpha and text_k"
            )
        options = self.search_kwargs | {n: kwargs[n] for n in _FUSION_KWARGS & set(kwargs)}
        k = options.pop("k", self.k) if k is None else k
        filter = options.pop("filter", self.filter) if filter is None else filter
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        mode: SearchMode = self.search_mode
        if self.search_type == "hybrid":
            mode = "hybrid"
        elif self.search_type == "text":
            mode = "text"
        if self.search_type != "hybrid" and options:
            raise ValueError(
                f"{sorted(options)} weigh hybrid search; set search_type='hybrid' to use them"
            )
        hits = self.index.search(
            query, k=k, filter=filter, mode=mode, neighbours=self.neighbours, **options
        )
        with_image = (
            self.include_image_base64 if include_image_base64 is None else (include_image_base64)
        )
        documents: list[Document] = []
        seen: set[str] = set()
        for hit in hits:
            for page in hit.pages:  # the hit alone unless neighbours were asked for
                if page.page_id in seen:
                    continue
                seen.add(page.page_id)
                document = hit_to_document(
                    page,
                    with_score=page is hit,
                    image_base64=with_image,
                    image_format=self.image_format,
                    image_max_side=self.image_max_side,
                )
                if page is not hit:
                    document.metadata["neighbour_of"] = hit.page_id
                documents.append(document)
        return documents

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return self._search(query, **kwargs)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        # Encoding and MaxSim are CPU/GPU-bound: keep them off the event loop.
        return await run_in_executor(None, self._search, query, **kwargs)
