"""Records, errors and the `MultiVectorStore` protocol every store backend implements.

The protocol is what `VisualIndex` talks to, so a scale-out backend (e.g. Qdrant) can replace the
embedded `LocalStore` without touching the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

# auto, exact and two_stage rank by MaxSim (visual); text ranks by BM25 over the page text;
# hybrid fuses both (the visual side searched as auto).
SearchMode = Literal["auto", "exact", "two_stage", "text", "hybrid"]


class StoreError(Exception):
    """Any store failure: bad input, bad state, bad files."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """No store at the given path."""


class StoreExistsError(StoreError, FileExistsError):
    """`create` was pointed at a path that already holds something."""


class StoreLockedError(StoreError):
    """Another process (or another handle in this one) holds the writer lock."""


class StoreReadOnlyError(StoreError):
    """A write was attempted through a store opened with ``readonly=True``."""


class StoreClosedError(StoreError):
    """The store handle was used after `close()`."""


class StoreConfigMismatch(StoreError):
    """The stored index configuration differs from what the caller expects.

    ``differences`` maps each differing key to ``(stored, expected)``.
    """

    def __init__(self, path: str, differences: dict[str, tuple[Any, Any]]):
        self.path = path
        self.differences = differences
        detail = "; ".join(
            f"{k}: stored {s!r}, expected {e!r}" for k, (s, e) in differences.items()
        )
        super().__init__(
            f"store {path} was built with a different configuration ({detail}); "
            "open it with a matching model/dimension or build a new store"
        )


class StoreCorruptError(StoreError):
    """A catalog or segment file is damaged; ``file`` names it."""

    def __init__(self, file: str, detail: str):
        self.file = file
        self.detail = detail
        super().__init__(
            f"store file {file} is damaged: {detail}. Run verify() for a full report; "
            "restore it from a backup or rebuild the store"
        )


class PageNotFoundError(StoreError, KeyError):
    """`get` was asked for page ids the store does not hold."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DuplicatePageError(StoreError):
    """`add` was given page ids that already exist (use `upsert`) or repeats within one call."""


@dataclass
class PageRecord:
    """One stored page: its multi-vector embedding ([k, D] float32; stored as fp16) and metadata."""

    page_id: str
    doc_id: str
    page_no: int
    vectors: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)
    image_ref: str | None = None
    text: str | None = None


@dataclass
class DocumentRecord:
    """One source document; ``complete`` marks that all its pages were stored."""

    doc_id: str
    source: str | None = None
    content_hash: str | None = None
    n_pages: int | None = None
    complete: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchResult:
    """One hit: ids, score and the page's stored metadata.

    The score is MaxSim (visual modes), BM25 (``text``) or the fused score (``hybrid``). In the
    text and hybrid modes ``components`` maps each side that found the page ("visual", "text")
    to its ``rank`` and ``score`` there."""

    page_id: str
    doc_id: str
    page_no: int
    score: float
    metadata: dict[str, Any]
    image_ref: str | None = None
    text: str | None = None
    components: dict[str, dict[str, float]] | None = None

    @property
    def found_by(self) -> list[str]:
        """The sides that found this page (empty for the visual-only modes)."""
        return sorted(self.components or {}, reverse=True)


@dataclass
class VerifyReport:
    """Outcome of `verify()`: ``ok`` is False when ``problems`` is non-empty.

    ``notes`` lists harmless findings (torn tails left by a crash, orphan files a writer removes).
    """

    ok: bool
    problems: list[str]
    pages: int
    documents: int = 0
    segments: int = 0
    live_bytes: int = 0
    dead_bytes: int = 0
    notes: list[str] = field(default_factory=list)


