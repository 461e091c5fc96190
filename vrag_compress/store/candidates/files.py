"""The persisted centroid-code candidate index of a store (files under ``centroids/``).

One index is a set of immutable ``.npy`` files plus a manifest (a JSON dict the store keeps in
its catalog and commits in the same transaction as the pages the files describe)::

    centroids/
      c<id>-centroids.npy   [K, D] float32 unit centroids
      c<id>-cutoffs.npy     [D, 2^b-1] residual bucket cutoffs   (only with 4bit/2bit/1bit codes)
      c<id>-weights.npy     [D, 2^b]   residual bucket values
      c<id2>-pids.npy       [P] int64  catalog page keys of the part's pages ("slots")
      c<id2>-bounds.npy     [P+1] int64 token offsets of each page in the part
      c<id2>-codes.npy      [T] uint16 centroid id of every token
      c<id2>-indptr.npy     [K+1] int64 ┐ per-centroid page lists (CSR) of the base part;
      c<id2>-lists.npy      [nnz] int32 ┘ appended (tail) parts are scored from their codes
      c<id2>-resid.npy      [T, D·b/8] uint8 packed residuals    (only with 4bit/2bit/1bit codes)

``<id>`` is random (never reused). Files are written to a temporary name, fsync'ed and renamed
before the catalog commit that references them, and never modified: an append writes a new
tail part, a merge (compaction) or a retrain writes a new base, and files no manifest
references are orphans that the next writer removes. Deleted pages stay in the files until the
next merge; searches mask them. Opening maps the files (no rebuild): milliseconds at any size.
"""

from __future__ import annotations

import logging
import secrets
import threading
import zlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.durable import atomic_write, fsync_folder
from vrag_compress.scoring.packed import gather_pages, parallel_map
from vrag_compress.store.base import StoreCorruptError
from vrag_compress.store.candidates import cells as cz
from vrag_compress.store.candidates.codec import ResidualCodec
from vrag_compress.store.candidates.kernels import (
    CODED_SCORE_BAND,
    byte_table,
    coded_maxsim,
    decode_rows,
)
from vrag_compress.store.candidates.token_rows import LazyTokens

log = logging.getLogger(__name__)

INDEX_DIR = "centroids"
FORMAT = 1
NBITS = {"none": 0, "4bit": 4, "2bit": 2, "1bit": 1}
_CRC_CHUNK = 1 << 26
MERGE_TAIL_FRACTION = 0.25  # merge tails into the base past this share of its tokens ...
MERGE_MAX_TAILS = 64  # ... or this many tail parts


@dataclass
class _Part:
    """Pages of one base or tail part (arrays may be memory maps)."""

    pids: np.ndarray
    bounds: np.ndarray
    codes: np.ndarray
    resid: np.ndarray | None


def token_halves(n_tokens: int) -> list[tuple[int, int]]:
    """A query's tokens as two spans (one below two tokens), how `CandidateIndex.probe` splits
    its top-cell selection over two threads."""
    half = n_tokens // 2
    return [(0, half), (half, n_tokens)] if half else [(0, n_tokens)]


def _save(folder: Path, name: str, array: np.ndarray, crcs: dict[str, int]) -> str:
    """Write one immutable array file crash-safely (the folder is synced once, by `finish`);
    record its CRC."""
    array = np.ascontiguousarray(array)
    atomic_write(
        folder / name, lambda handle: np.save(handle, array, allow_pickle=False), sync_folder=False
    )
    crcs[name] = _crc(array)
    return name


def _crc(array: np.ndarray) -> int:
    flat = array.reshape(-1).view(np.uint8) if array.size else np.empty(0, np.uint8)
    crc = 0
    for start in range(0, len(flat), _CRC_CHUNK):
        crc = zlib.crc32(flat[start : start + _CRC_CHUNK].tobytes(), crc)
    return crc


def _load(folder: Path, name: str) -> np.ndarray:
    path = folder / name
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise
    except Exception as exc:  # numpy's header parser raises many kinds on a damaged file
        raise StoreCorruptError(str(path), f"unreadable candidate index file: {exc}") from exc


