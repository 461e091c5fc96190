"""Input validation for every store call: ids, page numbers, metadata, vectors and queries.

Everything is checked before a single byte is written, so a bad record never leaves a partial
batch behind, and every error names the record and field and says how to fix it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np

from vrag_compress.store.base import (
    DocumentRecord,
    PageRecord,
    SearchMode,
    StoreConfigMismatch,
    StoreError,
)
from vrag_compress.store.user_input import show

MAX_ID_LEN = 1024
MAX_VECTORS_PER_PAGE = 65535  # token labels in the FAISS index reserve 16 bits for the row
FP16_MAX = 65504.0


class StoreInputError(StoreError, ValueError):
    """A record or query that the store refuses; the message says what and where."""


def check_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise StoreInputError(f"{what} must be a non-empty str, got {show(value)}")
    if len(value) > MAX_ID_LEN:
        raise StoreInputError(
            f"{what} is {len(value):,} characters, over the limit of {MAX_ID_LEN:,}: {show(value)}"
        )
    if "\x00" in value:
        raise StoreInputError(f"{what} must not contain NUL characters: {show(value)}")
    return value


def check_optional_str(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise StoreInputError(f"{what} must be a str or None, got {type(value).__name__}")
    return value


def metadata_json(value: Any, what: str) -> str:
    """Canonical JSON for a metadata dict (str keys, finite numbers)."""
    if not isinstance(value, dict):
        raise StoreInputError(f"{what} must be a dict, got {type(value).__name__}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise StoreInputError(f"{what} keys must be str, got {bad[:3]!r}")
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StoreInputError(
            f"{what} must be JSON-serialisable with finite numbers: {exc}"
        ) from exc


def check_vectors(vectors: Any, dim: int, what: str) -> np.ndarray:
    """A [k, dim] finite float array within fp16 range, returned as fp16 for storage."""
    if not isinstance(vectors, np.ndarray):
        raise StoreInputError(f"{what} must be a numpy array, got {type(vectors).__name__}")
    if vectors.dtype.kind != "f":
        raise StoreInputError(f"{what} must be a float array, got dtype {vectors.dtype}")
    if vectors.ndim != 2 or vectors.shape[1] != dim:
        raise StoreInputError(f"{what} must have shape [k, {dim}], got {list(vectors.shape)}")
    if not 1 <= vectors.shape[0] <= MAX_VECTORS_PER_PAGE:
        raise StoreInputError(
            f"{what} must have 1..{MAX_VECTORS_PER_PAGE} rows, got {vectors.shape[0]}; "
            "skip empty pages before storing them"
        )
    if not np.isfinite(vectors).all():
        raise StoreInputError(f"{what} contains NaN or inf")
    if np.abs(vectors).max() > FP16_MAX:
        raise StoreInputError(f"{what} has values beyond the fp16 range (|x| > {FP16_MAX})")
    return vectors.astype("<f2")


def check_page(page: Any, dim: int, index: int) -> PageRecord:
    if not isinstance(page, PageRecord):
        raise StoreInputError(f"pages[{index}] must be a PageRecord, got {type(page).__name__}")
    where = f"pages[{index}] ({page.page_id!r})"
    check_id(page.page_id, f"pages[{index}].page_id")
    check_id(page.doc_id, f"{where}.doc_id")
    if isinstance(page.page_no, bool) or not isinstance(page.page_no, (int, np.integer)):
        raise StoreInputError(f"{where}.page_no must be an int, got {page.page_no!r}")
    if page.page_no < 1:
        raise StoreInputError(f"{where}.page_no must be >= 1 (page numbers are 1-based)")
    check_optional_str(page.image_ref, f"{where}.image_ref")
    check_optional_str(page.text, f"{where}.text")
    return page


def check_document(doc: Any, index: int | None = None) -> DocumentRecord:
    where = "document" if index is None else f"documents[{index}]"
    if not isinstance(doc, DocumentRecord):
        raise StoreInputError(f"{where} must be a DocumentRecord, got {type(doc).__name__}")
    check_id(doc.doc_id, f"{where}.doc_id")
    check_optional_str(doc.source, f"{where}.source")
    check_optional_str(doc.content_hash, f"{where}.content_hash")
    if doc.n_pages is not None and (
        isinstance(doc.n_pages, bool) or not isinstance(doc.n_pages, int) or doc.n_pages < 0
    ):
        raise StoreInputError(f"{where}.n_pages must be a non-negative int or None")
    if not isinstance(doc.complete, bool):
        raise StoreInputError(f"{where}.complete must be a bool, got {doc.complete!r}")
    return doc


def check_unique(ids: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    repeated: set[str] = set()
    for i in ids:
        (repeated if i in seen else seen).add(i)
    if repeated:
        raise StoreInputError(f"{what} repeats ids within one call: {sorted(repeated)[:5]}")


def check_query(query: Any, dim: int, what: str = "query") -> np.ndarray:
    """A [M, dim] finite float query as C-contiguous float32."""
    if not isinstance(query, np.ndarray) or query.dtype.kind != "f":
        got = query.dtype if isinstance(query, np.ndarray) else type(query).__name__
        raise StoreInputError(f"{what} must be a float numpy array, got {got}")
    if query.ndim != 2 or query.shape[1] != dim or query.shape[0] < 1:
        raise StoreInputError(f"{what} must have shape [M>=1, {dim}], got {list(query.shape)}")
    if not np.isfinite(query).all():
        raise StoreInputError(f"{what} contains NaN or inf (drop padded query rows first)")
    return np.ascontiguousarray(query, dtype=np.float32)


K_COUNTED_ABOVE = 1024
"""A k above this is capped at the store's page count (counted only then: a normal query pays
nothing), since engines size buffers by k: k = 2**31 asked tantivy for 34 GB and aborted."""


def check_k(k: Any, what: str = "k", pages: Callable[[], int] | None = None) -> int:
    """``k`` as an int >= 1; past `K_COUNTED_ABOVE`, at most ``pages()`` (no store returns more
    pages than it holds, so the answer is the same)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise StoreInputError(f"{what} must be a positive int, got {k!r}")
    k = int(k)
    if pages is not None and k > K_COUNTED_ABOVE:
        k = max(1, min(k, pages()))
    return k