@runtime_checkable
class MultiVectorStore(Protocol):
    """Stores multi-vector pages and answers MaxSim queries over them.

    Exactly what `VisualIndex`, the CLI, `vrag migrate` and the framework integrations call, so
    any backend that implements it (the embedded `LocalStore`, `QdrantStore`) can serve an index.
    A store is a context manager that closes itself.
    """

    readonly: bool

    @property
    def closed(self) -> bool:
        """Whether `close` has run (every other call then raises `StoreClosedError`)."""
        ...

    @property
    def config(self) -> dict[str, Any]:
        """The config recorded at creation (JSON): ``dim``, ``model_id`` and the caller's keys."""
        ...

    @property
    def library_version(self) -> str:
        """The vrag_compress version that created the store."""
        ...

    def update_config(self, **changes: Any) -> None:
        """Merge ``changes`` into the stored config (``dim`` cannot change once pages exist)."""
        ...

    def add(self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord] = ()) -> None:
        """Store new pages (and upsert document rows) atomically; existing page ids are an error."""
        ...

    def upsert(self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord] = ()) -> None:
        """Like `add`, but pages whose id exists replace the stored ones."""
        ...

    def put_document(self, doc: DocumentRecord) -> None:
        """Insert or replace one document row."""
        ...

    def delete(self, *, doc_id: str | None = None, page_ids: Sequence[str] | None = None) -> int:
        """Delete a document's pages and its row, or the given pages; returns pages removed."""
        ...

    def get(self, page_ids: Sequence[str], *, missing: str = "error") -> list[PageRecord]:
        """Pages in the order asked; unknown ids raise `PageNotFoundError` unless
        ``missing="skip"``, which leaves them out."""
        ...

    def count(self) -> int:
        """How many pages the store holds."""
        ...

    def documents(self) -> list[DocumentRecord]:
        """Every document row, in document id order."""
        ...

    def document(self, doc_id: str) -> DocumentRecord | None:
        """One document row, or None when the store has no such document."""
        ...

    def page_ids(self, doc_id: str | None = None) -> list[str]:
        """All page ids (sorted), or a document's in page order."""
        ...

    def search(
        self,
        query: np.ndarray | None,
        k: int = 5,
        *,
        filter: dict[str, Any] | None = None,
        mode: SearchMode = "auto",
        text: str | None = None,
        alpha: float | None = None,
        text_k: int | None = None,
        fts_syntax: bool = False,
    ) -> list[SearchResult]:
        """Top-k pages, best first; ties by page_id ascending. By MaxSim in the visual modes
        (``auto``, ``exact``, ``two_stage``), by BM25 of ``text`` (the query's words) over the
        page text in ``text`` mode (``query`` may be None), fused in ``hybrid`` mode: reciprocal
        rank fusion, or min-max normalised ``alpha * visual + (1 - alpha) * text`` when
        ``alpha`` is given. ``text_k`` is how many text candidates hybrid fuses (default
        max(k, 50)); ``fts_syntax`` reads ``text`` as a raw full-text query (phrases, NEAR,
        prefix*) instead of plain words.

        One query of `search_many`: the stores subclass this protocol and inherit it."""
        return self.search_many(
            None if query is None else [query],
            k,
            filter=filter,
            mode=mode,
            texts=None if text is None else [text],
            alpha=alpha,
            text_k=text_k,
            fts_syntax=fts_syntax,
        )[0]

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
        """`search` for several queries (or texts) in one call; one result list per query."""
        ...

    def compact(self) -> None:
        """Reclaim the space of deleted pages (a backend without such space does nothing)."""
        ...

    def verify(self) -> VerifyReport:
        """Check the stored data end to end; problems are reported, never repaired."""
        ...

    def close(self) -> None:
        """Release the store (files, connections, the writer lock); closing twice is a no-op."""
        ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@runtime_checkable
class OptimizableStore(Protocol):
    """What a store with its own candidate index adds (the embedded store): `VisualIndex.info`
    reports it and `vrag optimize` retrains it; other backends index candidates themselves."""

    def index_info(self, *, measure_recall: bool = False) -> dict[str, Any] | None:
        """The candidate index's parameters and size (None without one); with
        ``measure_recall``, also its recall@10 against exact search."""
        ...

    def optimize(
        self, *, codes: str | None = None, retrain: bool = False, recall_target: float | None = None
    ) -> dict[str, Any]:
        """Compact, then (re)train the candidate index; returns its parameters."""
        ...

    def staged_vectors(self) -> int:
        """Vectors kept as fp16 rows until a codes-only store's codes are trained (else 0)."""
        ...


@runtime_checkable
class LayoutStore(Protocol):
    """A store that chooses how it keeps its vectors (fp16 rows, residual codes or both, by
    size: store/local/layout.py) and can drop the fp16 rows in place (the embedded store)."""

    def vector_layout(self) -> dict[str, Any]:
        """The layout as `vrag info` shows it: ``rule``, ``fp16`` and ``codes``."""
        ...


POINTER_NAME = "store.json"  # in an index folder whose vectors live elsewhere


class StorePointer(str):
    """A store URL read from an index folder's store.json rather than given by the user.

    Whoever wrote the folder chose it, so a backend sends credentials from the environment to
    its host only when the user named that host too (see `qdrant.access.api_key_for`)."""

    folder: Path

    def __new__(cls, url: str, folder: Path) -> StorePointer:
        """The URL, remembering the index folder whose store.json named it."""
        pointer = super().__new__(cls, url)
        pointer.folder = folder
        return pointer
