"""Hybrid retrieval on a BEIR text corpus: BM25 alone, the late-interaction ranking alone, and
their fusion, under the same queries, judgments and metrics as the retention benchmark.

BM25 is the embedded store's own text mode (tantivy, the tokenizer users get), and the
fusion is the store's own (`vrag_compress.store.fusion`), each side fusing its best
`HYBRID_DEPTH` candidates exactly as ``search(mode="hybrid")`` does; so the numbers measure
what a user of ``--mode hybrid`` gets, with the MaxSim side as scored by the benchmark.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.beir import BeirDataset
from vrag_compress.store import LocalStore, PageRecord
from vrag_compress.store.fusion import fuse
from vrag_compress.store.local.search import HYBRID_DEPTH
from vrag_compress_bench.eval.metrics import METRICS, evaluate

ALPHAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
RUN_DEPTH = 100  # ranked documents per query given to the metrics (as the retention runs)

Ranking = list[tuple[str, float]]  # (doc id, score), best first


def bm25_rankings(
    dataset: BeirDataset,
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    depth: int,
    text_engine: str = "tantivy",
) -> dict[str, Ranking]:
    """Each query's best ``depth`` documents by BM25 through a throwaway embedded store (its
    text index: the tantivy engine, or ``text_engine="fts5"``)."""
    with tempfile.TemporaryDirectory(prefix="vrag-bm25-") as tmp:
        config = {"dim": 1, "model_id": "bm25"}
        with LocalStore.create(Path(tmp) / "s", config, text_engine=text_engine) as store:
            one = np.ones((1, 1), dtype=np.float32)
            for start in range(0, len(doc_ids), 1000):
                chunk = doc_ids[start : start + 1000]
                store.add([PageRecord(d, d, 1, one, text=dataset.docs[d]) for d in chunk])
            hits = store.search_many(
                None, depth, mode="text", texts=[dataset.queries[q] for q in query_ids]
            )
    return {q: [(h.page_id, h.score) for h in hs] for q, hs in zip(query_ids, hits, strict=True)}


def top_ranking(scores: np.ndarray, doc_ids: Sequence[str], depth: int) -> Ranking:
    """The best ``depth`` documents of one row of scores (ties by document order)."""
    order = np.argsort(-scores, kind="stable")[:depth]
    return [(doc_ids[i], float(scores[i])) for i in order]


def fused_run(
    visual: dict[str, Ranking], text: dict[str, Ranking], alpha: float | None
) -> dict[str, dict[str, float]]:
    """A ranx run of the fusion of each query's two candidate lists."""
    run = {}
    for q in visual:
        sides = {"visual": visual[q][:HYBRID_DEPTH], "text": text[q][:HYBRID_DEPTH]}
        fused = fuse(sides, RUN_DEPTH, alpha=alpha)
        # ranx orders by score: a strictly decreasing score keeps the fusion's tie order
        run[q] = {str(f.key): float(len(fused) - i) for i, f in enumerate(fused)}
    return run


