"""Copy a store into another backend (embedded <-> Qdrant) without re-encoding, and check it.

The copy moves the stored (compressed, fp16) vectors, payloads and document rows as they are (a
store without fp16 vectors gives its decoded codes, which the destination keeps as full vectors);
the check runs the same exact searches on both stores and compares ranked ids and scores, so a
migration is only trusted when the two stores answer alike.

A migration streams: one batch of pages is read and written at a time, each written whole
(pages are upserted by id, so a batch written twice is still written once), and the document
rows go last. The destination's config records the migration (``migration``: the source and
whether the copy finished), so a killed migration leaves a partial copy that says so; run again
with the same source, `open_destination` finds it and `copy_store` copies only the pages it
lacks. Any other existing store is refused: a migration never writes into a store it did not
create.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vrag_compress.store.base import MultiVectorStore, StoreError, StoreExistsError

Progress = Callable[[int], None]
MIGRATION_KEY = "migration"  # in the destination's config: {"from": source, "complete": bool}


@dataclass
class MigrationCheck:
    """Outcome of `compare_stores`: ``ok`` when counts, documents and every ranking agree."""

    queries: int
    pages_src: int
    pages_dst: int
    documents_equal: bool
    rank_mismatches: list[dict[str, Any]] = field(default_factory=list)
    max_score_diff: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            self.pages_src == self.pages_dst and self.documents_equal and not self.rank_mismatches
        )


def destination_config(config: dict[str, Any], *, keep_codes: bool = False) -> dict[str, Any]:
    """The config a migration creates its destination with. A source without fp16 vectors
    hands out decoded vectors (fp16-rounded); the destination keeps those as full vectors
    (``fp16`` true, no codes, no layout by size), since encoding them again would lose more
    precision and answer differently. ``keep_codes`` keeps the source's layout (an embedded
    destination then trains its own codes on the decoded vectors: its answers drift from the
    source's)."""
    if keep_codes or config.get("fp16", True) is not False:
        return dict(config)
    fixed = {k: v for k, v in config.items() if k != "layout"}  # full vectors for good
    return {**fixed, "fp16": True, "codes": "none"}


def open_destination(
    target: str, config: dict[str, Any], src: MultiVectorStore, source: str, **options: Any
) -> tuple[MultiVectorStore, set[str]]:
    """A new store at ``target`` for a migration from ``source`` (``src``), or the unfinished
    copy a killed migration from the same source left there; with the ids of the pages it
    already holds (empty for a new store). Any other existing store is an error."""
    from vrag_compress.store.open import create_store, open_store

    unfinished = {"from": source, "complete": False}
    try:
        return create_store(target, {**config, MIGRATION_KEY: unfinished}, **options), set()
    except StoreExistsError as exists:
        try:
            dst = open_store(target)
        except StoreError:
            raise exists from None
        refused = exists
    try:
        found = dst.config.get(MIGRATION_KEY)
        if found != unfinished:
            raise _not_resumable(target, found, source) if found else refused
        return dst, resumable_pages(src, dst, target)
    except BaseException:
        dst.close()
        raise


def _not_resumable(target: str, found: Any, source: str) -> StoreExistsError:
    origin = found.get("from") if isinstance(found, dict) else found
    state = "a finished migration" if origin == source else f"a migration from {origin}"
    return StoreExistsError(
        f"{target} already holds {state}, not an unfinished one from {source}; "
        "choose a new DST or delete it first"
    )


def finish_migration(dst: MultiVectorStore, source: str) -> None:
    """Record in the destination that the copy from ``source`` is whole and checked."""
    dst.update_config(**{MIGRATION_KEY: {"from": source, "complete": True}})


def resumable_pages(src: MultiVectorStore, dst: MultiVectorStore, target: str) -> set[str]:
    """The page ids the unfinished copy ``dst`` holds, all of which ``src`` must still have."""
    have = set(dst.page_ids())
    gone = sorted(have - set(src.page_ids()))
    if gone:
        raise StoreError(
            f"{target} holds {len(gone)} pages the source no longer has (e.g. {gone[0]!r}): "
            "the source changed since the migration started; delete DST and migrate again"
        )
    return have


def copy_store(
    src: MultiVectorStore,
    dst: MultiVectorStore,
    *,
    batch: int = 256,
    progress: Progress | None = None,
    skip: set[str] | frozenset[str] = frozenset(),
) -> int:
    """Upsert every page of ``src`` that ``dst`` lacks (``skip``: the ids it holds) in batches,
    then the document rows (last, so a crash never leaves a document marked complete without
    its pages); returns pages copied."""
    ids = [page_id for page_id in src.page_ids() if page_id not in skip]
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        dst.upsert(src.get(chunk))
        if progress is not None:
            progress(len(chunk))
    dst.upsert([], documents=src.documents())
    return len(ids)


def probe_queries(
    store: MultiVectorStore, n: int, *, tokens: int = 16, seed: int = 0
) -> list[np.ndarray]:
    """Queries made from stored pages (a few of their own vectors, slightly perturbed), spread
    over the collection, so each has a known good answer and many near ties to rank."""
    ids = store.page_ids()
    if not ids or n < 1:
        return []
    rng = np.random.default_rng(seed)
    chosen = [ids[i] for i in np.linspace(0, len(ids) - 1, min(n, len(ids))).astype(int)]
    queries = []
    for page in store.get(chosen):
        rows = page.vectors[rng.permutation(len(page.vectors))[:tokens]]
        noisy = rows + rng.normal(scale=0.05, size=rows.shape).astype(np.float32)
        queries.append(noisy / np.linalg.norm(noisy, axis=1, keepdims=True))
    return queries


def compare_stores(
    src: MultiVectorStore,
    dst: MultiVectorStore,
    *,
    queries: int = 20,
    k: int = 10,
    rtol: float = 1e-4,
) -> MigrationCheck:
    """Exact top-k of ``queries`` probe queries on both stores: same ids, scores within rtol."""
    qs = probe_queries(src, queries)
    check = MigrationCheck(len(qs), src.count(), dst.count(), src.documents() == dst.documents())
    for i, q in enumerate(qs):
        a = src.search(q, k, mode="exact")
        b = dst.search(q, k, mode="exact")
        if len(a) == len(b) and a:
            diff = np.abs(np.array([h.score for h in a]) - np.array([h.score for h in b]))
            check.max_score_diff = max(check.max_score_diff, float(diff.max()))
        if not _same_ranking(a, b, rtol):
            check.rank_mismatches.append(
                {"query": i, "src": [h.page_id for h in a], "dst": [h.page_id for h in b]}
            )
    return check


def _same_ranking(a: list[Any], b: list[Any], rtol: float) -> bool:
    """Equal scores position by position; ids may differ only among tied scores (the two
    backends may round a tie differently)."""
    if len(a) != len(b):
        return False
    scores_a = np.array([h.score for h in a])
    if not np.allclose(scores_a, [h.score for h in b], rtol=rtol, atol=1e-6):
        return False
    score_of = {h.page_id: h.score for h in a} | {h.page_id: h.score for h in b}
    for pos, (ha, hb) in enumerate(zip(a, b, strict=True)):
        if ha.page_id != hb.page_id and not np.isclose(
            score_of[hb.page_id], scores_a[pos], rtol=rtol, atol=1e-6
        ):
            return False
    return True
