"""`vrag bench estimate`: the label-free retention estimate against the judged retention@10.

Both sides are samples: the estimate of its pseudo-queries, the judged retention of the
dataset's judged queries. So each row carries both 90% bootstrap intervals, and the method
order is also checked on the pairs whose judged order the judged queries settle
(``order_pairs``: paired bootstrap, P(a > b) ≥ 0.9 or P(b > a) ≥ 0.9)."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer

from vrag_compress.estimate import DEFAULT_RELEVANCE
from vrag_compress_bench.app import bench_app
from vrag_compress_bench.retention import _Bar, _parse_window, _split_list

SETTLED = 0.9
HALVES = ("all", "first", "second")
"""A judged order counts as settled when the paired bootstrap puts one side of it ahead in
this share of resamples or more (resamples where the two tie count for neither)."""


def judged_half(
    measured: dict[str, Any], judged: dict[str, np.ndarray], half: str, seed: int = 0
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The judged figures on one seeded half of the evaluation queries ("first" or "second"
    of a shuffle with ``seed``): each row's retention@10 recomputed from the per-query NDCG@10,
    so an estimator's choices can be made on one half and reported on the other."""
    n = len(judged["uncompressed"])
    order = np.random.default_rng(seed).permutation(n)
    chosen = np.sort(order[: n // 2] if half == "first" else order[n // 2 :])
    picked = {name: values[chosen] for name, values in judged.items()}
    full = float(picked["uncompressed"].mean())
    rows = []
    for row in measured["results"]:
        ndcg = float(picked[f"{row['method']}@{row['ratio']:g}"].mean())
        rows.append({**row, "retention@10": ndcg / full if full > 0 else float("nan")})
    return {**measured, "results": rows, "n_queries": len(chosen)}, picked


def compare(
    estimates: list[Any],
    measured: dict[str, Any],
    judged: dict[str, np.ndarray] | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per (method, ratio): the estimate (the mean over ``estimates``, one per page
    draw, each in ``draws``; ``low``/``high`` average the draws' 90% intervals), the judged
    retention@10, their difference and, given ``judged`` per-query NDCG@10 (keys
    "uncompressed" and "method@ratio"), the judged retention's 90% bootstrap interval."""
    truth_rows = {(r["method"], float(r["ratio"])): r for r in measured["results"]}
    per_draw = list(zip(*(e.rows for e in estimates), strict=True))
    rows = []
    for mean, at in zip(averaged(estimates).rows, per_draw, strict=True):
        truth = truth_rows[(mean.method, mean.ratio)]
        values = [r.estimated for r in at]
        estimated = mean.estimated
        row = {
            "method": mean.method,
            "ratio": mean.ratio,
            "estimated": estimated,
            "measured": truth["retention@10"],
            "error": estimated - truth["retention@10"],
            "low": mean.low,
            "high": mean.high,
            "draws": values,
            "estimated_sd": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
            "sr": mean.sr,
            "rank_agreement": mean.rank_agreement,
            "measured_sr": truth["sr"],
            "tokens_per_doc": truth["tokens_per_doc"],
        }
        if judged is not None:
            from vrag_compress.estimate import retention_interval

            low, high = retention_interval(
                judged[f"{mean.method}@{mean.ratio:g}"], judged["uncompressed"], seed
            )
            row.update(
                measured_low=low,
                measured_high=high,
                within_measured_interval=bool(low <= estimated <= high),
            )
        rows.append(row)
    return rows


def averaged(estimates: list[Any]) -> Any:
    """One estimate from several page draws: each row's numbers averaged (the recommendation
    then speaks for the mean); pages and queries are the first draw's counts."""
    from dataclasses import replace

    from vrag_compress.estimate import EstimateRow

    rows = [
        EstimateRow(
            method=at[0].method,
            ratio=at[0].ratio,
            estimated=_mean(at, "estimated"),
            low=_mean(at, "low"),
            high=_mean(at, "high"),
            sr=_mean(at, "sr"),
            rank_agreement=_mean(at, "rank_agreement"),
            tokens_per_page=_mean(at, "tokens_per_page"),
        )
        for at in zip(*(e.rows for e in estimates), strict=True)
    ]
    return replace(estimates[0], rows=rows)


def _mean(rows: tuple[Any, ...], name: str) -> float:
    return float(np.mean([getattr(r, name) for r in rows]))


def order_pairs(
    rows: list[dict[str, Any]], judged: dict[str, np.ndarray], seed: int = 0
) -> list[dict[str, Any]]:
    """Every pair of methods at each ratio: the judged difference, how sure the judged queries
    are of its sign (paired bootstrap P(a > b)), and whether the estimate orders them alike."""
    from vrag_compress.estimate import BOOTSTRAP

    full = judged["uncompressed"]
    draws = np.random.default_rng(seed).integers(0, len(full), (BOOTSTRAP, len(full)))
    full_means = full[draws].mean(axis=1)
    out = []
    for ratio in sorted({r["ratio"] for r in rows}, reverse=True):
        at = [r for r in rows if r["ratio"] == ratio]
        for a, b in itertools.combinations(at, 2):
            per_a, per_b = (judged[f"{r['method']}@{ratio:g}"] for r in (a, b))
            boot = (per_a[draws].mean(axis=1) - per_b[draws].mean(axis=1)) / full_means
            p_greater, p_less = float(np.mean(boot > 0)), float(np.mean(boot < 0))
            out.append(
                {
                    "ratio": ratio,
                    "a": a["method"],
                    "b": b["method"],
                    "judged_difference": a["measured"] - b["measured"],
                    "estimated_difference": a["estimated"] - b["estimated"],
                    "p_judged_a_better": p_greater,
                    "p_judged_b_better": p_less,
                    # ties count for neither side; 1e-9 keeps P = 0.9 itself settled
                    "settled": max(p_greater, p_less) >= SETTLED - 1e-9,
                    "agrees": (a["estimated"] > b["estimated"]) == (a["measured"] > b["measured"]),
                }
            )
    return out


def settled_order(pairs: list[dict[str, Any]]) -> dict[str, bool]:
    """Per ratio: whether the estimate orders every settled pair as the judged queries do."""
    out: dict[str, bool] = {}
    for pair in pairs:
        key = f"{pair['ratio']:g}"
        out[key] = out.get(key, True) and (pair["agrees"] or not pair["settled"])
    return out


def same_order(rows: list[dict[str, Any]]) -> dict[str, bool]:
    """Per ratio: whether the estimate ranks the methods as the judged retention@10 does."""
    out = {}
    for ratio in sorted({r["ratio"] for r in rows}, reverse=True):
        at = [r for r in rows if r["ratio"] == ratio]
        by_estimate = [r["method"] for r in sorted(at, key=lambda r: -r["estimated"])]
        by_measured = [r["method"] for r in sorted(at, key=lambda r: -r["measured"])]
        out[f"{ratio:g}"] = by_estimate == by_measured
    return out


def print_rows(rows: list[dict[str, Any]], order: dict[str, bool], console) -> None:  # noqa: ANN001
    from rich.table import Table

    table = Table(title="estimated vs judged retention@10")
    columns = ("method", "ratio", "estimated", "measured", "judged 90% interval", "error")
    for col in (*columns, "SR (pseudo)", "top-10 kept"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in rows:
        interval = (
            f"{r['measured_low']:.3f}-{r['measured_high']:.3f}" if "measured_low" in r else "-"
        )
        table.add_row(
            r["method"],
            f"{r['ratio']:g}",
            f"{r['estimated']:.3f}",
            f"{r['measured']:.3f}",
            interval,
            f"{r['error']:+.3f}",
            f"{r['sr']:.3f}",
            f"{r['rank_agreement']:.3f}",
        )
    console.print(table)
    console.print(
        "same method order as measured: "
        + ", ".join(f"γ={k}: {'yes' if v else 'no'}" for k, v in order.items())
    )


def label_free(
    data: Any,
    corpus: Any,
    model: Any,
    kind: str,
    methods: list[str],
    ratios: list[float],
    sample: int,
    seed: int,
    draws: int,
    neighbours: int,
    relevance: str,
    sample_only: bool,
) -> list[Any]:
    """The label-free estimate of one pseudo-query ``kind`` on each of ``draws`` page samples."""
    from vrag_compress.estimate import cloze_queries, estimate_pages

    results = []
    for draw_seed in range(seed, seed + draws):
        rng = np.random.default_rng(draw_seed)
        picked = sorted(rng.choice(len(corpus.doc_ids), min(sample, len(corpus.doc_ids)), False))
        texts = [data.docs[corpus.doc_ids[i]] for i in picked]
        results.append(
            estimate_pages(
                cloze_queries(texts, model, draw_seed, kind),
                methods,
                ratios,
                n_layers=corpus.n_layers,
                encoder_name=corpus.model_id,
                neighbours=neighbours,
                relevance=relevance,
                collection_pages=None if sample_only else len(corpus.doc_ids),
            )
        )
    return results


def add_range(rows: list[dict[str, Any]], kinds: list[Any]) -> None:
    """Each row's label-free range as `vrag estimate` gives it (`row_range`): ``range_low`` /
    ``range_high`` from the lower end of the kinds' 90% intervals to the upper end (lead and
    keyword with ``--queries both``; one kind: its estimate at both ends), each kind's figure
    and interval under its name when there are two, and ``point_low`` / ``point_high`` between
    the two estimates alone. With ``--draws`` the intervals are the draws' own, averaged
    (`averaged`), which `vrag estimate`'s pooling never narrows."""
    from dataclasses import replace

    from vrag_compress.estimate import point_range, row_range

    for row, at in zip(rows, zip(*(k.rows for k in kinds), strict=True), strict=True):
        both = len(kinds) > 1
        joined = (
            replace(at[0], keyword=at[1].estimated, keyword_low=at[1].low, keyword_high=at[1].high)
            if both
            else at[0]
        )
        row["range_low"], row["range_high"] = (float(v) for v in row_range(joined))
        row["point_low"], row["point_high"] = (float(v) for v in point_range(joined))
        if both:
            for k, r in zip(kinds, at, strict=True):
                row.update(
                    {
                        k.query_kind: r.estimated,
                        f"{k.query_kind}_low": r.low,
                        f"{k.query_kind}_high": r.high,
                    }
                )
        truth = row["measured"]
        row["outside_range_by"] = _outside(truth, row["range_low"], row["range_high"])
        row["outside_point_range_by"] = _outside(truth, row["point_low"], row["point_high"])


def _outside(value: float, low: float, high: float) -> float:
    """How far ``value`` lies outside [``low``, ``high``] (0 inside)."""
    return 0.0 if low <= value <= high else float(min(abs(value - low), abs(value - high)))


def add_judged_sample(
    rows: list[dict[str, Any]],
    judged: dict[str, np.ndarray],
    n: int,
    seed: int,
    repeats: int = 200,
    level: float | None = None,
) -> dict[str, Any]:
    """``judged_low`` / ``judged_high`` per row: the interval (``level``, default
    `JUDGED_LEVEL`, as `vrag estimate --judged` gives it) from ``n`` random judged questions
    (seeded), and whether it covers the figure from all of them; the summary also says how
    often it covered over ``repeats`` other draws of ``n`` questions, and in what share of
    those draws it covered at least 9 in 10 of the cells."""
    from vrag_compress.estimate import retention_interval
    from vrag_compress.estimate.questions import JUDGED_LEVEL

    level = JUDGED_LEVEL if level is None else level
    full = judged["uncompressed"]
    if n > len(full):
        raise typer.BadParameter(
            f"{n} questions asked, the dataset has {len(full)} judged", param_hint="--judged-sample"
        )
    rng = np.random.default_rng(seed)
    draws = [rng.choice(len(full), n, replace=False) for _ in range(repeats)]
    hits = np.zeros((repeats, len(rows)), dtype=bool)
    widths = []
    for col, row in enumerate(rows):
        per = judged[f"{row['method']}@{row['ratio']:g}"]
        for i, picked in enumerate(draws):
            low, high = retention_interval(per[picked], full[picked], seed, level)
            hits[i, col] = low <= row["measured"] <= high
            if i == 0:
                row.update(
                    judged_low=low, judged_high=high, judged_sample_covers=bool(hits[0, col])
                )
                widths.append(high - low)
    return {
        "n_questions": n,
        "level": level,
        "cells": len(rows),
        "cells_covered": int(hits[0].sum()),
        "mean_width": float(np.mean(widths)),
        "coverage_over_draws": float(hits.mean()),
        "draws_covering_nine_in_ten": float(np.mean(hits.sum(axis=1) >= 0.9 * len(rows))),
        "draws": repeats,
    }


def add_on_questions(
    rows: list[dict[str, Any]],
    data: Any,
    corpus: Any,
    model: Any,
    queries_file: Path | None,
    judged_file: Path | None,
    methods: list[str],
    ratios: list[float],
    sample: int,
    seed: int,
) -> dict[str, Any]:
    """The figures of `vrag estimate --queries-file / --judged` on ``sample`` corpus pages
    (plus the judged ones), added to each row: ``agreement_overlap`` / ``agreement_ndcg``
    (with ``_low`` / ``_high``) and ``sampled_judged`` (with ``_low`` / ``_high``)."""
    from vrag_compress.estimate import EstimateError
    from vrag_compress.estimate_queries import judged_gains, measure, read_judged, read_questions

    try:
        asked = read_questions(queries_file) if queries_file is not None else []
        questions, qrels = read_judged(judged_file) if judged_file is not None else ([], {})
    except EstimateError as exc:
        raise typer.BadParameter(str(exc), param_hint="--queries-file / --judged") from exc
    wanted = {doc for per in qrels.values() for doc in per}
    index = {d: i for i, d in enumerate(corpus.doc_ids)}
    forced = {index[d] for d in wanted if d in index}
    rng = np.random.default_rng(seed)
    drawn = rng.choice(len(corpus.doc_ids), min(sample, len(corpus.doc_ids)), replace=False)
    picked = sorted(forced.union(int(i) for i in drawn))
    ids = [(corpus.doc_ids[i],) for i in picked]
    questions = [(q, t) for q, t in questions if any(d in index for d in qrels[q])]
    texts = [t for _, t in asked] + [t for _, t in questions]
    gains = judged_gains(ids, [q for q, _ in questions], qrels) if questions else None
    measured = measure(
        [corpus.pages[i] for i in picked],
        list(model.encode_queries(texts)),
        methods,
        ratios,
        n_layers=corpus.n_layers,
        model_id=corpus.model_id,
        gains=gains,
        judged_rows=range(len(asked), len(texts)),
        collection_pages=len(corpus.doc_ids),
        seed=seed,
    )
    for row, got in zip(rows, measured, strict=True):
        row.update(
            agreement_overlap=got.overlap,
            agreement_overlap_low=got.overlap_low,
            agreement_overlap_high=got.overlap_high,
            agreement_ndcg=got.ndcg,
            agreement_ndcg_low=got.ndcg_low,
            agreement_ndcg_high=got.ndcg_high,
        )
        if got.judged is not None:
            row.update(
                sampled_judged=got.judged,
                sampled_judged_low=got.judged_low,
                sampled_judged_high=got.judged_high,
            )
    return {"n_pages": len(picked), "n_questions": len(texts), "n_judged": len(questions)}


@bench_app.command("estimate")
def estimate(
    dataset: str = typer.Option(..., help="BEIR folder with judged queries (text corpus)"),
    encoder: str = typer.Option("minilm", help="text encoder: 'minilm' or an HF encoder folder"),
    methods: str = typer.Option("sap uot random", help="methods, space/comma separated"),
    ratios: str = typer.Option("0.25 0.1 0.05", help="keep ratios, space/comma separated"),
    sample: int = typer.Option(400, help="corpus pages the estimate samples"),
    draws: int = typer.Option(1, min=1, help="page samples (seeds seed, seed+1, ...) averaged"),
    queries: str = typer.Option(
        "lead",
        help="pseudo-queries: 'lead', 'keyword', 'sentence' or 'both' (lead and keyword: each "
        "row's range_low / range_high is the label-free range between them)",
    ),
    queries_file: Path | None = typer.Option(
        None,
        "--queries-file",
        help="questions (one a line, or JSONL with text): each row adds the agreement of the "
        "compressed with the uncompressed ranking on them, over the sampled pages",
    ),
    judged_file: Path | None = typer.Option(
        None,
        "--judged",
        help="judgments (qrels TSV with queries.jsonl beside it, or a BEIR folder): each row adds "
        "the judged retention measured as `vrag estimate --judged` does (judged pages plus the "
        "sample), beside the one over every page",
    ),
    judged_sample: int | None = typer.Option(
        None,
        "--judged-sample",
        min=2,
        help="each row adds judged_low / judged_high: the 95%% interval of the judged retention "
        "from this many random judged questions, and whether it covers the all-question figure",
    ),
    neighbours: int = typer.Option(5, help="pages near a pseudo-query's page counted relevant"),
    relevance: str = typer.Option(
        DEFAULT_RELEVANCE, help="'own': the own page counts (gain 2); 'away': left out"
    ),
    half: str = typer.Option(
        "all",
        help="judged queries to compare with: 'all', or one seeded half ('first', 'second'), "
        "to choose on one half and report on the other",
    ),
    window: str = typer.Option("auto", help="SAP window of the judged run: 'auto' or layers"),
    sample_only: bool = typer.Option(
        False,
        "--sample-only",
        help="rank within the sampled pages only, instead of predicting the whole corpus's ranking",
    ),
    json_out: Path = typer.Option(..., "--json", help="write the rows here"),
    plot: Path | None = typer.Option(None, help="estimated-vs-judged plot (PNG)"),
    cache_dir: Path | None = typer.Option(None, help="reuse corpus encodings across runs"),
    threads: int = typer.Option(2, help="torch CPU threads"),
    seed: int = typer.Option(0, help="seed of the page sample, pseudo-queries and calibration"),
) -> None:
    """Estimate retention without labels on a sample of the corpus, then measure it with the
    judgments (as `vrag bench retention`), and compare."""
    import torch
    from rich.console import Console

    from vrag_compress.estimate import QUERY_CHOICES, RELEVANCE
    from vrag_compress.progress import task_progress
    from vrag_compress_bench.eval.runner import encode_corpus, load_benchmark_encoder, run_retention
    from vrag_compress_bench.paths import load_dataset_option

    if queries not in QUERY_CHOICES:
        raise typer.BadParameter(f"choose {', '.join(QUERY_CHOICES)}", param_hint="--queries")
    if relevance not in RELEVANCE:
        raise typer.BadParameter(f"choose {' or '.join(RELEVANCE)}", param_hint="--relevance")
    if half not in HALVES:
        raise typer.BadParameter(f"choose {', '.join(HALVES)}", param_hint="--half")
    torch.set_num_threads(threads)
    console = Console(width=120)
    started = time.perf_counter()
    data = load_dataset_option(dataset)
    if data.kind != "text":
        raise typer.BadParameter("the estimate check needs a text corpus", param_hint="--dataset")
    judged_count = len(data.judged_queries())
    if judged_sample is not None and judged_sample > judged_count:  # before the corpus is encoded
        raise typer.BadParameter(
            f"{judged_sample} questions asked, the dataset has {judged_count} judged",
            param_hint="--judged-sample",
        )
    model = load_benchmark_encoder(encoder, data.kind, num_threads=threads)
    method_list, ratio_list = _split_list(methods), [float(r) for r in _split_list(ratios)]
    bar = task_progress()
    judged: dict[str, np.ndarray] = {}

    def keep_ndcg(name: str, scored: Any, ids: list[str]) -> None:
        judged[name] = np.array([scored.per_query["ndcg@10"][q] for q in ids])

    with bar:
        corpus = encode_corpus(data, model, cache_dir=cache_dir, progress=_Bar(bar))
        measured = run_retention(
            data,
            corpus,
            method_list,
            ratio_list,
            window=_parse_window(window),
            seed=seed,
            keep_scores=keep_ndcg,
        )
    if half != "all":
        measured, judged = judged_half(measured, judged, half, seed)
    measured_at = time.perf_counter()
    kinds = ("lead", "keyword") if queries == "both" else (queries,)
    per_kind = {
        kind: label_free(
            data,
            corpus,
            model,
            kind,
            method_list,
            ratio_list,
            sample,
            seed,
            draws,
            neighbours,
            relevance,
            sample_only,
        )
        for kind in kinds
    }
    results = per_kind[kinds[0]]
    result = averaged(results)
    rows = compare(results, measured, judged, seed)
    add_range(rows, [averaged(per_kind[k]) for k in kinds])
    extra: dict[str, Any] = {}
    if judged_sample is not None:
        extra["judged_sample"] = add_judged_sample(rows, judged, judged_sample, seed)
    if queries_file is not None or judged_file is not None:
        extra["on_questions"] = add_on_questions(
            rows,
            data,
            corpus,
            model,
            queries_file,
            judged_file,
            method_list,
            ratio_list,
            sample,
            seed,
        )
    order = same_order(rows)
    pairs = order_pairs(rows, judged, seed)
    print_rows(rows, order, console)
    settled = settled_order(pairs)
    console.print(
        "same order on the pairs the judged queries settle (P >= 0.9): "
        + ", ".join(f"γ={k}: {'yes' if v else 'no'}" for k, v in settled.items())
    )
    out = {
        "dataset": data.name,
        "encoder": corpus.model_id,
        "rows": rows,
        "same_order": order,
        "same_order_settled": settled,
        "order_pairs": pairs,
        "estimate": {
            "n_pages": result.n_pages,
            "n_queries": result.n_queries,
            "n_queries_per_draw": [r.n_queries for r in results],
            "fallback_queries_per_draw": [r.fallback_queries for r in results],
            "query_kind": result.query_kind,
            "neighbours": neighbours,
            "relevance": relevance,
            "collection_pages": result.collection_pages,
            "profile": result.profile,
            "notes": result.notes,
            "draws": draws,
            "recommendation": result.recommend(),
        },
        "measured": {
            "n_queries": measured["n_queries"],
            "window": measured["window"],
            "half": half,
        },
        **extra,
        "timing_s": {
            "measured": round(measured_at - started, 1),
            "total": round(time.perf_counter() - started, 1),
        },
    }
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(out, indent=2))
    console.print(f"wrote {json_out}")
    if plot is not None:
        from vrag_compress_bench.eval.plot import plot_estimate

        title = f"{data.name} · {corpus.model_id} · {result.n_queries} {queries} pseudo-queries"
        if draws > 1:
            title += f" · mean of {draws} page samples"
        console.print(f"wrote {plot_estimate(rows, plot, title)}")
