"""Centroid scoring and exact MaxSim on a torch device (a CUDA GPU when one is present).

The same maths as the numpy path (`centroids.probe` / `list_scores` / `code_scores` and
`maxsim.maxsim_scores`) written with torch, so that a GPU does the products, the top-k cells and
the scatter-max over page lists. The device is chosen once per open store (`choose_device`); an
index's centroids, page lists and tail codes are copied to it once per index version, and each
search sends only the query and the vectors being scored. Tests run this code on the CPU device
and compare it with the numpy path.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.scoring.packed import auto_chunk, page_chunks, stack_queries

_NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")
_GROUP_FLOATS = 1 << 26  # bound of the [query tokens, pages] buffer of one scatter-max


def choose_device(option: str) -> str | None:
    """The torch device to score on, or None for numpy.

    ``"auto"``: CUDA when torch sees a GPU (torch is imported only when it already is or an
    NVIDIA driver is loaded, so that opening a store on a CPU machine stays fast); ``"numpy"``:
    never torch; anything else is a torch device name (``"cuda:1"``, ``"cpu"`` for tests)."""
    if option == "numpy":
        return None
    if option != "auto":
        import torch

        torch.device(option)  # a clear error for a bad name
        return option
    if "torch" not in sys.modules and not _NVIDIA_DRIVER.exists():
        return None
    import torch

    return "cuda" if torch.cuda.is_available() else None


class TorchScorer:
    """Scores queries against a candidate index or a token matrix on one torch device."""

    def __init__(self, device: str):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self._index_key: str | None = None
        self._index: dict[str, Any] = {}

    def _t(self, array: np.ndarray, dtype: Any = None) -> Any:
        """A device tensor copy of a (possibly read-only, memory-mapped) array."""
        tensor = self.torch.from_numpy(np.array(array, copy=True))
        return tensor.to(self.device, dtype=dtype)

    # ----------------------------------------------------------------- candidate index

    def _load(self, index: Any) -> dict[str, Any]:
        """The index's arrays on the device (copied once per index version)."""
        key = str(index.manifest["id"])
        if key != self._index_key:
            torch = self.torch
            tail = index.tail
            self._index = {
                "centroids": self._t(index.centroids, torch.float32),
                "indptr": self._t(index.indptr, torch.int64),
                "lists": self._t(index.lists, torch.int64),
                "n_base": len(index.base.pids),
                "tail_codes": self._t(tail.codes.astype(np.int64)),
                "tail_bounds": tail.bounds,
            }
            self._index_key = key
        return self._index

    def page_scores(self, index: Any, query: np.ndarray, nprobe: int) -> np.ndarray:
        """Approximate score of every slot of ``index`` (`CandidateIndex.scores` on the device)."""
        t = self._load(index)
        q = self._t(np.asarray(query, dtype=np.float32))
        cells, cell_scores, floor = self.probe(q, t["centroids"], nprobe)
        base = self._list_scores(cells, cell_scores, floor, t["indptr"], t["lists"], t["n_base"])
        if len(t["tail_bounds"]) > 1:
            tail = self._code_scores(cells, cell_scores, floor, t["tail_codes"], t["tail_bounds"])
            base = self.torch.cat([base, tail])
        return base.cpu().numpy()

    def probe(self, q: Any, centroids: Any, nprobe: int) -> tuple[Any, Any, Any]:
        """Each query token's ``nprobe`` best cells, their scores, and the imputed score of an
        unprobed cell (the ``(nprobe+1)``-th best; the worst cell when all are probed)."""
        sims = q @ centroids.T
        k = sims.shape[1]
        n = min(nprobe, k)
        scores, cells = self.torch.topk(sims, min(n + 1, k), dim=1, sorted=True)
        floor = scores[:, n] if n < k else sims.min(dim=1).values
        return cells[:, :n], scores[:, :n], floor

    def _list_scores(
        self, cells: Any, cell_scores: Any, floor: Any, indptr: Any, lists: Any, n_pages: int
    ) -> Any:
        torch = self.torch
        total = torch.full((n_pages,), float(floor.sum()), device=self.device)
        if n_pages == 0 or cells.numel() == 0:
            return total
        group = max(1, _GROUP_FLOATS // n_pages)
        for g0 in range(0, cells.shape[0], group):
            sel = cells[g0 : g0 + group]
            gain = (cell_scores[g0 : g0 + group] - floor[g0 : g0 + group, None]).reshape(-1)
            flat = sel.reshape(-1)
            starts = indptr[flat]
            lengths = indptr[flat + 1] - starts
            offsets = torch.cumsum(lengths, 0) - lengths
            n_rows = int(lengths.sum())
            rows = torch.repeat_interleave(starts - offsets, lengths) + torch.arange(
                n_rows, device=self.device
            )
            qtok = torch.repeat_interleave(
                torch.arange(len(flat), device=self.device) // sel.shape[1], lengths
            )
            best = torch.zeros(sel.shape[0] * n_pages, device=self.device)
            best.scatter_reduce_(
                0, qtok * n_pages + lists[rows], torch.repeat_interleave(gain, lengths), "amax"
            )
            total += best.view(sel.shape[0], n_pages).sum(dim=0)
        return total

    def _code_scores(
        self, cells: Any, cell_scores: Any, floor: Any, codes: Any, bounds: np.ndarray
    ) -> Any:
        torch = self.torch
        n_pages = len(bounds) - 1
        k = int(self._index["centroids"].shape[0])
        gain = torch.zeros((cells.shape[0], k), device=self.device)
        gain.scatter_(1, cells, cell_scores - floor[:, None])
        per_token = gain[:, codes]  # [M, T]
        page_of = self._t(np.repeat(np.arange(n_pages), np.diff(bounds)), torch.int64)
        best = self._segment_max(per_token, page_of, n_pages)
        return float(floor.sum()) + best.sum(dim=0)

    def _segment_max(self, values: Any, segment: Any, n_segments: int) -> Any:
        """Max over the columns of each segment: ``[rows, n_segments]``."""
        out = self.torch.full((values.shape[0], n_segments), -float("inf"), device=self.device)
        index = segment.unsqueeze(0).expand(values.shape[0], -1)
        return out.scatter_reduce_(1, index, values, "amax")

    # ----------------------------------------------------------------- exact MaxSim

    def maxsim(
        self,
        queries: Sequence[np.ndarray],
        tokens: Any,
        bounds: np.ndarray,
        *,
        chunk_tokens: int | None = None,
    ) -> np.ndarray:
        """``[Q, P]`` MaxSim (`maxsim.maxsim_scores` on the device): per chunk of whole pages one
        product, a scatter-max per page and an index-add per query."""
        torch = self.torch
        n_pages = len(bounds) - 1
        stacked, starts = stack_queries(queries)
        out = np.empty((len(queries), n_pages), dtype=np.float32)
        if n_pages == 0:
            return out
        q = self._t(stacked)
        lengths = np.diff(np.append(starts, len(stacked)))
        query_of = self._t(np.repeat(np.arange(len(queries)), lengths), torch.int64)
        dtype = tokens.dtype if isinstance(tokens, np.ndarray) else np.dtype(np.float16)
        for p0, p1 in page_chunks(bounds, chunk_tokens or auto_chunk(len(stacked), dtype)):
            rows = self._t(np.asarray(tokens[bounds[p0] : bounds[p1]]), torch.float32)
            page_of = self._t(np.repeat(np.arange(p1 - p0), np.diff(bounds[p0 : p1 + 1])))
            per_token = self._segment_max(q @ rows.T, page_of, p1 - p0)
            scores = torch.zeros((len(queries), p1 - p0), device=self.device)
            out[:, p0:p1] = scores.index_add_(0, query_of, per_token).cpu().numpy()
        return out
