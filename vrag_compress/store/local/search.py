"""The search path of a `LocalStore`: filter, score (exact or two-stage) and resolve hits.

The ``text`` mode ranks by BM25 over the page text (text_search.py); ``hybrid`` runs ``auto`` and
``text`` with the same filter and fuses the two candidate lists (fusion.py).

``exact`` scores every (filtered) page; ``two_stage`` takes candidate pages from the centroid
candidate index (else a FAISS token index) and reranks them exactly. ``auto`` picks the cheaper
one by a cost model counted in vectors touched per query vector: exact touches the T filtered
vectors; two-stage touches the K centroids, the probed page-list entries (nprobe × entries / K),
the vectors of pages added since the last merge, and the R × T/P vectors it reranks
(`CandidateIndexes.two_stage_cost`). Without a candidate index, ``auto`` is exact up to
``EXACT_WITHOUT_INDEX`` (1,000,000) vectors. A set ``exact_max_tokens`` option replaces both
rules by its own threshold (exact while T ≤ it).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from vrag_compress.scoring.packed import (
    gather_pages,
    maxsim_scores,
    one_blas_thread,
    parallel_map,
    settled_top_k,
)
from vrag_compress.store.base import SearchResult, StoreCorruptError
from vrag_compress.store.candidates.ann import TokenIndex
from vrag_compress.store.candidates.files import CodedTokens
from vrag_compress.store.filters.sql import compile_filter
from vrag_compress.store.fusion import check_alpha, fuse
from vrag_compress.store.local import catalog as cat
from vrag_compress.store.local import integrity
from vrag_compress.store.local.candidates import CandidateIndexes, damage_advice
from vrag_compress.store.local.context import StoreContext
from vrag_compress.store.local.snapshot import Snapshot, Snapshots
from vrag_compress.store.local.text_engine import TextEngine
from vrag_compress.store.local.text_search import LexicalIndex
from vrag_compress.store.validate import (
    TEXT_MODES,
    StoreInputError,
    as_list,
    check_k,
    check_mode,
    check_mode_options,
    check_query,
    check_texts,
)

log = logging.getLogger(__name__)
EXACT_WITHOUT_INDEX = 1_000_000  # auto's exact limit (vectors) when there is no candidate index
SMALL_RERANK_TOKENS = 1 << 17  # reranks up to this many vectors run BLAS on one thread
HYBRID_DEPTH = 50  # candidates each side of a hybrid search gives the fusion (at least k)
HIT_COLUMNS = len(cat.HIT.split(","))  # what `_result` unpacks
TIE_MARGIN = 8  # extra text hits fetched so ties at the last place are ordered by page_id

Hits = list[tuple[np.ndarray, np.ndarray]]  # per query: (pids, scores) best first


class Searcher:
    """MaxSim top-k over a store's current snapshot, with its lazily built token index."""

    def __init__(
        self,
        ctx: StoreContext,
        snapshots: Snapshots,
        centroids: CandidateIndexes | None = None,
        text_engine: TextEngine | None = None,
    ):
        self.ctx = ctx
        self.snapshots = snapshots
        self.centroids = centroids
        self.lexical = LexicalIndex(ctx, text_engine or TextEngine(ctx, writable=False))
        self._ann: TokenIndex | None = None
        self._ann_lock = threading.Lock()

    def search_many(
        self,
        queries: Sequence[np.ndarray] | None,
        k: int,
        *,
        filter: dict[str, Any] | None,
        mode: str,
        texts: Sequence[str] | None = None,
        alpha: float | None = None,
        text_k: int | None = None,
        fts_syntax: bool = False,
    ) -> list[list[SearchResult]]:
        """Top-k per query, best first, ties by page_id; retried when a hit was just deleted."""
        k = check_k(k, pages=self._count)
        mode = check_mode(mode)
        check_mode_options(mode, texts, alpha, text_k, fts_syntax)
        if mode in TEXT_MODES:
            return self._search_with_text(
                queries, texts, k, filter, mode, alpha, text_k, fts_syntax
            )
        dim = self.ctx.dim
        qs = [check_query(q, dim, f"queries[{i}]") for i, q in enumerate(as_list(queries))]
        where = compile_filter(filter) if filter else None
        if not qs:
            return []
        with self.ctx.catalog.mutex:
            for attempt in range(3):
                hits = self._search_snapshot(qs, k, where, mode)
                results = self._resolve(hits, drop_missing=attempt == 2)
                if results is not None:
                    return results
                self.snapshots.invalidate()  # a hit vanished (concurrent delete): fresh snapshot
            raise AssertionError("unreachable: the last attempt drops vanished hits")

    def _count(self) -> int:
        """The pages the store holds (what a huge k is capped at)."""
        with self.ctx.catalog.read() as conn:
            return cat.count_pages(conn)

    def _search_with_text(
        self,
        queries: Sequence[np.ndarray] | None,
        texts: Sequence[str] | None,
        k: int,
        filter: dict[str, Any] | None,
        mode: str,
        alpha: float | None,
        text_k: int | None,
        fts_syntax: bool,
    ) -> list[list[SearchResult]]:
        """The text mode (BM25 only) and the hybrid mode (auto and text, fused)."""
        qs = None
        if mode == "hybrid":
            if queries is None:
                raise StoreInputError("mode='hybrid' needs the query vectors as well as the text")
            qs = [
                check_query(q, self.ctx.dim, f"queries[{i}]")
                for i, q in enumerate(as_list(queries))
            ]
        words = check_texts(texts, None if qs is None else len(qs), mode)
        alpha = check_alpha(alpha)
        depth = k if mode == "text" else max(k, HYBRID_DEPTH)
        text_depth = depth if text_k is None else check_k(text_k, "text_k", self._count)
        where = compile_filter(filter) if filter else None
        with self.ctx.catalog.mutex:
            for attempt in range(3):
                lexical = [
                    self.lexical.search(t, text_depth + TIE_MARGIN, where, fts_syntax=fts_syntax)
                    for t in words
                ]
                visual = self._search_snapshot(qs, depth, where, "auto") if qs else None
                results = self._fuse(
                    lexical, visual, k, alpha, text_depth, drop_missing=attempt == 2
                )
                if results is not None:
                    return results
                self.snapshots.invalidate()
            raise AssertionError("unreachable: the last attempt drops vanished hits")

    def _fuse(
        self,
        lexical: Hits,
        visual: Hits | None,
        k: int,
        alpha: float | None,
        text_depth: int,
        drop_missing: bool,
    ) -> list[list[SearchResult]] | None:
        """Text hits (``visual`` None) or both sides fused, as results with their components."""
        pids = sorted({int(p) for side in (lexical, visual or []) for ps, _ in side for p in ps})
        rows = self._rows(pids, drop_missing)
        if rows is None:
            return None
        pid_of = {row[1]: pid for pid, row in rows.items()}
        out = []
        for i, text_hits in enumerate(lexical):
            sides = {"text": _ranked(*text_hits, rows)[:text_depth]}
            if visual is not None:
                sides = {"visual": _ranked(*visual[i], rows), **sides}
            fused = fuse(sides, k, alpha=alpha if visual is not None else None)
            out.append(
                [
                    _result(
                        rows[pid_of[f.key]],
                        f.score if visual is not None else f.components["text"]["score"],
                        f.components,
                    )
                    for f in fused
                ]
            )
        return out

    def build_token_index(self) -> None:
        """Build the FAISS token index now instead of on the first two-stage search."""
        with self.ctx.catalog.mutex:
            self._token_index(self.snapshots.current())

    @property
    def token_index(self) -> TokenIndex | None:
        """The FAISS token index once a two-stage search (or `build_token_index`) built it."""
        return self._ann

    def reset(self) -> None:
        """Drop the token index (on close)."""
        self._ann = None

    def _search_snapshot(
        self, qs: list[np.ndarray], k: int, where: tuple[str, list] | None, mode: str
    ) -> Hits:
        with self._damage_named():
            snap = self.snapshots.current()
            pos = None if where is None else snap.positions(self._filter_pids(where))
            n_tokens = (
                int(snap.bounds[-1])
                if pos is None
                else int((snap.bounds[pos + 1] - snap.bounds[pos]).sum())
            )
            threads = self.ctx.options.threads if self.ctx.scorer is None else 1
            if mode == "exact" or (mode == "auto" and self._exact_is_cheaper(snap, n_tokens)):
                return self._exact(snap, qs, k, pos, threads)
        try:
            with self._damage_named():
                if len(qs) > 1 and threads > 1:
                    return self._two_stage_many(snap, qs, k, pos, threads)
                return [self._two_stage(snap, q, k, pos, threads) for q in qs]
        except StoreCorruptError as exc:
            if mode != "auto":
                raise
            advice = damage_advice(self.ctx.fp16)
            log.warning("candidate index unusable (%s); searched exactly instead; %s", exc, advice)
        with self._damage_named():
            return self._exact(snap, qs, k, pos, threads)

    def _damage_named(self) -> contextlib.AbstractContextManager[None]:
        """Errors that a damaged candidate index raises, as store errors naming its file."""
        if self.centroids is None:
            return contextlib.nullcontext()
        return self.centroids.damage_named()

    def _two_stage_many(
        self, snap: Snapshot, qs: list[np.ndarray], k: int, pos: np.ndarray | None, threads: int
    ) -> Hits:
        """Two-stage search of several queries, one query per thread (each on one thread):
        the threads only compute (candidates from the index read once, then the reranks)."""
        with one_blas_thread():
            cands = self._centroid_candidates_many(snap, qs, pos, threads)
        if cands is None:
            return [self._two_stage(snap, q, k, pos, threads) for q in qs]
        return parallel_map(
            lambda i: self._rerank(snap, qs[i], k, pos, cands[i], 1), range(len(qs)), threads
        )

    def _exact_is_cheaper(self, snap: Snapshot, n_tokens: int) -> bool:
        """`auto`'s choice (see the module docstring)."""
        fixed = self.ctx.options.exact_max_tokens
        if fixed is not None:
            return n_tokens <= fixed
        cost = None
        if self.centroids is not None:
            try:
                cost = self.centroids.two_stage_cost(len(snap.pids), int(snap.bounds[-1]))
            except StoreCorruptError:
                cost = None  # a damaged index: the search itself logs it and falls back
        if cost is None:
            return n_tokens <= EXACT_WITHOUT_INDEX
        return n_tokens <= cost

    def _exact(
        self, snap: Snapshot, qs: list[np.ndarray], k: int, pos: np.ndarray | None, threads: int
    ) -> Hits:
        if pos is None:
            pos = np.arange(len(snap.pids))
        scores = self._scores(snap, qs, pos, threads)
        out = []
        for q, row in zip(qs, scores, strict=True):
            error = snap.tokens.maxsim_error(q) if self._scores_codes(snap, qs) else 0.0
            best, settled = settled_top_k(q, row, k, snap.tokens, snap.bounds, pos, error)
            out.append((snap.pids[pos[best]], settled))
        return out

    def _scores_codes(self, snap: Snapshot, qs: list[np.ndarray]) -> bool:
        """Whether `_scores` scores these queries from codes in place (one query of a
        codes-only store on the CPU)."""
        return self.ctx.scorer is None and isinstance(snap.tokens, CodedTokens) and len(qs) == 1

    def _scores(
        self, snap: Snapshot, qs: list[np.ndarray], pos: np.ndarray, threads: int
    ) -> np.ndarray:
        """``[Q, len(pos)]`` MaxSim of the pages at ``pos``: one query of a codes-only store
        (a rerank) from its codes in place; else on the scorer (a GPU, or the torch code on the
        CPU in tests) or by BLAS over their rows (decoded chunk by chunk without fp16 rows),
        where many queries share each product."""
        if self._scores_codes(snap, qs):
            return snap.tokens.maxsim(qs[0], pos, threads)[None]
        if len(pos) == len(snap.pids):  # every page, in order
            tokens, bounds = snap.tokens, snap.bounds
        else:
            rows, bounds = gather_pages(snap.bounds, pos)
            tokens = snap.tokens[rows]
        opts = self.ctx.options
        if self.ctx.scorer is not None:
            return self.ctx.scorer.maxsim(qs, tokens, bounds, chunk_tokens=opts.chunk_tokens)
        return maxsim_scores(qs, tokens, bounds, chunk_tokens=opts.chunk_tokens, threads=threads)

    def _two_stage(
        self, snap: Snapshot, q: np.ndarray, k: int, pos: np.ndarray | None, threads: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Candidates, then their exact rerank; ``threads`` split the page lists' and the
        rerank's work."""
        on_cpu = self.ctx.scorer is None
        # a [M, K] product: waking BLAS threads costs more than it saves
        with one_blas_thread() if on_cpu else contextlib.nullcontext():
            cand = self._centroid_candidates(snap, q, pos, threads)
        return self._rerank(snap, q, k, pos, cand, threads)

    def _rerank(
        self,
        snap: Snapshot,
        q: np.ndarray,
        k: int,
        pos: np.ndarray | None,
        cand: np.ndarray | None,
        threads: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k among the candidates (None: no centroid index, the FAISS token index
        names them)."""
        on_cpu = self.ctx.scorer is None
        if cand is None:
            ann = self._token_index(snap)
            cand = snap.positions(ann.candidates(q, self.ctx.options.candidates_per_token))
        if pos is not None:
            cand = np.intersect1d(cand, pos, assume_unique=True)
            if len(cand) < min(k, len(pos)):
                cand = pos  # the filter left too few candidates: score all that pass it
        if len(cand) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        small = int((snap.bounds[cand + 1] - snap.bounds[cand]).sum()) <= SMALL_RERANK_TOKENS
        with one_blas_thread() if small and on_cpu else contextlib.nullcontext():
            return self._exact(snap, [q], k, cand, threads)[0]

    def _centroid_candidates(
        self, snap: Snapshot, q: np.ndarray, pos: np.ndarray | None, threads: int
    ) -> np.ndarray | None:
        """Pages to rerank from the centroid index; None without one (the caller then uses
        the token index). A damaged one raises `StoreCorruptError` (auto mode falls back to
        exact search)."""
        found = self._centroid_candidates_many(snap, [q], pos, threads)
        return None if found is None else found[0]

    def _centroid_candidates_many(
        self, snap: Snapshot, qs: list[np.ndarray], pos: np.ndarray | None, threads: int
    ) -> list[np.ndarray] | None:
        if self.centroids is None:
            return None
        return self.centroids.candidates_many(snap, qs, pos, threads)

    def _token_index(self, snap: Snapshot) -> TokenIndex:
        with self._ann_lock:  # queries on several threads share one index
            return self._synced_token_index(snap)

    def _synced_token_index(self, snap: Snapshot) -> TokenIndex:
        opts = self.ctx.options
        if self._ann is None:
            self._ann = TokenIndex(
                self.ctx.dim, ivf_min_tokens=opts.ivf_min_tokens, nprobe=opts.nprobe
            )
        self._ann.nprobe = opts.nprobe
        self._ann.sync(snap.generation, snap.pids, snap.bounds, snap.tokens)
        return self._ann

    def _filter_pids(self, where: tuple[str, list]) -> np.ndarray:
        with self.ctx.catalog.read() as conn:
            pids = cat.filtered_pids(conn, *where)
        return np.array(sorted(pids), dtype=np.int64)

    def _rows(self, pids: list[int], drop_missing: bool) -> dict[int, tuple] | None:
        """`cat.HIT` rows of these pages by pid, their checksums checked; None when one vanished
        meanwhile (a concurrent delete), unless ``drop_missing``, which leaves such pages out."""
        with self.ctx.catalog.snapshot() as conn:  # rows and segment lengths agree
            checked = cat.pages_by_pid(conn, pids, integrity.HIT_CHECKED)
            integrity.check_hit_rows(self.ctx, conn, checked)
        rows = {r[0]: r[:HIT_COLUMNS] for r in checked}
        if len(rows) < len(pids) and not drop_missing:
            return None
        return rows

    def _resolve(self, hits: Hits, drop_missing: bool = False) -> list[list[SearchResult]] | None:
        """Attach ids and metadata to hits; None when a hit's row vanished meanwhile (a
        concurrent delete), unless ``drop_missing``, which leaves such hits out."""
        rows = self._rows(sorted({int(p) for pids, _ in hits for p in pids}), drop_missing)
        if rows is None:
            return None
        return [
            [
                _result(rows[p], float(s))
                for p, s in zip(pids.tolist(), scores, strict=True)
                if p in rows
            ]
            for pids, scores in hits
        ]


def _ranked(
    pids: np.ndarray, scores: np.ndarray, rows: dict[int, tuple]
) -> list[tuple[str, float]]:
    """One side's ``(page_id, score)`` list, best first, ties by page_id, without pages that
    vanished."""
    ranked = [
        (rows[p][1], float(s)) for p, s in zip(pids.tolist(), scores, strict=True) if p in rows
    ]
    return sorted(ranked, key=lambda r: (-r[1], r[0]))


def _result(
    row: tuple, score: float, components: dict[str, dict[str, float]] | None = None
) -> SearchResult:
    _, page_id, doc_id, page_no, meta, image_ref, text = row
    metadata = cat.metadata_dict(meta, f"page {page_id!r}")
    return SearchResult(page_id, doc_id, page_no, score, metadata, image_ref, text, components)
