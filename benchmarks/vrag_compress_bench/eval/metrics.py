"""Retrieval metrics through ranx (trec_eval / pytrec_eval semantics: NDCG with linear graded
gains, a document is relevant when its gain is > 0)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

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
    the per-query values are the ones the means average."""
    from ranx import Qrels, Run
    from ranx import evaluate as ranx_evaluate

    judged = {q: {d: int(g) for d, g in docs.items()} for q, docs in qrels.items() if q in run}
    if not judged:
        raise ValueError("no query of the run has relevance judgments")
    ranked = Run(run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's uint64 -> int64 cast notice
        scores = ranx_evaluate(Qrels(judged), ranked, list(metrics), make_comparable=True)
    if isinstance(scores, float):
        scores = {metrics[0]: scores}
    per_query = {name: {q: float(v) for q, v in ranked.scores[name].items()} for name in scores}
    return {name: float(value) for name, value in scores.items()}, per_query


def top_k_run(scores: np.ndarray, doc_ids: Sequence[str], k: int = 100) -> dict[str, float]:
    """The k best documents of one query as a ranx run entry (ties broken by doc order)."""
    k = min(k, len(doc_ids))
    order = np.argsort(-scores, kind="stable")[:k]
    return {doc_ids[i]: float(scores[i]) for i in order}
