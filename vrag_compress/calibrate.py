"""Label-free calibration of SAP's layer window: Score Retention per decoder layer
over (page, query) pairs, the trailing-drop window rule, profiles and their plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vrag_compress.beir import DatasetError, load_beir, read_jsonl
from vrag_compress.compress.base import CompressionError, budget
from vrag_compress.compress.common import page_stat, top_k_positions
from vrag_compress.compress.profiles import (
    BUILTIN_PROFILES,
    CalibrationProfile,
    ProfileError,
    builtin_profile,
)
from vrag_compress.encoders.base import PageEncoding
from vrag_compress.scoring import maxsim
from vrag_compress.scoring.packed import maxsim_scores

__all__ = [
    "BUILTIN_PROFILES",
    "CalibrationError",
    "CalibrationPair",
    "CalibrationProfile",
    "ProfileError",
    "build_profile",
    "builtin_profile",
    "load_calibration_pairs",
    "maxsim",
    "plot_sr_curve",
    "score_retention",
    "select_window",
    "sr_curve",
]


class CalibrationError(CompressionError):
    """Calibration inputs are missing or malformed."""


def score_retention(query: np.ndarray, full: np.ndarray, kept_vectors: np.ndarray) -> float:
    """``MaxSim(Q, kept) / MaxSim(Q, full)``; 1.0 when the full score is 0. Never clipped:
    merged pages can exceed 1."""
    full_score = maxsim(query, full)
    if full_score == 0.0:
        return 1.0
    return maxsim(query, kept_vectors) / full_score


def _pair_curve(page: PageEncoding, query: np.ndarray, ratio: float) -> np.ndarray:
    """SR of one pair for every single-layer SAP window {l}: [L]."""
    centrality = page_stat(page, "centrality")
    full = float(maxsim_scores([query], page.vectors, np.array([0, page.n_tokens]))[0, 0])
    if full == 0.0:
        return np.ones(centrality.shape[0])
    kept = top_k_positions(centrality.astype(np.float64), budget(page.n_tokens, ratio))  # [L, k]
    kept_bounds = np.arange(kept.shape[0] + 1, dtype=np.int64) * kept.shape[1]
    kept_scores = maxsim_scores([query], page.vectors[kept.reshape(-1)], kept_bounds)[0]  # [L]
    return kept_scores.astype(np.float64) / full


def sr_curve(
    encodings: Sequence[PageEncoding], query_vectors: Sequence[np.ndarray], ratio: float = 0.1
) -> np.ndarray:
    """Mean Score Retention over pairs of SAP with each single decoder layer as window: [L].

    encodings[i] (with centrality) pairs with query_vectors[i] ([M_i, D]).
    """
    if len(encodings) != len(query_vectors):
        raise CalibrationError(
            f"{len(encodings)} pages but {len(query_vectors)} queries; pass one query per page"
        )
    if not encodings:
        raise CalibrationError("no calibration pairs; pass at least one (page, query) pair")
    n_layers: int | None = None
    total = np.zeros(0)
    for i, (page, query) in enumerate(zip(encodings, query_vectors, strict=True)):
        _check_pair(i, page, query)
        depth = page_stat(page, "centrality").shape[0]
        if n_layers is None:
            n_layers, total = depth, np.zeros(depth)
        elif depth != n_layers:
            raise CalibrationError(
                f"pair {i}: page has {depth} layers, earlier pages {n_layers}; "
                "calibrate one model at a time"
            )
        total = total + _pair_curve(page, query, ratio)
    return total / len(encodings)


def _check_pair(i: int, page: PageEncoding, query: np.ndarray) -> None:
    if not isinstance(page, PageEncoding) or page.centrality is None:
        raise CalibrationError(
            f"pair {i}: the page needs attention statistics (encode_pages(..., with_stats=True))"
        )
    if page.n_tokens == 0:
        raise CalibrationError(f"pair {i}: the page has no visual tokens")
    query = np.asarray(query)
    if query.ndim != 2 or query.shape[1] != page.dim:
        raise CalibrationError(f"pair {i}: query must be [M, {page.dim}], got shape {query.shape}")
    if not (np.isfinite(query).all() and np.isfinite(page.vectors).all()):
        raise CalibrationError(f"pair {i}: NaN or inf in the page or query vectors")
    if not np.isfinite(page.centrality).all():
        raise CalibrationError(f"pair {i}: NaN or inf in the page centrality")


def select_window(curve: Sequence[float] | np.ndarray, rho: float = 0.2) -> tuple[int, int]:
    """The window rule: l* = start of the trailing run of layers with SR strictly below the median
    (l* = L when the last layer is not below it); window = [max(0, l* - w), l*) with
    w = ceil(rho * L), or the last w layers when l* = L. Returns (start, end_exclusive)."""
    values = np.asarray(curve, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise CalibrationError(
            f"SR curve must be a non-empty 1-D sequence, got shape {values.shape}"
        )
    if not np.isfinite(values).all():
        raise CalibrationError("SR curve contains NaN or inf")
    if not (isinstance(rho, (int, float)) and 0.0 < rho <= 1.0):
        raise CalibrationError(f"rho must be in (0, 1], got {rho!r}")
    n_layers = values.size
    median = float(np.median(values))
    l_star = n_layers
    while l_star > 0 and values[l_star - 1] < median:
        l_star -= 1
    width = math.ceil(rho * n_layers)
    if l_star == n_layers:
        return n_layers - width, n_layers
    return max(0, l_star - width), l_star


def build_profile(
    encodings: Sequence[PageEncoding],
    query_vectors: Sequence[np.ndarray],
    model_id: str,
    *,
    ratio: float = 0.1,
    rho: float = 0.2,
) -> CalibrationProfile:
    """Calibrate: SR curve at ``ratio`` over the pairs, window by `select_window`."""
    curve = sr_curve(encodings, query_vectors, ratio)
    start, end = select_window(curve, rho)
    return CalibrationProfile(
        model_id=model_id,
        n_layers=int(curve.size),
        window=tuple(range(start, end)),
        sr_curve=tuple(float(v) for v in curve),
        gamma=float(ratio),
        rho=float(rho),
        n_pairs=len(encodings),
        source="calibrated",
    )


def plot_sr_curve(profile: CalibrationProfile, out_png: str | Path) -> Path:
    """PNG of the per-layer SR curve with its median and the chosen window shaded."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    if profile.sr_curve is None:
        raise CalibrationError(
            f"profile for {profile.model_id!r} has no SR curve (built-in profiles do not); "
            "calibrate with `vrag calibrate` to get one"
        )
    curve = np.asarray(profile.sr_curve)
    layers = np.arange(curve.size)
    fig = Figure(figsize=(7, 3.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.axvspan(
        min(profile.window) - 0.5,
        max(profile.window) + 0.5,
        color="tab:orange",
        alpha=0.25,
        label=f"window {min(profile.window)}..{max(profile.window)}",
    )
    ax.plot(layers, curve, marker="o", color="tab:blue", label="SR (single-layer SAP)")
    ax.axhline(np.median(curve), color="gray", linestyle="--", linewidth=1, label="median")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("decoder layer")
    ax.set_ylabel(f"Score Retention at γ = {profile.gamma:g}")
    ax.set_title(f"{profile.model_id}: {profile.n_pairs} pairs, ρ = {profile.rho:g}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


@dataclass(frozen=True)
class CalibrationPair:
    """One unlabeled calibration pair: a page image file and a query about it."""

    image: Path
    query: str


def load_calibration_pairs(source: str | Path, limit: int | None = None) -> list[CalibrationPair]:
    """Pairs from a BEIR image folder (each judged query with its most relevant page; ties: the
    first in qrels order) or from a JSONL file of
    ``{"image": path, "query": text}`` (paths relative to the file's folder)."""
    source = Path(source)
    if source.is_dir():
        pairs = _beir_pairs(source)
    elif source.is_file():
        pairs = _jsonl_pairs(source)
    else:
        raise CalibrationError(f"calibration data not found: {source}")
    if not pairs:
        raise CalibrationError(f"no (image, query) pairs found in {source}")
    for pair in pairs:
        if not pair.image.is_file():
            raise CalibrationError(f"image not found: {pair.image} (listed in {source})")
    return pairs if limit is None else pairs[:limit]


def _jsonl_pairs(path: Path) -> list[CalibrationPair]:
    pairs = []
    for number, row in enumerate(read_jsonl(path, CalibrationError), start=1):
        if not isinstance(row.get("image"), str) or not isinstance(row.get("query"), str):
            raise CalibrationError(
                f"{path}: record {number} needs string fields 'image' and 'query', "
                f"got {sorted(row)}"
            )
        pairs.append(CalibrationPair(path.parent / row["image"], row["query"]))
    return pairs


def _beir_pairs(folder: Path) -> list[CalibrationPair]:
    """Each judged query of an image corpus with its most relevant page."""
    try:
        dataset = load_beir(folder)
    except DatasetError as error:
        raise CalibrationError(f"{folder} is not a readable BEIR folder: {error}") from error
    if dataset.kind != "image":
        raise CalibrationError(f"{folder}: calibration needs an image corpus ('image' in corpus)")
    return [
        CalibrationPair(Path(dataset.docs[dataset.best_document(q)]), dataset.queries[q])
        for q in dataset.judged_queries()
    ]