def check_dim(config: dict[str, Any]) -> int:
    dim = config.get("dim")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise StoreInputError(f"config['dim'] must be a positive int, got {dim!r}")
    return dim


def check_config(config: Any) -> dict[str, Any]:
    """A JSON-serialisable dict with ``dim`` and a non-empty ``model_id``."""
    if not isinstance(config, dict):
        raise StoreInputError(f"config must be a dict, got {type(config).__name__}")
    check_dim(config)
    check_id(config.get("model_id"), "config['model_id']")
    metadata_json(config, "config")
    return json.loads(json.dumps(config))


def check_layout(config: dict[str, Any]) -> None:
    """``codes``, ``fp16`` and ``layout`` of a config: a store without fp16 vectors, or one
    that switches to codes by size (``layout: "auto"``, store/local/layout.py), needs residual codes
    (4bit, 2bit or 1bit) and a dimension they pack evenly."""
    codes = config.get("codes", "none")
    if codes not in ("none", "4bit", "2bit", "1bit"):
        raise StoreInputError(f"config['codes'] must be none, 4bit, 2bit or 1bit, got {codes!r}")
    fp16 = config.get("fp16", True)
    if not isinstance(fp16, bool):
        raise StoreInputError(f"config['fp16'] must be true or false, got {fp16!r}")
    per_byte = {"4bit": 2, "2bit": 4, "1bit": 8}.get(codes, 1)
    if config["dim"] % per_byte:
        raise StoreInputError(
            f"{codes} codes need a vector dimension divisible by {per_byte}, got {config['dim']}"
        )
    if not fp16 and codes == "none":
        raise StoreInputError(
            "a store without fp16 vectors reranks on residual codes: "
            "set codes to 4bit, 2bit or 1bit"
        )
    layout = config.get("layout")
    if layout not in (None, "auto", "fixed"):
        raise StoreInputError(f"config['layout'] must be auto or fixed, got {layout!r}")
    if layout == "auto" and codes == "none":
        raise StoreInputError(
            "the auto layout turns fp16 rows into residual codes past a size: set codes to "
            "4bit, 2bit or 1bit"
        )


SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)  # the modes are named once, in base
TEXT_MODES = ("text", "hybrid")