def run_hybrid(
    dataset: BeirDataset,
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    qrels: dict[str, dict[str, int]],
    visual_scores: dict[str, np.ndarray],
    alphas: Sequence[float] = ALPHAS,
) -> dict[str, Any]:
    """BM25, each visual ranking (label -> [n_queries, n_docs] scores) and their fusions (RRF
    and every alpha): metrics per row, the best alpha, and whether the default (RRF) is at
    least as good as the better of its two parts."""
    text = bm25_rankings(dataset, doc_ids, query_ids, RUN_DEPTH)
    text_run = {q: dict(text[q]) or {doc_ids[0]: 0.0} for q in query_ids}
    bm25 = evaluate(qrels, text_run, METRICS)
    rows = []
    for label, scores in visual_scores.items():
        visual = {q: top_ranking(scores[i], doc_ids, RUN_DEPTH) for i, q in enumerate(query_ids)}
        alone = evaluate(qrels, {q: dict(r) for q, r in visual.items()}, METRICS)
        best_part = max(alone["ndcg@10"], bm25["ndcg@10"])
        fusions: list[dict[str, Any]] = []
        for alpha in (None, *alphas):
            metrics = evaluate(qrels, fused_run(visual, text, alpha), METRICS)
            fusions.append(
                {"fusion": "rrf" if alpha is None else "alpha", "alpha": alpha, **metrics}
            )
        best = max((f for f in fusions if f["alpha"] is not None), key=lambda f: f["ndcg@10"])
        rows.append(
            {
                "visual": label,
                "visual_metrics": alone,
                "fusions": fusions,
                "best_alpha": best["alpha"],
                "rrf_minus_best_part@10": fusions[0]["ndcg@10"] - best_part,
                "best_alpha_minus_best_part@10": best["ndcg@10"] - best_part,
            }
        )
    return {"depth_per_side": HYBRID_DEPTH, "bm25": bm25, "rows": rows}


def print_hybrid_table(result: dict[str, Any], console) -> None:  # noqa: ANN001
    """NDCG@10 / NDCG@5 / R@1 of BM25, each visual ranking, RRF and the best alpha."""
    from rich.table import Table

    hybrid = result["hybrid"]
    table = Table(
        title=f"hybrid · {result['dataset']} · {result['encoder']} · {result['n_queries']} "
        f"queries · {hybrid['depth_per_side']} candidates per side"
    )
    for col in ("run", "NDCG@10", "NDCG@5", "R@1", "MRR"):
        table.add_column(col, justify="left" if col == "run" else "right")

    def add(name: str, m: dict[str, float]) -> None:
        table.add_row(
            name,
            f"{m['ndcg@10']:.4f}",
            f"{m['ndcg@5']:.4f}",
            f"{m['recall@1']:.4f}",
            f"{m['mrr']:.4f}",
        )

    add("BM25 (store text mode)", hybrid["bm25"])
    for row in hybrid["rows"]:
        add(row["visual"], row["visual_metrics"])
        rrf = row["fusions"][0]
        add(f"hybrid RRF · {row['visual']}", rrf)
        best = next(f for f in row["fusions"] if f["alpha"] == row["best_alpha"])
        add(f"hybrid α={row['best_alpha']:g} (best) · {row['visual']}", best)
    console.print(table)


def plot_hybrid(result: dict[str, Any], out_png: str | Path) -> Path:
    """NDCG@10 against alpha for each visual ranking, with BM25, the visual ranking and RRF
    as horizontal references; writes a PNG."""
    from vrag_compress_bench.eval.plot import new_figure, save_figure

    hybrid = result["hybrid"]
    fig, ax = new_figure((7, 4.5))
    ax.axhline(
        hybrid["bm25"]["ndcg@10"], color="black", linestyle=":", label="BM25 (store text mode)"
    )
    for i, row in enumerate(hybrid["rows"]):
        color = f"C{i}"
        points = [(f["alpha"], f["ndcg@10"]) for f in row["fusions"] if f["alpha"] is not None]
        ax.plot(*zip(*points, strict=True), marker="o", color=color, label=f"α · {row['visual']}")
        ax.axhline(
            row["fusions"][0]["ndcg@10"],
            color=color,
            linestyle="--",
            label=f"RRF · {row['visual']}",
        )
        ax.axhline(
            row["visual_metrics"]["ndcg@10"],
            color=color,
            linestyle="-.",
            linewidth=0.8,
            label=f"{row['visual']} alone",
        )
    ax.set_xlabel("α (0 = BM25 only, 1 = late interaction only)")
    ax.set_ylabel("NDCG@10")
    ax.set_title(f"hybrid search · {result['dataset']} · {result['encoder']}")
    ax.legend(fontsize=7, loc="lower center")
    return save_figure(fig, out_png)
