"""Retrieval metrics through ranx (trec_eval / pytrec_eval semantics: NDCG with linear graded
gains, a document is relevant when its gain is > 0)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np

METRICS: tuple[str, ...] = ("ndcg@1", "ndcg@5", "ndcg@10", "recall@1", "recall@5", "mrr")
"""Reported for every run."""


def evaluate(
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
    metrics: Sequence[str] = METRICS,
) -> dict[str, float]:
    """Mean metrics over the run's queries (queries missing from the run score 0)."""
    return evaluate_queries(qrels, run, metrics)[0]


def evaluate_queries(
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
    metrics: Sequence[str] = METRICS,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(mean metrics, each metric for each judged query of the run) from one ranx evaluation:
    the per-query values are the ones the means average. Each query's documents are ranked by
    score, ties in the run's order.

    ranx is given its array form (per query, rows of [document number, score or gain]) rather
    than its `Qrels`/`Run` objects: the objects' numba dictionaries compile in every process
    (about 19 s of CPU on first use, against 5 s for the arrays), and the arrays number the
    documents exactly instead of hashing their ids into floats."""
    from numba.typed import List
    from ranx import evaluate as ranx_evaluate

    queries = [q for q in run if q in qrels]
    if not queries:
        raise ValueError("no query of the run has relevance judgments")
    numbers: dict[str, int] = {}
    judged = List([_rows(qrels[q], numbers, positive_only=True) for q in queries])
    ranked = List([_rows(run[q], numbers) for q in queries])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's uint64 -> int64 cast notice
        # asked twice when alone: ranx 0.3's per-query answer for one metric looks up the wrong key
        asked = list(dict.fromkeys(metrics)) * (2 if len(set(metrics)) == 1 else 1)
        scores = ranx_evaluate(judged, ranked, asked, return_mean=False)
    per_query = {name: dict(zip(queries, map(float, v), strict=True)) for name, v in scores.items()}
    return {name: float(np.mean(v)) for name, v in scores.items()}, per_query


def _rows(
    values: Mapping[str, float], numbers: dict[str, int], positive_only: bool = False
) -> np.ndarray:
    """One query as ranx's array: [document number, value] rows, highest value first (a stable
    sort: ties stay in ``values``' order), documents numbered by first sight in ``numbers``."""
    kept = [(d, float(v)) for d, v in values.items() if v > 0 or not positive_only]
    rows = np.array(
        [(numbers.setdefault(d, len(numbers)), v) for d, v in kept], dtype=np.float64
    ).reshape(-1, 2)
    return rows[np.argsort(-rows[:, 1], kind="stable")]


def top_k_run(scores: np.ndarray, doc_ids: Sequence[str], k: int = 100) -> dict[str, float]:
    """The k best documents of one query as a ranx run entry (ties broken by doc order)."""
    k = min(k, len(doc_ids))
    order = np.argsort(-scores, kind="stable")[:k]
    return {doc_ids[i]: float(scores[i]) for i in order}
