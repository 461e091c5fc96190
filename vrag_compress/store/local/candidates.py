"""The store side of the centroid-code candidate index: when it is trained, how writes keep it
in step with the catalog, and how a two-stage search takes its candidates from it.

The index's manifest lives in the catalog's meta table under ``candidate_index`` and is written
in the same transaction as the pages it describes, after the files it names were fsync'ed:

* **add / upsert** assign the new pages' tokens to the existing centroids (a new tail part);
* **delete** touches nothing here: a deleted page's slot no longer maps to a live page and is
  masked at once; **compact** (and every ``MERGE_*`` threshold) rewrites base and tails as one
  base with fresh page lists;
* **training** happens in `optimize` and automatically, in a background thread after a write,
  once the collection reaches ``centroid_min_tokens`` or has grown 4× past (or shrunk to a
  quarter of) the tokens the centroids were trained on; readers keep using the committed index
  until the new one commits, and pages written meanwhile are assigned to the new centroids in
  that same commit.

Pages that no index part covers (written by an older version, or while no index existed) are
always reranked, so the index never hides a page.

In a store without fp16 vectors the index becomes the only copy of the vectors: pages stay
staged as fp16 rows until the store holds ``codes_min_tokens`` vectors, then `train` encodes
them all and its commit drops the staged rows; from then on searches and `get` decode the
residual codes, and a retrain re-encodes decoded vectors (so it is done only when due).
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from vrag_compress.scoring.packed import parallel_map
from vrag_compress.store.base import StoreCorruptError, StoreError
from vrag_compress.store.candidates import cells as cz
from vrag_compress.store.candidates import files as cand
from vrag_compress.store.candidates import tuning
from vrag_compress.store.local import catalog as cat
from vrag_compress.store.local import integrity, layout
from vrag_compress.store.local import segments as seg
from vrag_compress.store.local.context import StoreContext
from vrag_compress.store.local.snapshot import page_vectors

log = logging.getLogger(__name__)

META_KEY = "candidate_index"
CODES_ONLY_K_STEP = 4  # a codes-only store retrains when the rule's K moved this much
# Why a store without fp16 vectors refuses to rewrite a damaged index, and what to do instead.
CODES_ONLY_DAMAGE = (
    "this store keeps no fp16 vectors, so these codes are the only copy of its vectors and "
    "rewriting them (optimize, compact, retrain) would make the damage permanent. Restore the "
    "store folder from a backup, or index its documents again into a new store"
)

REFUSED = "nothing was rewritten: " + CODES_ONLY_DAMAGE
# Why fp16 rows that fail their checksums are not turned into codes.
REFUSED_ROWS = (
    "nothing was converted: the codes would seal this damage under fresh checksums and drop the "
    "fp16 rows; restore the store folder from a backup, or index those documents again"
)


def damage_advice(fp16: bool) -> str:
    """What a user should do about a damaged candidate index (the search warning says it)."""
    if fp16:
        return "run `verify`, then `optimize` (it trains a new index from the fp16 vectors)"
    return "run `verify`; " + CODES_ONLY_DAMAGE


@dataclass
class _SlotMap:
    """Where each index slot's page sits in one snapshot (-1: deleted) and pages no slot holds."""

    key: tuple[int, str]
    slot_pos: np.ndarray
    unindexed: np.ndarray


