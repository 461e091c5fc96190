"""What the parts of a `LocalStore` share: its folder, vector width, tuning options, the open
catalog and the segment memory maps. The write path, snapshot, search path and integrity checks
each take one `StoreContext` instead of reaching into the store object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.store.local import segments as seg
from vrag_compress.store.local.catalog import Catalog

DEFAULT_RECALL_TARGET = 0.97


@dataclass
class StoreOptions:
    """Tuning knobs (not persisted; pass them to `create`/`open`)."""

    # None: `auto` follows the cost model in search.py; a number: exact while the filtered
    # collection holds at most that many vectors
    exact_max_tokens: int | None = None
    ivf_min_tokens: int = 200_000
    candidates_per_token: int = 64
    nprobe: int = 32
    segment_max_bytes: int = 1 << 30
    cache_fp32_max_bytes: int = 1 << 30
    # open also runs quick_check and every row and vector CRC while the catalog and segment
    # files take at most this many bytes (0: never); above, those checks, which grow with the
    # collection, are `verify`'s and open stays O(1)
    verify_on_open_max_bytes: int = 64 << 20
    check_on_open: bool = True
    chunk_tokens: int | None = None  # None: as large as a 256 MB score block allows
    # threads one search uses: a two-stage query splits its page-list work and rerank over
    # them, several queries (search_many) run one per thread, an exact pass splits its chunks;
    # BLAS runs one thread meanwhile (1: BLAS threads the products itself)
    threads: int = 1
    # centroid-code candidate index (candidates.py): trained automatically once the store
    # holds this many vectors (0 or less: only by `optimize`); probes and rerank depth follow
    # the collection size unless fixed here
    centroid_min_tokens: int = 500_000
    # a store without fp16 vectors keeps its pages as fp16 rows ("staged") until it holds this
    # many vectors, then trains its codes on all of them and drops the rows (0 or less: only
    # `optimize` trains); 65,536 = 64 tokens per cell of the smallest K (1,024)
    codes_min_tokens: int = 65_536
    # the recall@10 against exact search the candidate index is tuned to reach: after each
    # training it measures itself on pseudo-queries of the collection and keeps the cheapest
    # probes and rerank depth that reach it (store/candidates/tuning.py); 0: the size rule instead;
    # None: the store config's ``recall_target`` (set by `optimize(recall_target=...)`), 0.97
    recall_target: float | None = None
    centroid_nprobe: int | None = None
    rerank_depth: int | None = None
    # where centroid scores and exact MaxSim run: "auto" (a CUDA GPU through torch when one is
    # present, else numpy), "numpy", or a torch device name ("cuda:1"; "cpu" runs the torch code
    # on the CPU, for tests)
    device: str = "auto"
    # plain text queries: "auto" (the BM25 engine with top-k pruning, text_engine.py; FTS5,
    # with a warning, while its index is damaged), "tantivy" (the engine; a damaged index
    # raises `TextIndexError` naming the file) or "fts5" (SQLite FTS5 in the catalog, which
    # scores every matching page; raw FTS5 syntax and readers of an engine index that is
    # behind always use it)
    text_engine: str = "auto"


@dataclass
class StoreContext:
    """One open store's shared state; ``dim`` is 0 until the catalog's config was read."""

    root: Path
    options: StoreOptions
    catalog: Catalog
    dim: int = 0
    # from the config: False keeps no fp16 rows (vectors live only as the candidate index's
    # centroid + residual codes, which are then ``codes``)
    fp16: bool = True
    codes: str = "none"
    config_recall_target: float = DEFAULT_RECALL_TARGET
    scorer: Any = None  # a `TorchScorer` when searches run on a torch device, else None (numpy)
    maps: seg.SegmentMaps = field(init=False)

    def __post_init__(self) -> None:
        self.maps = seg.SegmentMaps(self.root)

    @property
    def row_bytes(self) -> int:
        """Bytes of one stored vector (fp16)."""
        return self.dim * seg.DTYPE.itemsize

    def vectors(self, seg_id: int, committed_rows: int, offset: int, n: int) -> np.ndarray:
        """A page's stored fp16 vectors (a view into the segment's memory map)."""
        return self.maps.rows(seg_id, committed_rows, self.dim)[offset : offset + n]

    def set_config(self, config: dict) -> None:
        """Take the vector layout from the store's config."""
        self.fp16 = config.get("fp16", True) is not False
        self.codes = str(config.get("codes", "none"))
        self.config_recall_target = float(config.get("recall_target", DEFAULT_RECALL_TARGET))

    def refresh_config(self, conn: Any) -> None:
        """Take the layout from the config committed as of ``conn``'s transaction: a writer in
        another process may have switched the store to codes only since this one opened."""
        row = conn.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()
        try:
            config = json.loads(row[0]) if row else None
        except ValueError:  # damaged: the meta checksum reports it; keep the layout read at open
            return
        if isinstance(config, dict):
            self.set_config(config)

    @property
    def recall_target(self) -> float:
        """The recall@10 the candidate index tunes itself for (0: it does not)."""
        option = self.options.recall_target
        return self.config_recall_target if option is None else float(option)

    def segment_path(self, seg_id: int) -> Path:
        return seg.segment_path(self.root, seg_id)