def as_list(items: Any, what: str = "queries") -> list[Any]:
    """A list from a sequence argument; a lone record or array is a clear error, not a surprise."""
    if isinstance(items, (str, bytes, dict, np.ndarray, PageRecord, DocumentRecord)):
        raise StoreInputError(f"{what} must be a sequence (list/tuple), got {type(items).__name__}")
    try:
        return list(items)
    except TypeError as exc:
        raise StoreInputError(f"{what} must be a sequence, got {type(items).__name__}") from exc


def check_ids(page_ids: Any, what: str = "page_ids") -> list[str]:
    """A list of valid ids from a sequence argument."""
    return [check_id(p, f"{what}[{i}]") for i, p in enumerate(as_list(page_ids, what))]


def check_mode(mode: Any) -> str:
    if mode not in SEARCH_MODES:
        raise StoreInputError(f"mode must be one of {SEARCH_MODES}, got {mode!r}")
    return str(mode)


def check_mode_options(mode: str, texts: Any, alpha: Any, text_k: Any, fts_syntax: bool) -> None:
    """An option the mode does not use is an error, not silently ignored: the query text and
    ``fts_syntax`` belong to the text and hybrid modes, ``alpha`` and ``text_k`` to hybrid."""
    options = {"text": texts is not None, "fts_syntax": bool(fts_syntax)}
    options |= {"alpha": alpha is not None, "text_k": text_k is not None}
    allowed = {"text", "fts_syntax", "alpha", "text_k"} if mode == "hybrid" else set()
    if mode == "text":
        allowed = {"text", "fts_syntax"}
    extra = [name for name, given in options.items() if given and name not in allowed]
    if extra:
        uses = "mode='hybrid'" if mode == "text" else "mode='text' or 'hybrid'"
        raise StoreInputError(
            f"{', '.join(extra)} {'applies' if len(extra) == 1 else 'apply'} to {uses} only, "
            f"not mode={mode!r}"
        )


def check_texts(texts: Any, n_queries: int | None, mode: str) -> list[str]:
    """The query texts the text and hybrid modes need: strings, one per query vector."""
    if texts is None:
        raise StoreInputError(f"mode={mode!r} needs the query text (text=... / texts=...)")
    items = as_list(texts, "texts")
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise StoreInputError(f"texts[{i}] must be a str, got {type(t).__name__}")
    if n_queries is not None and n_queries != len(items):
        raise StoreInputError(f"{n_queries} query vectors but {len(items)} query texts")
    return items


def check_missing(missing: Any) -> str:
    if missing not in ("error", "skip"):
        raise StoreInputError(f"missing must be 'error' or 'skip', got {missing!r}")
    return str(missing)


def check_expect(root: str, stored: dict[str, Any], expect: dict[str, Any]) -> None:
    """`StoreConfigMismatch` unless every ``expect`` value equals the stored config's."""
    absent = object()
    diffs = {k: (stored.get(k), v) for k, v in expect.items() if stored.get(k, absent) != v}
    if diffs:
        raise StoreConfigMismatch(root, diffs)


@dataclass
class Batch:
    """A checked `add`/`upsert` call: records, fp16 vectors and canonical metadata JSON."""

    pages: list[PageRecord]
    documents: list[DocumentRecord]
    vectors: list[np.ndarray]
    page_metadata: list[str]
    document_metadata: list[str]


def check_batch(pages: Any, documents: Any, dim: int) -> Batch:
    """Everything `add`/`upsert` is given, checked before a single byte is written."""
    checked = [check_page(p, dim, i) for i, p in enumerate(as_list(pages, "pages"))]
    docs = [check_document(d, i) for i, d in enumerate(as_list(documents, "documents"))]
    check_unique([p.page_id for p in checked], "pages")
    check_unique([d.doc_id for d in docs], "documents")
    vectors = [
        check_vectors(p.vectors, dim, f"pages[{i}] ({p.page_id!r}).vectors")
        for i, p in enumerate(checked)
    ]
    page_meta = [
        metadata_json(p.metadata, f"pages[{i}] ({p.page_id!r}).metadata")
        for i, p in enumerate(checked)
    ]
    doc_meta = [
        metadata_json(d.metadata, f"documents[{i}] ({d.doc_id!r}).metadata")
        for i, d in enumerate(docs)
    ]
    return Batch(checked, docs, vectors, page_meta, doc_meta)
