"""Fusing the visual (MaxSim) and text (BM25) rankings of one query into one hybrid ranking.

Two ways, both over the candidates each side returned (after the same metadata filter):

- reciprocal rank fusion (the default): a page scores ``sum(1 / (RRF_K + rank))`` over the sides
  that found it (rank 1 is the best). It needs no score calibration, which MaxSim sums and BM25
  scores lack, and a page that both sides rank well beats one only one side likes.
- interpolation (``alpha`` given): each side's scores are min-max normalised to [0, 1] over its
  candidates, then ``alpha * visual + (1 - alpha) * text`` (a side that did not find the page adds
  0). ``alpha=1`` is the visual ranking, ``alpha=0`` the text ranking, as in LlamaIndex.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from vrag_compress.store.validate import StoreInputError

RRF_K = 60  # the constant of Cormack et al. (2009), used by every engine that offers RRF
SIDES = ("visual", "text")


@dataclass
class Fused:
    """One fused candidate: its key, fused score and, per side that found it, rank and score."""

    key: Hashable
    score: float
    components: dict[str, dict[str, float]] = field(default_factory=dict)


def check_alpha(alpha: object) -> float | None:
    """``alpha`` as a float in [0, 1], or None (reciprocal rank fusion)."""
    if alpha is None:
        return None
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise StoreInputError(
            f"alpha must be a number from 0 (text only) to 1 (visual only), got {alpha!r}"
        )
    return float(alpha)


def fuse(
    sides: Mapping[str, Sequence[tuple[Hashable, float]]],
    k: int,
    *,
    alpha: float | None = None,
) -> list[Fused]:
    """The best ``k`` of the union of the sides' candidates (each side: ``(key, score)`` best
    first), by RRF, or by interpolation when ``alpha`` is given. Equal fused scores are ordered
    by the rank on the heavier side, then on the other, then by key (so ``alpha=0`` gives the
    text ranking and ``alpha=1`` the visual one even where min-max maps a last candidate to 0)."""
    alpha = check_alpha(alpha)
    weights = {
        s: 1.0 if alpha is None else (alpha if s == "visual" else 1.0 - alpha) for s in sides
    }
    fused: dict[Hashable, Fused] = {}
    for side, ranked in sides.items():
        normalised = _min_max([s for _, s in ranked]) if alpha is not None else []
        for rank, (key, score) in enumerate(ranked, start=1):
            hit = fused.setdefault(key, Fused(key, 0.0))
            hit.components[side] = {"rank": rank, "score": float(score)}
            part = 1.0 / (RRF_K + rank) if alpha is None else normalised[rank - 1]
            hit.score += weights[side] * part
    order = sorted(sides, key=lambda s: (-weights[s], SIDES.index(s) if s in SIDES else 9))

    def tie_order(f: Fused) -> tuple:
        ranks = [f.components.get(s, {}).get("rank", float("inf")) for s in order]
        return (-f.score, *ranks, str(f.key))

    return sorted(fused.values(), key=tie_order)[:k]


def _min_max(scores: list[float]) -> list[float]:
    """Scores mapped to [0, 1] (the best 1, the worst 0); all equal (or one) map to 1."""
    if not scores:
        return []
    lo, hi = min(scores), max(scores)
    if hi == lo:
        return [1.0] * len(scores)
    return [(s - lo) / (hi - lo) for s in scores]
