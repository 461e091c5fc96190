"""`LocalStore`: the embedded multi-vector store (SQLite catalog + fp16 segments + FAISS).

Layout of a store directory::

    catalog.sqlite   WAL-mode catalog: meta (schema, config, versions, generation), documents,
                     pages (ids, metadata, vector location + CRCs), segments (committed lengths),
                     tombstones (dead vector ranges awaiting compact)
    segments/        append-only fp16 files seg-NNNNNNNN.f16, memory-mapped for reading
    LOCK             writer lock (flock, holder's pid inside)

`LocalStore` is the front door: lifecycle, config and lookups. The work is done by its parts,
each in its own module and all sharing one `StoreContext` (context.py):

- catalog.py: schema, connection handle and every SQL statement;
- writer.py: the crash-safe write path (add/upsert/delete/compact);
- snapshot.py: the reader's view (committed pages and their token matrix at one generation);
- search.py: filtered exact or two-stage MaxSim search over a snapshot;
- integrity.py: `verify`, the checks on open and a writer's crash recovery;
- candidates.py: the store side of the candidate index of two-stage search (its arrays and
  files are `vrag_compress.store.candidates`), trained by `optimize` or automatically past a
  size threshold;
- text_search.py, text_engine.py, text_files.py: BM25 over the page text (FTS5 or tantivy);
- lock.py: the single-writer lock.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.scoring.torch_scorer import TorchScorer, choose_device
from vrag_compress.store.base import (
    DocumentRecord,
    MultiVectorStore,
    PageNotFoundError,
    PageRecord,
    SearchMode,
    SearchResult,
    StoreCorruptError,
    StoreError,
    StoreExistsError,
    StoreNotFoundError,
    VerifyReport,
)
from vrag_compress.store.candidates.cells import CODES
from vrag_compress.store.candidates.tuning import pseudo_queries
from vrag_compress.store.local import catalog as cat
from vrag_compress.store.local import integrity, layout, text_sql
from vrag_compress.store.local import segments as seg
from vrag_compress.store.local.candidates import CandidateIndexes, recall_sample_size
from vrag_compress.store.local.context import StoreContext, StoreOptions
from vrag_compress.store.local.lock import LOCK_NAME, WriterLock
from vrag_compress.store.local.search import Searcher
from vrag_compress.store.local.snapshot import Snapshot, Snapshots, page_vectors
from vrag_compress.store.local.text_engine import TextEngine, check_text_engine
from vrag_compress.store.local.writer import PageWriter
from vrag_compress.store.validate import (
    StoreInputError,
    check_config,
    check_dim,
    check_expect,
    check_id,
    check_ids,
    check_layout,
    check_missing,
)
from vrag_compress.version import __version__

# names that lived here before the split
_WriterLock = WriterLock
_Snapshot = Snapshot
__all__ = ["LOCK_NAME", "LocalStore", "StoreOptions"]
log = logging.getLogger(__name__)


# Suffix of a catalog being built by `create` (pid and a random tag follow).
_CREATING = ".creating-"


def is_empty_or_leftover(root: Path) -> bool:
    """Whether ``root`` holds nothing but what an interrupted `create` leaves behind (an empty
    segments folder, a half-built catalog, the lock file); such leftovers are cleared."""
    building: list[Path] = []
    for entry in root.iterdir():
        name = entry.name
        if name == seg.SEGMENT_DIR and entry.is_dir() and not any(entry.iterdir()):
            continue
        if name.startswith(cat.CATALOG_NAME + _CREATING):
            building.append(entry)
        elif name != LOCK_NAME:
            return False
    for entry in building:
        if not _alive(entry.name[len(cat.CATALOG_NAME + _CREATING) :].split("-")[0]):
            entry.unlink(missing_ok=True)  # its creator died; a live one's file is its own
    return True


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _scorer(option: str) -> TorchScorer | None:
    """The torch scorer for ``option`` (see `StoreOptions.device`), None for numpy."""
    try:
        device = choose_device(option)
    except (RuntimeError, ValueError) as exc:
        raise StoreInputError(f"device={option!r} is not a torch device here: {exc}") from None
    return None if device is None else TorchScorer(device)


def _claim(tmp: Path, catalog: Path) -> None:
    """Give the finished catalog its real name unless another creator already did (atomic)."""
    try:
        os.link(tmp, catalog)
    except FileExistsError:
        raise StoreExistsError(
            f"{catalog.parent} was created by another process at the same time"
        ) from None
    except OSError:  # a file system without hard links: a last check, then an atomic rename
        if catalog.exists():
            raise StoreExistsError(f"{catalog.parent} already holds a store") from None
        os.replace(tmp, catalog)


class LocalStore(MultiVectorStore):
    """Embedded multi-vector store; build with `LocalStore.create` or `LocalStore.open`."""

    def __init__(
        self, root: Path, *, readonly: bool, options: StoreOptions, lock: WriterLock | None
    ):
        self.root = root
        self.readonly = readonly
        self.options = options
        self._lock = lock
        self._ctx = StoreContext(
            root, options, cat.Catalog(root / cat.CATALOG_NAME, readonly=readonly)
        )
        self._centroids = CandidateIndexes(self._ctx)
        self._snapshots = Snapshots(self._ctx, self._centroids.coded_tokens)
        self._writer = PageWriter(self._ctx, self._centroids)
        self._text = TextEngine(self._ctx, writable=not readonly)
        self._searcher = Searcher(self._ctx, self._snapshots, self._centroids, self._text)
        try:
            check_text_engine(options.text_engine)
            self._meta = cat.load_meta(self._ctx.catalog)
            self._ctx.dim = check_dim(self._meta["config"])
            self._ctx.set_config(self._meta["config"])
            self._ctx.scorer = _scorer(options.device)
            if not readonly:
                self._upgrade_schema()
                integrity.recover(self._ctx)
                self._centroids.remove_orphans()
                self._catch_up_text()
            if options.check_on_open:
                integrity.check_on_open(self._ctx)
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- lifecycle

    @classmethod
    def create(
        cls, path: str | os.PathLike[str], config: dict[str, Any], **options: Any
    ) -> LocalStore:
        """A new, empty store at ``path`` (a new or empty directory) recording ``config``.

        All or nothing: the catalog is built under a name of its own and appears under its real
        name in one atomic step, so a crash leaves no store (only leftovers that the next create
        clears), and of several processes creating one store at once exactly one succeeds."""
        config = check_config(config)
        check_layout(config)
        root = Path(path)
        if root.exists() and (not root.is_dir() or not is_empty_or_leftover(root)):
            raise StoreExistsError(f"{root} already exists and is not an empty directory")
        try:
            (root / seg.SEGMENT_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as error:  # under /proc, a file on the way, no permission
            raise StoreInputError(
                f"cannot create the store folder {root}: {error.strerror or error}"
            ) from None
        tmp = root / f"{cat.CATALOG_NAME}{_CREATING}{os.getpid()}-{os.urandom(4).hex()}"
        try:
            cat.create_catalog(
                tmp,
                {
                    "schema_version": cat.SCHEMA_VERSION,
                    "config": config,
                    "library_version": __version__,
                    "created_at": time.time(),
                    "generation": 0,
                    "next_segment_id": 1,
                },
            )
            seg.fsync_dir(tmp)
            _claim(tmp, root / cat.CATALOG_NAME)
            seg.fsync_dir(root)
        finally:
            tmp.unlink(missing_ok=True)
        return cls.open(root, **options)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        expect: dict[str, Any] | None = None,
        **options: Any,
    ) -> LocalStore:
        """Open an existing store; ``expect`` lists config values that must match."""
        root = Path(path)
        if not (root / cat.CATALOG_NAME).is_file():
            raise StoreNotFoundError(f"no store at {root} (missing {cat.CATALOG_NAME}); create one")
        lock = None if readonly else WriterLock(root)
        try:
            store = cls(root, readonly=readonly, options=StoreOptions(**options), lock=lock)
        except BaseException:
            if lock is not None:  # a failed open must not keep the folder locked
                lock.release()
            raise
        if expect:
            try:
                store._check_expect(expect)
            except BaseException:
                store.close()
                raise
        return store

    @classmethod
    def verify_path(cls, path: str | os.PathLike[str]) -> VerifyReport:
        """Verify a store that may be too damaged to open normally (read-only, no open checks)."""
        try:
            store = cls.open(path, readonly=True, check_on_open=False)
        except StoreCorruptError as exc:
            return VerifyReport(False, [str(exc)], 0)
        with store:
            return store.verify()

    def close(self) -> None:
        """Checkpoint the WAL (writers), close the catalog and release the writer lock."""
        self._centroids.close()  # waits for a background training to commit
        with self._ctx.catalog.mutex:
            self._text.close()
            self._ctx.catalog.close()
            self._ctx.maps.clear()
            self._snapshots.invalidate()
            self._searcher.reset()
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    @property
    def closed(self) -> bool:
        """Whether `close` has run."""
        return self._ctx.catalog.closed

    def _upgrade_schema(self) -> None:
        """Bring a catalog of an older schema up to date (a writer open, one transaction): a
        store made before text indexes, or whose text index holds unfolded text (schema 2),
        gains the text index of every stored page."""
        if self._meta["schema_version"] >= cat.SCHEMA_VERSION:
            return
        with self._ctx.catalog.write() as conn:
            # schema 4 folds invisible characters away: the FTS5 index is rebuilt with them
            n = text_sql.create_text_index(conn)
            log.info("%s: built the text index of %d pages (schema upgrade)", self.root, n)
            text_sql.create_text_log(conn)
            cat.write_meta(conn, "schema_version", cat.SCHEMA_VERSION)
        self._meta["schema_version"] = cat.SCHEMA_VERSION

    # ----------------------------------------------------------------- config

    @property
    def dim(self) -> int:
        """Vector width of every stored page."""
        return self._ctx.dim

    @property
    def config(self) -> dict[str, Any]:
        """A copy of the config recorded at creation."""
        return json.loads(json.dumps(self._meta["config"]))

    @property
    def library_version(self) -> str:
        """The vrag_compress version that created the store."""
        return str(self._meta.get("library_version", ""))

    def update_config(self, **changes: Any) -> None:
        """Merge ``changes`` into the stored config (``dim`` cannot change once pages exist)."""
        new = check_config({**self._meta["config"], **changes})
        check_layout(new)
        if new.get("fp16", True) != self._meta["config"].get("fp16", True):
            raise StoreError(
                f"fp16 of {self.root} changes only through optimize(fp16=...), which converts "
                "the stored vectors"
            )
        with self._ctx.catalog.write() as conn:
            if new["dim"] != self.dim and cat.count_pages(conn) > 0:
                raise StoreError(
                    f"cannot change dim of {self.root} from {self.dim}: it holds pages"
                )
            cat.write_meta(conn, "config", new)
        self._meta["config"] = new
        self._ctx.dim = new["dim"]
        self._ctx.set_config(new)

    def _check_expect(self, expect: dict[str, Any]) -> None:
        check_expect(str(self.root), self._meta["config"], expect)

    # ----------------------------------------------------------------- writes

    def add(self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord] = ()) -> None:
        """Store new pages (and upsert document rows) atomically; existing page ids are an error."""
        self._writer.write_pages(pages, documents, replace=False)
        self._catch_up_text()
        self._train_if_due()

    def upsert(self, pages: Sequence[PageRecord], documents: Sequence[DocumentRecord] = ()) -> None:
        """Like `add`, but pages whose id exists replace the stored ones."""
        self._writer.write_pages(pages, documents, replace=True)
        self._catch_up_text()
        self._train_if_due()

    def put_document(self, doc: DocumentRecord) -> None:
        """Insert or replace one document row."""
        self._writer.put_document(doc)

    def delete(self, *, doc_id: str | None = None, page_ids: Sequence[str] | None = None) -> int:
        """Delete a document's pages and its row, or the given pages; returns pages removed."""
        removed = self._writer.delete(doc_id=doc_id, page_ids=page_ids)
        self._catch_up_text()
        return removed

    def _catch_up_text(self) -> None:
        """Bring the BM25 engine index up to the committed pages. The pages are committed
        already: a failure here (tantivy missing, a full disk) is logged, and the index catches
        up on the next write, open or text search (readers search FTS5 meanwhile)."""
        try:
            self._text.catch_up()
        except (StoreError, OSError, ValueError) as exc:
            log.warning("%s: the text index did not catch up (%s)", self.root, exc)

    def compact(self) -> None:
        """Rewrite live vectors into fresh segments, dropping deleted rows and torn tails."""
        self._writer.compact()

    # ----------------------------------------------------------------- reads

    def count(self) -> int:
        """How many pages the store holds."""
        with self._ctx.catalog.read() as conn:
            return cat.count_pages(conn)

    def get(self, page_ids: Sequence[str], *, missing: str = "error") -> list[PageRecord]:
        """Pages in the order asked; unknown ids raise `PageNotFoundError` (or are skipped)."""
        ids = check_ids(page_ids)
        check_missing(missing)
        for _ in range(3):
            with self._ctx.catalog.read() as conn:
                gen = cat.generation(conn)
            try:
                return self._get(ids, missing)
            except FileNotFoundError as exc:  # replaced by a writer meanwhile, or missing
                with self._ctx.catalog.read() as conn:
                    if cat.generation(conn) == gen:
                        raise StoreCorruptError(str(exc.filename), "file is missing") from None
        return self._get(ids, missing)

    def _get(self, ids: list[str], missing: str) -> list[PageRecord]:
        # one snapshot: a compaction committed between reading the pages and the segment
        # lengths would leave a page in a segment the lengths no longer hold (issue 49.7)
        with self._ctx.catalog.snapshot() as conn:
            rows = cat.pages_by_id(conn, ids, "pid, " + cat.RECORD)
            seg_rows = cat.segment_rows(conn)
            coded = [r for r in rows if r[7] == seg.NO_SEGMENT]
            locations = [(r[0], r[7], r[8], r[9]) for r in coded]
            decoded = dict(
                zip(
                    [r[0] for r in coded],
                    page_vectors(self._ctx, conn, locations, self._centroids.coded_rows),
                    strict=True,
                )
            )
        found = {r[1]: r for r in rows}
        absent = [i for i in ids if i not in found]
        if absent and missing == "error":
            raise PageNotFoundError(f"{len(absent)} page ids not in {self.root}: {absent[:5]}")
        return [self._record(found[i], seg_rows, decoded) for i in ids if i in found]

    def _record(
        self, row: tuple, seg_rows: dict[int, int], decoded: dict[int, np.ndarray]
    ) -> PageRecord:
        """A page as stored (without fp16 vectors: decoded from its codes)."""
        pid, page_id, doc_id, page_no, meta, image_ref, text, seg_id, off, n, vcrc = row
        vec = decoded.get(pid)
        if vec is None:  # fp16 rows in a segment: checked against the row's checksum
            vec = self._ctx.vectors(seg_id, seg_rows[seg_id], off, n)
            if seg.vectors_crc(vec) != vcrc:
                raise StoreCorruptError(
                    str(self._ctx.segment_path(seg_id)), f"checksum mismatch for page {page_id!r}"
                )
        vectors = np.asarray(vec, dtype=np.float32)
        metadata = cat.metadata_dict(meta, f"page {page_id!r}")
        return PageRecord(page_id, doc_id, page_no, vectors, metadata, image_ref, text)

    def documents(self) -> list[DocumentRecord]:
        """Every document row, in document id order."""
        with self._ctx.catalog.read() as conn:
            return cat.documents(conn)

    def document(self, doc_id: str) -> DocumentRecord | None:
        """One document row, or None when the store has no such document."""
        check_id(doc_id, "doc_id")
        with self._ctx.catalog.read() as conn:
            return cat.document(conn, doc_id)

    def page_ids(self, doc_id: str | None = None) -> list[str]:
        """All page ids (sorted), or a document's in page order."""
        if doc_id is not None:
            check_id(doc_id, "doc_id")
        with self._ctx.catalog.read() as conn:
            return cat.page_ids(conn, doc_id)

    # ----------------------------------------------------------------- search

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
        """`search` for several queries; exact mode scores them all in one pass."""
        return self._searcher.search_many(
            queries,
            k,
            filter=filter,
            mode=mode,
            texts=texts,
            alpha=alpha,
            text_k=text_k,
            fts_syntax=fts_syntax,
        )

    def build_token_index(self) -> None:
        """Build the FAISS token index now instead of on the first two-stage search."""
        self._searcher.build_token_index()

    # ----------------------------------------------------------------- integrity

    def verify(self) -> VerifyReport:
        """Full check: SQLite integrity, row and vector CRCs, ranges, segment sizes, and the
        candidate index files (present, right shapes, checksums)."""
        return integrity.verify(self._ctx, self._index_problems)

    def _index_problems(self, conn: Any) -> list[str]:
        """The candidate and text indexes' problems, read in the caller's snapshot."""
        try:
            extra = self._centroids.verify(conn)
        except StoreCorruptError as exc:
            extra = [str(exc)]
        extra += self._text.problems(conn)
        problems = text_sql.text_index_problems(conn)
        return extra + [f"{self._ctx.catalog.path}: {p}" for p in problems]

    def rebuild_text_index(self) -> None:
        """Re-index every page's text, in FTS5 and in the BM25 engine (repairs a text index
        that `verify` found out of step); the applied change log is pruned."""
        with self._ctx.catalog.write() as conn:
            text_sql.rebuild_text_index(conn)
            if text_sql.has_text_log(conn):
                text_sql.prune_text_log(conn, text_sql.text_log_head(conn))
        self._text.rebuild()

    # ----------------------------------------------------------------- candidate index

    def optimize(
        self,
        *,
        codes: str | None = None,
        retrain: bool = False,
        recall_target: float | None = None,
        fp16: bool | None = None,
    ) -> dict[str, Any]:
        """Compact, then (re)train the centroid-code candidate index on every live page and
        return its description. ``codes`` ("none", "4bit", "2bit", "1bit") changes the residual
        codes kept per token (recorded in the config). Readers keep searching meanwhile.

        ``fp16=False`` switches a store that keeps fp16 rows to codes only, in place (the
        training's one commit drops the rows; see store/local/layout.py); an auto-layout store does
        so by itself here once it holds `layout.codes_threshold` vectors. ``fp16=True`` keeps
        the fp16 rows for good (an auto store stops following the size rule); a store whose
        rows are already gone cannot get them back and raises `StoreError`.

        A store without fp16 vectors trains its codes here if it has none yet (on the staged
        fp16 rows); once trained, its only copy is the codes, and retraining would re-encode
        decoded vectors (a little loss each time), so it only compacts unless the 4× growth
        rule is due and calls for another K, ``codes`` changes, or ``retrain`` asks for it (with
        a warning).

        The trained index measures itself and keeps the cheapest probes and rerank depth that
        reach ``recall_target`` recall@10 against exact search (kept in the config; default
        0.97; 0: the size rule). A new target is measured without retraining."""
        if recall_target is not None:
            if not 0 <= recall_target <= 1:
                raise StoreError(f"recall_target must be within 0..1, got {recall_target!r}")
            self.update_config(recall_target=float(recall_target))
        if codes is not None and codes not in CODES:
            raise StoreError(f"codes must be one of {CODES}, got {codes!r}")
        if fp16 is True:
            self._keep_fp16()
        if self._ctx.fp16 and (fp16 is False or self._auto_converts()):
            return self._switch_to_codes(codes)
        if codes is not None:
            try:
                check_layout({**self._meta["config"], "codes": codes})
            except StoreInputError as exc:
                raise StoreError(f"{self.root}: {exc}") from None
            retrain = retrain or codes != self._codes()
            self.update_config(codes=codes)
        self._centroids.wait()
        self.compact()
        self.rebuild_text_index()
        if self._codes_only_trained():
            with self._ctx.catalog.read() as conn:
                n_tokens = cat.live_vectors(conn)
            manifest = self._centroids.manifest_now() or {}
            if not (retrain or self._centroids.retrain_due(manifest, n_tokens)):
                if self._centroids.needs_tuning():  # measured for another target, or never
                    self._centroids.retune(self._snapshots.current())
                return self.index_info() or {}
            log.warning(
                "%s keeps no fp16 vectors: retraining re-encodes the decoded codes, which loses "
                "a little precision each time",
                self.root,
            )
        self._centroids.train(self._snapshots.current(), self._codes())
        return self.index_info() or {}

    def _auto_converts(self) -> bool:
        """The auto layout's size rule (store/local/layout.py) calls for codes now."""
        with self._ctx.catalog.read() as conn:
            n_tokens = cat.live_vectors(conn)
        return layout.converts(self._meta["config"], n_tokens, self.options.centroid_min_tokens)

    def _switch_to_codes(self, codes: str | None) -> dict[str, Any]:
        """Turn every page's fp16 rows into residual codes in place (crash-safe: one commit
        records the codes, the new config and drops the rows)."""
        if codes == "none":
            raise StoreError(
                f"{self.root}: a store without fp16 vectors searches its residual codes: "
                "use codes 4bit, 2bit or 1bit"
            )
        new = layout.codes_only(self._meta["config"], codes)
        try:
            check_layout(new)
        except StoreInputError as exc:
            raise StoreError(f"{self.root}: {exc}") from None
        self._centroids.wait()
        self.compact()
        self.rebuild_text_index()
        if self.count() == 0:  # nothing to encode: the layout alone changes
            self._write_config(new)
        else:
            self._centroids.train(self._snapshots.current(), new["codes"], config=new)
            self._meta["config"] = new
        log.info("%s now keeps %s codes and no fp16 vectors", self.root, new["codes"])
        return self.index_info() or {}

    def _keep_fp16(self) -> None:
        """``optimize(fp16=True)``: keep the fp16 rows for good; impossible once dropped."""
        config = self._meta["config"]
        if not self._ctx.fp16 and self._centroids.manifest_now() is not None:
            raise StoreError(layout.fp16_gone(self.root, self._codes()))
        if layout.is_auto(config) or not self._ctx.fp16:  # the rows are all still there
            self._write_config({k: v for k, v in config.items() if k not in ("layout", "fp16")})

    def _write_config(self, new: dict[str, Any]) -> None:
        """Commit a checked config that may change the layout keys (`update_config` may not)."""
        with self._ctx.catalog.write() as conn:
            cat.write_meta(conn, "config", new)
        self._meta["config"] = new
        self._ctx.set_config(new)

    def _codes_only_trained(self) -> bool:
        """A store without fp16 vectors whose codes exist (its only copy of the vectors)."""
        return not self._ctx.fp16 and self._centroids.manifest_now() is not None

    def index_info(self, *, measure_recall: bool = False) -> dict[str, Any] | None:
        """The candidate index's parameters and size (None without one); with
        ``measure_recall``, recall@10 of two-stage against exact search with a sample of stored
        pages (their first 32 vectors) as queries."""
        with self._ctx.catalog.read() as conn:
            n_pages = cat.count_pages(conn)
        info = self._centroids.describe(n_pages)
        if info is not None and measure_recall and n_pages:
            info.update(self._measure_recall(n_pages))
        return info

    def vector_layout(self) -> dict[str, Any]:
        """The layout as `vrag info` shows it (store/local/layout.py)."""
        return layout.describe(self._meta["config"])

    def staged_vectors(self) -> int:
        """Vectors a store without fp16 vectors still keeps as fp16 rows because its codes are
        not trained yet (see `StoreOptions.codes_min_tokens`); 0 once they are, and always 0
        in a store with fp16 vectors."""
        if self._ctx.fp16:
            return 0
        with self._ctx.catalog.read() as conn:
            if self._centroids.manifest(conn) is not None:
                return 0
            return cat.live_vectors(conn)

    def wait_for_index(self, timeout: float | None = None) -> None:
        """Block until a background training started by `add`/`upsert` has committed."""
        self._centroids.wait(timeout)

    def _measure_recall(self, n_pages: int) -> dict[str, Any]:
        """Recall@10 of two-stage against exact search on pseudo-queries drawn from stored
        pages the way the index's own tuning draws them (another sample of them)."""
        rng = np.random.default_rng(1)
        ids = self.page_ids()
        picked = sorted(rng.choice(len(ids), size=recall_sample_size(n_pages), replace=False))
        vectors = [r.vectors for r in self.get([ids[i] for i in picked])]
        bounds = np.concatenate([[0], np.cumsum([len(v) for v in vectors])]).astype(np.int64)
        _, queries = pseudo_queries(np.concatenate(vectors), bounds, len(vectors), seed=1)
        exact = self.search_many(queries, 10, mode="exact")
        two = self.search_many(queries, 10, mode="two_stage")
        overlap = [
            len({h.page_id for h in e} & {h.page_id for h in t}) / max(1, len(e))
            for e, t in zip(exact, two, strict=True)
        ]
        return {"recall@10": round(float(np.mean(overlap)), 4), "recall_queries": len(queries)}

    def _codes(self) -> str:
        return str(self._meta["config"].get("codes", "none"))

    def _train_if_due(self) -> None:
        """Start a background (re)training when the collection crossed the stated threshold;
        a store without fp16 vectors trains its first codes here (in the foreground) once its
        staged rows reach ``codes_min_tokens``, and an auto-layout store switches to codes here
        (in the foreground too) once it holds ``centroid_min_tokens`` (store/local/layout.py)."""
        with self._ctx.catalog.read() as conn:
            n_tokens = cat.live_vectors(conn)
        min_tokens = self.options.centroid_min_tokens
        if min_tokens > 0 and layout.converts(self._meta["config"], n_tokens, min_tokens):
            self._centroids.wait()  # the size rule: this training turns the rows into codes
            new = layout.codes_only(self._meta["config"], None)
            try:
                self._centroids.train(self._snapshots.current(), new["codes"], config=new)
                self._meta["config"] = new
            except Exception as exc:  # the pages committed as fp16 rows; the next write retries
                self._centroids.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("switching %s to codes failed: %s", self.root, exc)
            return
        if not self._ctx.fp16 and self._centroids.manifest_now() is None:
            if 0 < self.options.codes_min_tokens <= n_tokens:
                try:
                    self._centroids.train(self._snapshots.current(), self._codes())
                except Exception as exc:  # the pages committed, staged; the next write retries
                    self._centroids.last_error = f"{type(exc).__name__}: {exc}"
                    log.warning("training the codes of %s failed: %s", self.root, exc)
            return
        if self.options.centroid_min_tokens <= 0:
            return
        if self._centroids.wants_training(n_tokens):
            if not self._ctx.fp16:
                log.warning(
                    "%s keeps no fp16 vectors: the automatic retrain (4x growth) re-encodes the "
                    "decoded codes",
                    self.root,
                )
            self._centroids.train_in_background(self._snapshots.current, self._codes())