class _Writer:
    """Writes new files under random never-reused names, so that writers working from
    different manifests (a background retrain and a foreground add) cannot collide.
    ``reserve`` is told each name before its file is written (to protect it from
    `remove_orphans` until the manifest naming it is committed)."""

    def __init__(self, root: Path, reserve: Callable[[str], None] | None = None):
        self.folder = root / INDEX_DIR
        self.folder.mkdir(exist_ok=True)
        self.crcs: dict[str, int] = {}
        self.reserve = reserve

    def group(self) -> str:
        name = f"c{secrets.token_hex(6)}"
        if self.reserve is not None:
            self.reserve(name)
        return name

    def part(self, part: _Part, lists: tuple[np.ndarray, np.ndarray] | None) -> dict[str, Any]:
        g = self.group()
        files = {
            "pids": _save(self.folder, f"{g}-pids.npy", part.pids.astype(np.int64), self.crcs),
            "bounds": _save(
                self.folder, f"{g}-bounds.npy", part.bounds.astype(np.int64), self.crcs
            ),
            "codes": _save(self.folder, f"{g}-codes.npy", part.codes, self.crcs),
        }
        if lists is not None:
            files["indptr"] = _save(self.folder, f"{g}-indptr.npy", lists[0], self.crcs)
            files["lists"] = _save(self.folder, f"{g}-lists.npy", lists[1], self.crcs)
        if part.resid is not None:
            files["resid"] = _save(self.folder, f"{g}-resid.npy", part.resid, self.crcs)
        return {"files": files, "pages": len(part.pids), "tokens": int(part.bounds[-1])}

    def finish(self) -> None:
        fsync_folder(self.folder)


def manifest_files(manifest: dict[str, Any] | None) -> set[str]:
    """Every file name a manifest references."""
    if not manifest:
        return set()
    names = {manifest["centroids"], *manifest.get("codec", [])}
    for part in [manifest["base"], *manifest["tails"]]:
        names.update(part["files"].values())
    return names


def remove_orphans(
    root: Path, manifest: dict[str, Any] | None, reserved: Collection[str] = ()
) -> int:
    """Delete index files (and temporaries) that the committed manifest does not reference,
    except those of ``reserved`` name groups (being written for a manifest not committed yet)."""
    folder = root / INDEX_DIR
    if not folder.is_dir():
        return 0
    keep = manifest_files(manifest)
    removed = 0
    for entry in folder.iterdir():
        group = entry.name.lstrip(".").split("-", 1)[0]  # temporaries are ".<name>.<pid>.tmp"
        if entry.name not in keep and group not in reserved:
            entry.unlink(missing_ok=True)
            removed += 1
    if removed:
        fsync_folder(folder)
    return removed


def verify_files(root: Path, manifest: dict[str, Any]) -> list[str]:
    """Problems with the index files: missing, unreadable, wrong shape, or failing their CRC."""
    folder = root / INDEX_DIR
    problems = [
        p
        for p in (_file_problem(folder, n, manifest) for n in sorted(manifest_files(manifest)))
        if p
    ]
    if not problems:
        try:
            CandidateIndex.open(root, manifest)
        except StoreCorruptError as exc:
            problems.append(str(exc))
        except FileNotFoundError as exc:  # vanished since its check (a newer generation)
            problems.append(f"{exc.filename}: candidate index file is missing")
    return problems


def check_files(root: Path, manifest: dict[str, Any], names: Collection[str] | None = None) -> None:
    """Raise `StoreCorruptError` naming the first of ``names`` (default: every file of the
    manifest) that is missing, unreadable or fails its checksum: what a rewrite reads must be
    checked first, or the new files would seal the damage under fresh checksums."""
    folder = root / INDEX_DIR
    for name in sorted(manifest_files(manifest) if names is None else names):
        problem = _file_problem(folder, name, manifest)
        if problem:
            file, _, detail = problem.partition(": ")
            raise StoreCorruptError(file, detail)


# What reading a damaged index file raises besides `StoreCorruptError` (out-of-range list entries,
# shapes that do not broadcast, a header claiming a huge array).
DAMAGE_SIGNS = (IndexError, ValueError, TypeError, KeyError, OverflowError, MemoryError, EOFError)


def first_damage(root: Path, manifest: dict[str, Any] | None) -> StoreCorruptError | None:
    """The first file of ``manifest`` that is missing, unreadable or fails its checksum (None
    when all are sound): names the file behind an error that reading the index raised."""
    if not manifest:
        return None
    try:
        check_files(root, manifest)
    except StoreCorruptError as exc:
        return exc
    return None


def _file_problem(folder: Path, name: str, manifest: dict[str, Any]) -> str | None:
    path = folder / name
    try:
        array = _load(folder, name)
    except FileNotFoundError:
        return f"{path}: candidate index file is missing"
    except StoreCorruptError as exc:
        return f"{exc.file}: {exc.detail}"
    if _crc(np.asarray(array)) != manifest["crc"].get(name):
        return f"{path}: candidate index file fails its checksum"
    return None