class CandidateIndexes:
    """The candidate index of one open store: opened lazily, kept in step by the writer."""

    def __init__(self, ctx: StoreContext):
        self.ctx = ctx
        self._index: cand.CandidateIndex | None = None
        self._slots: _SlotMap | None = None
        self._trainer: threading.Thread | None = None
        self._gc = threading.Lock()
        self._reserved: set[str] = set()  # file groups a training writes before its commit
        self.last_error: str | None = None

    # ----------------------------------------------------------------- reading

    @staticmethod
    def manifest(conn: sqlite3.Connection) -> dict[str, Any] | None:
        value = cat.read_meta(conn).get(META_KEY)
        return value if isinstance(value, dict) else None

    def current(self) -> cand.CandidateIndex | None:
        """The committed index (memory-mapped; reopened only when a writer changed it)."""
        seen = None
        for attempt in range(5):
            with self.ctx.catalog.read() as conn:
                manifest = self.manifest(conn)
            if seen is not None and manifest == seen[0]:  # no writer replaced it: damage
                raise StoreCorruptError(seen[1], "candidate index file is missing")
            try:
                return self._open(manifest)
            except FileNotFoundError as exc:  # a merge unlinked files between read and open?
                seen = (manifest, str(exc.filename))
                time.sleep(0.01 * (attempt + 1))
        raise StoreError(f"candidate index files of {self.ctx.root} kept disappearing; retry")

    def _open(self, manifest: dict[str, Any] | None) -> cand.CandidateIndex | None:
        if manifest is None:
            self._index = None
        elif self._index is None or self._index.manifest["id"] != manifest["id"]:
            with self.damage_named(manifest):
                self._index = cand.CandidateIndex.open(self.ctx.root, manifest)
        return self._index

    @contextlib.contextmanager
    def damage_named(self, manifest: dict[str, Any] | None = None) -> Iterator[None]:
        """Turn what reading a damaged index raises (an out-of-range list entry, shapes that
        do not broadcast) into a `StoreCorruptError` naming the damaged file; an error with
        every file sound is a bug and passes unchanged."""
        try:
            yield
        except StoreError:
            raise
        except cand.DAMAGE_SIGNS as exc:
            found = cand.first_damage(self.ctx.root, manifest or self.manifest_now())
            if found is None:
                raise
            raise found from exc

    def params(self, index: cand.CandidateIndex, n_pages: int) -> cz.SearchParams:
        """The probes and rerank depth the index measured for its recall target (the depth
        scaled by √pages since), the size rule for an index that never measured itself, and
        either one fixed by the store options."""
        tuned = index.manifest.get("search")
        if tuned:
            rule = cz.SearchParams(int(tuned["nprobe"]), tuning.scaled_rerank(tuned, n_pages))
        else:
            rule = cz.search_params(n_pages, index.k)
        opts = self.ctx.options
        return cz.SearchParams(
            nprobe=opts.centroid_nprobe or rule.nprobe, rerank=opts.rerank_depth or rule.rerank
        )

    # ----------------------------------------------------------------- search

    def two_stage_cost(self, n_pages: int, n_tokens: int) -> int | None:
        """Vectors a two-stage search touches per query vector (None without an index): the K
        centroids, the probed page-list entries, the vectors of tail pages (scored from their
        codes) and the reranked pages' vectors."""
        index = self.current()
        if index is None or n_pages == 0:
            return None
        params = self.params(index, n_pages)
        probed = params.nprobe * len(index.lists) // max(index.k, 1)
        with self.damage_named(index.manifest):
            tail = int(index.tail.bounds[-1])
        rerank = min(params.rerank, n_pages) * n_tokens // n_pages
        return index.k + probed + tail + rerank

    def candidates(
        self, snap: Any, query: np.ndarray, allowed: np.ndarray | None, threads: int = 1
    ) -> np.ndarray | None:
        """Snapshot positions to rerank exactly (sorted), or None when there is no index.

        ``allowed`` (sorted snapshot positions passing a filter) restricts the candidates;
        ``threads`` split the page-list work (`CandidateIndex.touched_scores`)."""
        found = self.candidates_many(snap, [query], allowed, threads)
        return None if found is None else found[0]

    def candidates_many(
        self, snap: Any, queries: list[np.ndarray], allowed: np.ndarray | None, threads: int = 1
    ) -> list[np.ndarray] | None:
        """`candidates` of several queries, one query per thread (the index, its slot map and
        parameters are read once, here; the threads touch no catalog)."""
        index = self.current()
        if index is None:
            return None
        if len(snap.pids) == 0:
            return [np.empty(0, dtype=np.int64) for _ in queries]
        slot_map = self._slot_map(snap, index)
        params = self.params(index, len(snap.pids))
        ok = None if allowed is None else np.zeros(len(snap.pids), dtype=bool)
        if ok is not None:
            ok[allowed] = True
        unindexed = slot_map.unindexed
        if ok is not None:
            unindexed = unindexed[ok[unindexed]]

        def one(query: np.ndarray, threads: int) -> np.ndarray:
            scorer = self.ctx.scorer
            if scorer is not None:  # centroid product, top cells and list scatter-max on a GPU
                slots = np.arange(index.n_slots, dtype=np.int64)
                scores = scorer.page_scores(index, query, params.nprobe)
            else:
                slots, scores, _ = index.touched_scores(query, params.nprobe, threads)
            pos = slot_map.slot_pos[slots]
            live = pos >= 0
            if ok is not None:
                live &= ok[np.maximum(pos, 0)]
            chosen = pos[cz.top_pages(scores, live, params.rerank)]
            if len(chosen) < params.rerank:  # the lists named few pages: fill up with others
                chosen = _fill(chosen, params.rerank, len(snap.pids), ok)
            return np.union1d(chosen, unindexed)

        if len(queries) == 1:
            return [one(queries[0], threads)]
        return parallel_map(lambda q: one(q, 1), queries, threads)

    def _slot_map(self, snap: Any, index: cand.CandidateIndex) -> _SlotMap:
        key = (int(snap.generation), str(index.manifest["id"]))
        cached = self._slots  # one read: another thread may replace it meanwhile
        if cached is None or cached.key != key:
            n = len(snap.pid_sorted)
            idx = np.minimum(np.searchsorted(snap.pid_sorted, index.slot_pids), max(n - 1, 0))
            found = (n > 0) & (snap.pid_sorted[idx] == index.slot_pids) if n else idx < 0
            slot_pos = np.where(found, snap.pos_of_sorted[idx] if n else -1, -1).astype(np.int64)
            covered = np.zeros(n, dtype=bool)
            covered[slot_pos[found]] = True
            cached = _SlotMap(key, slot_pos, np.flatnonzero(~covered))
            self._slots = cached
        return cached

    # ----------------------------------------------------------------- writes

    def on_insert(
        self, conn: sqlite3.Connection, page_ids: list[str], vectors: list[np.ndarray]
    ) -> None:
        """Inside the writer's transaction: assign new pages to the existing centroids."""
        manifest = self.manifest(conn)
        if not page_ids or manifest is None:  # no index yet (without fp16: the pages are staged)
            return
        pid_of = dict(cat.pages_by_id(conn, page_ids, "page_id, pid"))
        pids = np.array([pid_of[p] for p in page_ids], dtype=np.int64)
        bounds = np.concatenate([[0], np.cumsum([len(v) for v in vectors])]).astype(np.int64)

        def assign() -> dict[str, Any]:
            index = self._open(manifest)
            assert index is not None
            appended = cand.CandidateIndex.open(
                self.ctx.root, index.append(pids, bounds, np.concatenate(vectors))
            )
            if appended.needs_merge():  # tails grew past their share: one base, fresh lists
                return appended.merge(_live_pids(conn))
            return appended.manifest

        self._rewrite(conn, assign)

    def on_compact(self, conn: sqlite3.Connection) -> None:
        """Inside the compaction's transaction: rewrite the index without deleted pages."""
        manifest = self.manifest(conn)
        if manifest is not None:
            self._rewrite(conn, lambda: self._checked(manifest).merge(_live_pids(conn)))

    def _checked(self, manifest: dict[str, Any]) -> cand.CandidateIndex:
        """The index of ``manifest``, opened; a file missing or damaged is a `StoreCorruptError`."""
        try:
            index = self._open(manifest)
        except FileNotFoundError as exc:
            raise StoreCorruptError(str(exc.filename), "candidate index file is missing") from None
        assert index is not None
        return index

    def _rewrite(self, conn: sqlite3.Connection, rewrite: Callable[[], dict[str, Any]]) -> None:
        """Commit the manifest ``rewrite`` makes from the committed index (which checks what it
        reads). A damaged index is never rewritten, as that would seal the damage under fresh
        checksums: with fp16 vectors it is dropped (the next `optimize` trains a new one from
        them); without, its codes are the only copy of the vectors, so the write is refused."""
        try:
            with self.damage_named(self.manifest(conn)):
                new = rewrite()
        except FileNotFoundError as exc:
            problem = StoreCorruptError(str(exc.filename), "candidate index file is missing")
        except StoreCorruptError as exc:
            problem = exc
        else:
            cat.write_meta(conn, META_KEY, new)
            return
        if not self.ctx.fp16:
            raise StoreCorruptError(problem.file, f"{problem.detail}; {REFUSED}")
        log.warning(
            "%s: dropped the damaged candidate index (%s); `optimize` trains a new one from the "
            "fp16 vectors",
            self.ctx.root,
            problem,
        )
        cat.delete_meta(conn, META_KEY)
        self._index = None

    def manifest_now(self) -> dict[str, Any] | None:
        """The committed manifest (a fresh read)."""
        with self.ctx.catalog.read() as conn:
            return self.manifest(conn)

    def remove_orphans(self) -> int:
        """Writer only, after a commit or on open: delete files no committed manifest names.

        Runs under the catalog mutex (no commit can change the manifest meanwhile; writes in a
        transaction hold it too) and spares the files a background training is writing."""
        with self.ctx.catalog.read() as conn, self._gc:
            return cand.remove_orphans(self.ctx.root, self.manifest(conn), self._reserved)

    # ----------------------------------------------------------------- training

    def wants_training(self, n_tokens: int) -> bool:
        """The automatic rule: big enough for an index and none yet, or grown/shrunk 4×."""
        if self.ctx.options.centroid_min_tokens <= 0:
            return False
        with self.ctx.catalog.read() as conn:
            manifest = self.manifest(conn)
        if manifest is None:
            return n_tokens >= self.ctx.options.centroid_min_tokens
        return self.retrain_due(manifest, n_tokens)

    def retrain_due(self, manifest: dict[str, Any], n_tokens: int) -> bool:
        """The 4× growth (or shrink) rule; a store without fp16 vectors also needs the rule's K
        to have moved 4× (16× the tokens), since its retrain re-encodes decoded vectors (a loss
        each time) and only much finer or coarser cells are worth that."""
        due = cz.needs_retrain(int(manifest["trained_tokens"]), n_tokens)
        if self.ctx.fp16 or not due:
            return due
        new, old = cz.choose_k(n_tokens), _rule_k(manifest)
        return max(new, old) >= CODES_ONLY_K_STEP * min(new, old)

    def train(
        self, snap: Any, codes: str, *, seed: int = 0, config: dict[str, Any] | None = None
    ) -> None:
        """Train on ``snap`` (slow, no lock held), then commit: pages written meanwhile are
        assigned to the new centroids in the same transaction.

        ``config`` is a new store config committed with the index: a switch to codes only
        (local/layout.py) drops every fp16 row in that same commit, so a crash leaves either the
        fp16 rows or the codes, never half. The rows are checked against their checksums first:
        damage sealed into codes under fresh checksums could never be found again."""
        if int(snap.bounds[-1]) == 0:
            return
        drop = not (self.ctx.fp16 if config is None else layout.keeps_fp16(config))
        if drop:
            with self.ctx.catalog.read() as conn:
                integrity.check_fp16_rows(self.ctx, conn, REFUSED_ROWS)
        groups: list[str] = []
        dropped: dict[int, int] = {}

        def reserve(group: str) -> None:
            with self._gc:
                self._reserved.add(group)
                groups.append(group)

        try:
            if isinstance(snap.tokens, cand.CodedTokens):  # re-encoding the codes: check them
                self._check_source(snap.tokens.index.manifest)
            manifest = cand.train(
                self.ctx.root,
                snap.pids,
                snap.bounds,
                snap.tokens,
                codes=codes,
                seed=seed,
                reserve=reserve,
            )
            # trained on the snapshot's pages in order: slot i is snapshot position i
            self._tune(cand.CandidateIndex.open(self.ctx.root, manifest), snap, manifest, None)
            with self.ctx.catalog.write() as conn:
                index = cand.CandidateIndex.open(self.ctx.root, manifest)
                new = np.setdiff1d(_live_pids(conn), index.slot_pids)
                if len(new):  # written while we trained: assigned to the new centroids
                    manifest = self._append_from_catalog(conn, index, new)
                cat.write_meta(conn, META_KEY, manifest)
                if config is not None:
                    cat.write_meta(conn, "config", config)
                dropped = self._drop_staged(conn) if drop else {}
            if config is not None:
                self.ctx.set_config(config)
        finally:
            with self._gc:
                self._reserved.difference_update(groups)
        self._unlink_segments(dropped)
        self.remove_orphans()

    def _tune(
        self,
        index: cand.CandidateIndex,
        snap: Any,
        manifest: dict[str, Any],
        slot_pos: np.ndarray | None,
    ) -> None:
        """Measure the index on pseudo-queries of ``snap`` and record in ``manifest`` the
        probes and depth that reach the store's recall target (none: the size rule applies)."""
        target = self.ctx.recall_target
        manifest.pop("search", None)
        if target <= 0 or len(snap.pids) == 0:
            return
        result = tuning.tune(index, snap.tokens, snap.bounds, target=target, slot_pos=slot_pos)
        manifest["search"] = result.to_dict()
        log.info("%s: candidate search tuned to %s", self.ctx.root, manifest["search"])

    def retune(self, snap: Any) -> bool:
        """Measure the committed index again (after a compaction that did not retrain, or for a
        new target) and commit the result; False when there is no index or nothing changed."""
        index = self.current()
        if index is None:
            return False
        manifest = dict(index.manifest)
        self._tune(index, snap, manifest, self._slot_map(snap, index).slot_pos)
        if manifest.get("search") == index.manifest.get("search"):
            return False
        with self.ctx.catalog.write() as conn:
            if (self.manifest(conn) or {}).get("id") != manifest["id"]:
                return False  # a writer replaced the index meanwhile: its own tuning stands
            manifest["id"] = secrets.token_hex(8)
            cat.write_meta(conn, META_KEY, manifest)
        return True

    def needs_tuning(self) -> bool:
        """The committed index was not measured for the current recall target."""
        manifest = self.manifest_now()
        if manifest is None:
            return False
        target = self.ctx.recall_target
        tuned = manifest.get("search")
        return target > 0 and (not tuned or float(tuned["target"]) != target)

    @staticmethod
    def _drop_staged(conn: sqlite3.Connection) -> dict[int, int]:
        """Inside the training's commit of a store without fp16 vectors: every page now lives
        as codes only (its row points at no segment) and the staged fp16 segments leave the
        catalog; returns them, for unlinking once the commit is durable."""
        staged = [r for r in cat.pages_to_copy(conn) if r[7] != seg.NO_SEGMENT]
        segs = cat.segment_rows(conn)
        if not staged and not segs:
            return {}
        updates = []
        for pid, page_id, doc_id, page_no, meta, image_ref, text, _, _, n, vcrc in staged:
            crc = cat.page_row_crc(
                page_id, doc_id, page_no, meta, image_ref, text, seg.NO_SEGMENT, 0, n, vcrc
            )
            updates.append((seg.NO_SEGMENT, 0, crc, pid))
        cat.move_pages(conn, updates)
        cat.replace_segments(conn, [])
        return segs

    def _check_source(self, manifest: dict[str, Any]) -> None:
        """Refuse to re-encode codes that fail their checksums (the only copy of the vectors)."""
        try:
            cand.check_files(self.ctx.root, manifest)
        except StoreCorruptError as exc:
            raise StoreCorruptError(exc.file, f"{exc.detail}; {REFUSED}") from None

    def _unlink_segments(self, segs: dict[int, int]) -> None:
        """After the commit: remove segment files no page points at any more (a crash before
        this leaves orphans, which the next writer's open removes)."""
        for seg_id in segs:
            self.ctx.segment_path(seg_id).unlink(missing_ok=True)
            self.ctx.maps.drop(seg_id)
        if segs:
            seg.fsync_dir(self.ctx.root / seg.SEGMENT_DIR)

    def _append_from_catalog(
        self, conn: sqlite3.Connection, index: cand.CandidateIndex, pids: np.ndarray
    ) -> dict[str, Any]:
        rows = cat.pages_by_pid(conn, pids.tolist(), "pid, segment_id, row_offset, n_vectors")
        committed = self.manifest(conn)
        if committed is not None and any(r[1] == seg.NO_SEGMENT for r in rows):
            self._check_source(committed)  # their codes are re-encoded: check them first
        vectors = page_vectors(self.ctx, conn, rows, self.coded_rows)
        bounds = np.concatenate([[0], np.cumsum([r[3] for r in rows])]).astype(np.int64)
        return index.append(np.array([r[0] for r in rows]), bounds, np.concatenate(vectors))

    def coded_rows(
        self, conn: sqlite3.Connection, pids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The decoded vectors of these pages (``[T, D]`` and each page's token bounds) from the
        index committed as of ``conn``'s transaction (`snapshot.page_vectors` reads them)."""
        with self.damage_named(self.manifest(conn)):
            tokens = self.coded_tokens(conn, pids)
            assert isinstance(tokens, cand.CodedTokens)
            return tokens[:], tokens.bounds

    def coded_tokens(
        self, conn: sqlite3.Connection, pids: np.ndarray
    ) -> cand.CodedTokens | np.ndarray:
        """The decoded-on-demand token matrix of these pages (in this order) from the index
        committed as of ``conn``'s transaction; a page it lacks means a damaged store."""
        index = self._open(self.manifest(conn))
        if index is None:
            if len(pids):
                raise StoreCorruptError(
                    str(self.ctx.root / cand.INDEX_DIR),
                    f"{len(pids)} pages keep no fp16 vectors and there is no candidate index",
                )
            return np.empty((0, self.ctx.dim), dtype=np.float32)
        return index.tokens_of(pids, self.ctx.options.cache_fp32_max_bytes)

    def train_in_background(self, snapshot: Callable[[], Any], codes: str) -> bool:
        """Start `train` on a fresh snapshot in a daemon thread unless one runs (False then)."""
        if self._trainer is not None and self._trainer.is_alive():
            return False

        def run() -> None:
            try:
                self.train(snapshot(), codes)
                self.last_error = None
            except Exception as exc:  # a failed retrain leaves the committed index in use
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("background centroid training of %s failed: %s", self.ctx.root, exc)

        self._trainer = threading.Thread(target=run, name="vrag-centroid-train", daemon=True)
        self._trainer.start()
        return True

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a background training to finish (on close, and in tests)."""
        if self._trainer is not None:
            self._trainer.join(timeout)

    # ----------------------------------------------------------------- integrity

    def verify(self, conn: sqlite3.Connection) -> list[str]:
        """The index files' problems; without fp16 vectors also every page the index lacks."""
        manifest = self.manifest(conn)
        problems = [] if manifest is None else cand.verify_files(self.ctx.root, manifest)
        coded = [r[0] for r in cat.snapshot_pages(conn) if r[1] == seg.NO_SEGMENT]
        if coded and not problems:
            try:
                self.coded_tokens(conn, np.array(coded, dtype=np.int64))
            except StoreCorruptError as exc:
                problems.append(str(exc))
        return problems

    def describe(self, n_pages: int) -> dict[str, Any] | None:
        """Parameters and size of the committed index (None without one)."""
        index = self.current()
        if index is None:
            return None
        params = self.params(index, n_pages)
        m = index.manifest
        tuned = m.get("search")
        return {
            "k": index.k,
            "nprobe": params.nprobe,
            "rerank": params.rerank,
            "params_from": _params_source(self.ctx.options, tuned),
            "recall_target": None if not tuned else tuned["target"],
            "tuned": tuned,
            "codes": m["codes"],
            "trained_tokens": int(m["trained_tokens"]),
            "indexed_pages": index.n_slots,
            "tail_parts": len(m["tails"]),
            "bytes": index.nbytes(),
            "bytes_per_page": round(index.nbytes() / max(index.n_slots, 1), 1),
            "retrain_at_tokens": self._retrain_at(m),
        }

    def _retrain_at(self, manifest: dict[str, Any]) -> int | None:
        """The collection size (vectors) at which the growth rule retrains (None: never)."""
        at = int(manifest["trained_tokens"]) * cz.RETRAIN_GROWTH
        if self.ctx.fp16:
            return at
        k, hi = CODES_ONLY_K_STEP * _rule_k(manifest), at
        while cz.choose_k(hi) < k:  # K only grows with the size: find where it reaches 4×
            if hi > 1 << 50:
                return None
            hi *= 2
        lo = at  # choose_k(lo) may be below it; choose_k(hi) is not
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if cz.choose_k(mid) < k else (lo, mid)
        return lo

    def close(self) -> None:
        self.wait()
        self._index = None
        self._slots = None


def _rule_k(manifest: dict[str, Any]) -> int:
    """The K the size rule chose for this index (before heavy cells were split)."""
    return int(manifest.get("k_rule", manifest["k"]))


def _params_source(opts: Any, tuned: dict[str, Any] | None) -> str:
    """Where the search parameters come from: the options, the index's own measurement, or the
    size rule (an index trained with no recall target, or by an older version)."""
    if opts.centroid_nprobe or opts.rerank_depth:
        return "options"
    return "measured" if tuned else "rule"


def _fill(chosen: np.ndarray, depth: int, n_pages: int, ok: np.ndarray | None) -> np.ndarray:
    """``chosen`` plus other snapshot positions (passing ``ok``) up to ``depth`` pages: pages no
    probed list names all score the floor, so any of them is as good a candidate as another.
    A pass over the pages, but only when the probed lists named fewer than ``depth``."""
    free = np.ones(n_pages, dtype=bool) if ok is None else ok.copy()
    free[chosen] = False
    extra = np.flatnonzero(free)[: depth - len(chosen)]
    return np.concatenate([chosen, extra])


def _live_pids(conn: sqlite3.Connection) -> np.ndarray:
    return np.array(sorted(r[0] for r in cat.snapshot_pages(conn)), dtype=np.int64)


def recall_sample_size(n_pages: int) -> int:
    """Stored pages used as queries for the self-measured recall (≥ 100 when available)."""
    return int(min(n_pages, max(100, math.ceil(math.sqrt(n_pages)))))