def train(
    root: Path,
    pids: np.ndarray,
    bounds: np.ndarray,
    tokens: np.ndarray,
    *,
    codes: str = "none",
    seed: int = 0,
    gpu: bool | None = None,
    reserve: Callable[[str], None] | None = None,
    k: int | None = None,
) -> dict[str, Any]:
    """Train centroids on the given pages, encode all their tokens, write a new base; returns
    the manifest to commit. ``k``: that many cells instead of the size rule's."""
    if codes not in NBITS:
        raise ValueError(f"codes must be one of {tuple(NBITS)}, got {codes!r}")
    total = int(bounds[-1])
    if len(tokens) != total or len(pids) != len(bounds) - 1:
        raise ValueError(f"{len(pids)} pages with {total} tokens, got {len(tokens)} token rows")
    k = cz.choose_k(total) if k is None else max(1, min(int(k), cz.MAX_K, total))
    sample = cz.training_sample(total, k, seed=seed)
    centroids = cz.train_centroids(
        np.asarray(tokens[sample], dtype=np.float32), k, seed=seed, gpu=gpu
    )
    code_ids = cz.assign(tokens, centroids)
    centroids, code_ids = cz.split_heavy_cells(tokens, centroids, code_ids, seed=seed, gpu=gpu)
    k = len(centroids)
    w = _Writer(root, reserve)
    g = w.group()
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "k": k,
        "k_rule": cz.choose_k(total),  # K before heavy cells were split (the size rule's)
        "dim": int(centroids.shape[1]),
        "codes": codes,
        "trained_tokens": total,
        "centroids": _save(w.folder, f"{g}-centroids.npy", centroids, w.crcs),
        "codec": [],
    }
    codec = None
    if NBITS[codes]:
        resid = np.asarray(tokens[sample], dtype=np.float32) - centroids[code_ids[sample]]
        codec = ResidualCodec.fit(resid, NBITS[codes])
        manifest["codec"] = [
            _save(w.folder, f"{g}-cutoffs.npy", codec.cutoffs, w.crcs),
            _save(w.folder, f"{g}-weights.npy", codec.weights, w.crcs),
        ]
    part = _Part(
        np.asarray(pids, dtype=np.int64),
        np.asarray(bounds, dtype=np.int64),
        code_ids,
        None if codec is None else codec.encode(tokens, code_ids, centroids),
    )
    manifest["base"] = w.part(part, cz.build_lists(part.codes, part.bounds, k))
    manifest["tails"] = []
    w.finish()
    manifest["id"] = secrets.token_hex(8)
    manifest["crc"] = w.crcs
    return manifest


class CandidateIndex:
    """An opened (memory-mapped) candidate index: scores slots, encodes and decodes tokens."""

    def __init__(self, root: Path, manifest: dict[str, Any]):
        self.root = root
        self.manifest = manifest
        folder = root / INDEX_DIR
        self.k = int(manifest["k"])
        self.centroids = np.asarray(_load(folder, manifest["centroids"]), dtype=np.float32)
        self.codec = None
        if manifest["codec"]:
            cutoffs, weights = (np.asarray(_load(folder, n)) for n in manifest["codec"])
            self.codec = ResidualCodec(NBITS[manifest["codes"]], cutoffs, weights)
        files = manifest["base"]["files"]
        self.base = self._part(folder, files)
        self.indptr = _load(folder, files["indptr"])
        self.lists = _load(folder, files["lists"])
        tails = [self._part(folder, t["files"]) for t in manifest["tails"]]
        width = 0 if self.codec is None else self.codec.bytes_per_token
        self.tail = _concat(tails, self.codec is not None, width)
        self.slot_pids = np.concatenate([self.base.pids, self.tail.pids]).astype(np.int64)
        self.slot_bounds = np.concatenate(
            [self.base.bounds, self.tail.bounds[1:] + self.base.bounds[-1]]
        )
        self._check_shapes()
        self._kernel_arrays: tuple[Any, ...] | None = None
        self._norm_bound: float | None = None
        self._sims = threading.local()

    @classmethod
    def open(cls, root: Path, manifest: dict[str, Any]) -> CandidateIndex:
        return cls(Path(root), manifest)

    def _part(self, folder: Path, files: dict[str, str]) -> _Part:
        return _Part(
            _load(folder, files["pids"]),
            _load(folder, files["bounds"]),
            _load(folder, files["codes"]),
            _load(folder, files["resid"]) if "resid" in files else None,
        )

    def _check_shapes(self) -> None:
        folder = self.root / INDEX_DIR
        m = self.manifest
        base = m["base"]["files"]
        checks = [
            (m["centroids"], self.centroids.shape == (self.k, m["dim"])),
            (base["indptr"], self.indptr.shape == (self.k + 1,)),
            (base["lists"], len(self.lists) == (int(self.indptr[-1]) if self.k else 0)),
            (base["bounds"], len(self.base.bounds) == len(self.base.pids) + 1),
            (base["codes"], len(self.base.codes) == int(self.base.bounds[-1])),
        ]
        if self.codec is not None:
            width = m["dim"] * self.codec.nbits // 8
            resid = self.base.resid
            shape = None if resid is None else resid.shape
            checks.append((base["resid"], shape == (len(self.base.codes), width)))
        for name, ok in checks:
            if not ok:
                raise StoreCorruptError(str(folder / name), "candidate index file has wrong shape")

    # ----------------------------------------------------------------- properties

    @property
    def n_slots(self) -> int:
        return len(self.slot_pids)

    @property
    def n_tokens(self) -> int:
        return int(self.slot_bounds[-1])

    def nbytes(self) -> int:
        """Bytes of the index files (what the index adds to the store's size)."""
        folder = self.root / INDEX_DIR
        return sum((folder / n).stat().st_size for n in manifest_files(self.manifest))

    def needs_merge(self) -> bool:
        tails = self.manifest["tails"]
        return len(tails) > MERGE_MAX_TAILS or (
            self.tail.bounds[-1] > MERGE_TAIL_FRACTION * max(int(self.base.bounds[-1]), 1)
        )

    # ----------------------------------------------------------------- search

    def scores(self, query: np.ndarray, nprobe: int) -> np.ndarray:
        """Approximate score of every slot ``[n_slots]`` (deleted pages included; mask them)."""
        slots, scores, floor_sum = self.touched_scores(query, nprobe)
        out = np.full(self.n_slots, floor_sum, dtype=np.float32)
        out[slots] = scores
        return out

    def touched_scores(
        self, query: np.ndarray, nprobe: int, threads: int = 1
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """The slots the probed cells name (base pages from their lists, every tail page from
        its codes), their approximate scores (float64), and the score of every other slot.

        ``threads > 1`` split the probe's query tokens (`probe`) and the base pages into
        ranges (`kernels.list_gains`: the same sums in the same order on any number of
        threads)."""
        return self.probed_scores(*self.probe(query, nprobe, threads), threads=threads)

    def probe(
        self, query: np.ndarray, nprobe: int, threads: int = 1
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`cells.probe` of the query on its kept centroid product (`query_sims`).

        The top-cell selection is row-wise, so ``threads > 1`` select the two halves of the
        query's tokens side by side (`token_halves`): the same cells and scores as one pass.
        The product itself stays one call: it reads every centroid once, and two halves read
        them twice (4.7 against 3.1 ms at 16k cells, measured)."""
        query = np.ascontiguousarray(query, dtype=np.float32)
        sims = self.query_sims(query)
        parts = parallel_map(
            lambda span: cz.probe(query[slice(*span)], self.centroids, nprobe, sims[slice(*span)]),
            token_halves(len(query)),
            threads,
        )
        cells, scores, floor = (np.concatenate([part[i] for part in parts]) for i in range(3))
        return cells, scores, floor

    def query_sims(self, query: np.ndarray) -> np.ndarray:
        """``query @ centroids.T`` (float32 ``[M, K]``), kept for the last query of each thread:
        the candidate stage and the rerank of one search both need it (at 65k cells it is a
        third of a reranked page set's work). Matched by the query's values, not its object,
        so a caller refilling one array between searches never gets another query's product."""
        query = np.ascontiguousarray(query, dtype=np.float32)
        kept = getattr(self._sims, "kept", None)
        if kept is not None and kept[0].shape == query.shape and np.array_equal(kept[0], query):
            return kept[1]
        sims = query @ self.centroids.T
        self._sims.kept = (query.copy(), sims)
        return sims

    def probed_scores(
        self, cells: np.ndarray, cell_scores: np.ndarray, floor: np.ndarray, threads: int = 1
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """`touched_scores` of a query already probed (`centroids.probe`)."""
        slots, scores = cz.touched_scores(
            cells, cell_scores, floor, self.indptr, self.lists, len(self.base.pids), threads
        )
        floor_sum = float(floor.sum(dtype=np.float64))
        if len(self.tail.pids) == 0:
            return slots, scores, floor_sum
        tail = cz.code_scores(cells, cell_scores, floor, self.tail.codes, self.tail.bounds, self.k)
        tail_slots = len(self.base.pids) + np.arange(len(tail), dtype=np.int64)
        return np.concatenate([slots, tail_slots]), np.concatenate([scores, tail]), floor_sum

    def token_norm_bound(self) -> float:
        """No decoded token is longer than this: the longest centroid plus the longest residual
        the codec can produce (per dimension its largest bucket value)."""
        if self._norm_bound is None:
            longest = float(np.sqrt((self.centroids.astype(np.float64) ** 2).sum(axis=1).max()))
            weights = np.zeros((1, 1)) if self.codec is None else self.codec.weights
            resid = float(np.sqrt((np.abs(weights).astype(np.float64).max(axis=1) ** 2).sum()))
            self._norm_bound = longest + resid
        return self._norm_bound

    def decode(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Approximate float32 tokens of the given slots (residual codes) and their bounds."""
        rows, bounds = gather_pages(self.slot_bounds, np.asarray(slots, dtype=np.int64))
        return self.decode_rows(rows), bounds

    def decode_rows(self, rows: np.ndarray) -> np.ndarray:
        """Approximate float32 tokens ``[len(rows), D]`` of token rows (base rows first, then
        the tails') from their centroid and residual codes (`kernels.decode_rows`: what
        `ResidualCodec.decode` gives)."""
        return decode_rows(self, np.asarray(rows, dtype=np.int64))

    def kernel_arrays(self) -> tuple[Any, ...]:
        """What `kernels.coded_maxsim` reads: ``n_base``, the base and tail codes and
        residuals (plain arrays over the memory maps), the centroids and the byte table."""
        if self._kernel_arrays is None:
            base_resid, tail_resid = self.base.resid, self.tail.resid
            if self.codec is None or base_resid is None or tail_resid is None:
                raise ValueError("this candidate index keeps no residual codes")
            self._kernel_arrays = (
                int(self.base.bounds[-1]),
                np.asarray(self.base.codes),
                np.asarray(base_resid),
                np.asarray(self.tail.codes).astype(self.base.codes.dtype, copy=False),
                np.asarray(tail_resid),
                np.ascontiguousarray(self.centroids, dtype=np.float32),
                byte_table(np.asarray(self.codec.weights, np.float32), self.codec.nbits),
            )
        return self._kernel_arrays

    def slots_of(self, pids: np.ndarray) -> np.ndarray:
        """The slot of each pid (its newest when several hold it); -1 where none does."""
        pids = np.asarray(pids, dtype=np.int64)
        order = np.argsort(self.slot_pids, kind="stable")
        sorted_pids = self.slot_pids[order]
        # the last slot of equal pids is the newest (tails are appended in write order)
        idx = np.searchsorted(sorted_pids, pids, side="right") - 1
        ok = (idx >= 0) & (sorted_pids[np.maximum(idx, 0)] == pids) if len(order) else idx < -1
        return np.where(ok, order[np.maximum(idx, 0)] if len(order) else -1, -1)

    def tokens_of(self, pids: np.ndarray, cache_bytes: int) -> CodedTokens:
        """The decoded-on-demand token matrix of these pages (in this order); a page the index
        lacks means a damaged store."""
        slots = self.slots_of(pids)
        if (slots < 0).any():
            raise StoreCorruptError(
                str(self.root / INDEX_DIR),
                f"{int((slots < 0).sum())} pages without fp16 vectors are missing from the "
                "candidate index",
            )
        return CodedTokens(self, slots, cache_bytes)

    # ----------------------------------------------------------------- changes

    def append(self, pids: np.ndarray, bounds: np.ndarray, tokens: np.ndarray) -> dict[str, Any]:
        """Assign new pages' tokens to the existing centroids in a new tail part; returns the
        manifest to commit."""
        check_files(self.root, self.manifest, [self.manifest["centroids"], *self.manifest["codec"]])
        codes = cz.assign(tokens, self.centroids)
        resid = None if self.codec is None else self.codec.encode(tokens, codes, self.centroids)
        w = _Writer(self.root)
        tail = w.part(_Part(np.asarray(pids, np.int64), np.asarray(bounds), codes, resid), None)
        w.finish()
        return self._updated(w, tails=[*self.manifest["tails"], tail])

    def merge(self, live_pids: np.ndarray) -> dict[str, Any]:
        """Rewrite base and tails as one base holding only ``live_pids`` (the lists rebuilt);
        returns the manifest to commit."""
        check_files(self.root, self.manifest)
        keep = np.flatnonzero(np.isin(self.slot_pids, live_pids))
        rows, bounds = gather_pages(self.slot_bounds, keep)
        codes = np.concatenate([self.base.codes, self.tail.codes])[rows]
        resid = None
        if self.base.resid is not None and self.tail.resid is not None:
            resid = np.concatenate([self.base.resid, self.tail.resid])[rows]
        part = _Part(self.slot_pids[keep], bounds, codes, resid)
        w = _Writer(self.root)
        base = w.part(part, cz.build_lists(codes, bounds, self.k))
        w.finish()
        return self._updated(w, base=base, tails=[])

    def _updated(self, w: _Writer, **changes: Any) -> dict[str, Any]:
        manifest = {**self.manifest, **changes, "id": secrets.token_hex(8)}
        names = manifest_files(manifest)
        manifest["crc"] = {
            n: c for n, c in {**self.manifest["crc"], **w.crcs}.items() if n in names
        }
        return manifest


def _concat(parts: list[_Part], with_resid: bool, width: int) -> _Part:
    """One in-memory part from the tail parts (slots in append order)."""
    if not parts:
        return _Part(
            np.empty(0, np.int64),
            np.zeros(1, np.int64),
            np.empty(0, np.uint16),
            np.empty((0, width), np.uint8) if with_resid else None,
        )
    offsets = np.cumsum([0] + [int(p.bounds[-1]) for p in parts[:-1]])
    bounds = np.concatenate(
        [np.zeros(1, np.int64)] + [p.bounds[1:] + o for p, o in zip(parts, offsets, strict=True)]
    )
    resid = np.concatenate([p.resid for p in parts]) if with_resid else None
    return _Part(
        np.concatenate([p.pids for p in parts]),
        bounds,
        np.concatenate([p.codes for p in parts]),
        resid,
    )


class CodedTokens(LazyTokens):
    """The token matrix of some pages rebuilt from their codes on demand: what a store without
    fp16 vectors searches (row reads and the fp32 cache: `LazyTokens`). Opening and the first
    two-stage answer therefore decode only the reranked pages.

    A page's tokens are consecutive index rows from ``starts[page]``; keeping that (8 bytes a
    page) instead of every token's index row (8 bytes a token: 824 MB at 1M pages, built at the
    first search) is what keeps a large store's open and memory small."""

    def __init__(self, index: CandidateIndex, slots: np.ndarray, cache_bytes: int = 0):
        self.index = index
        slots = np.asarray(slots, np.int64)
        self.starts = index.slot_bounds[slots]
        self.bounds = np.zeros(len(slots) + 1, dtype=np.int64)
        np.cumsum(index.slot_bounds[slots + 1] - self.starts, out=self.bounds[1:])
        super().__init__(int(self.bounds[-1]), int(index.centroids.shape[1]), cache_bytes)

    def _read(self, rows: np.ndarray) -> np.ndarray:
        page = np.searchsorted(self.bounds, rows, side="right") - 1
        return self.index.decode_rows(self.starts[page] + (rows - self.bounds[page]))

    def maxsim(self, q: np.ndarray, pages: np.ndarray, threads: int = 1) -> np.ndarray:
        """MaxSim of ``q`` against the given pages (positions in this matrix's page order),
        scored from their codes without decoding them to a matrix: as fast as BLAS over rows
        decoded already, and no decoded copy is kept (the point of a codes-only store)."""
        pages = np.asarray(pages, dtype=np.int64)
        starts = self.starts[pages]
        lengths = self.bounds[pages + 1] - self.bounds[pages]
        return coded_maxsim(q, self.index, starts, lengths, threads, self.index.query_sims(q))

    def maxsim_error(self, q: np.ndarray) -> float:
        """The most a `maxsim` score can differ from the decoded page's (fp16 rows): per query
        token 2^-11 of |q_m| times the largest norm a decoded token can have."""
        norms = np.linalg.norm(np.asarray(q, dtype=np.float64), axis=1)
        return CODED_SCORE_BAND * float(norms.sum()) * self.index.token_norm_bound()
