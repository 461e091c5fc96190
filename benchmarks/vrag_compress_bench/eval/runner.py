"""The retention benchmark: encode a corpus ONCE (vectors + attention statistics), then apply
every requested method and ratio to the same encodings and score the same queries with exact
MaxSim. Retention = metric(compressed) / metric(uncompressed), same queries, same qrels.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.beir import BeirDataset, DatasetError, split_queries
from vrag_compress.compress import parse_method_spec
from vrag_compress.compress.base import CompressionError, Compressor
from vrag_compress.encoders.base import PageEncoding
from vrag_compress.scoring.packed import maxsim_scores, pack_pages
from vrag_compress_bench.eval.metrics import METRICS, evaluate_queries, top_k_run

CACHE_FORMAT = 1
RUN_DEPTH = 100
"""Documents per query kept in the ranked run (as BEIR); NDCG@10, Recall@5, MRR need fewer."""

Progress = Callable[[str, int], None]
"""``progress(stage, n)``: n > 0 advances the current stage; the runner first announces each
stage with ``progress("start:<stage>", total)``."""


class BenchmarkError(ValueError):
    """The benchmark's inputs do not fit together (methods, ratios, windows, splits)."""


@dataclass
class EncodedCorpus:
    """One dataset encoded once: document pages (with statistics) and every query's vectors."""

    model_id: str
    n_layers: int
    doc_ids: list[str]
    pages: list[PageEncoding]
    queries: dict[str, np.ndarray] = field(default_factory=dict)

    def doc_index(self) -> dict[str, int]:
        return {d: i for i, d in enumerate(self.doc_ids)}


@dataclass(frozen=True)
class MethodSpec:
    """A method name plus its extra parameters: ``name`` or ``name:key=value:key=value``
    (values parsed as JSON when they can be, e.g. ``sap-sink:dedup=0.8:sink_z=null``)."""

    label: str
    name: str
    params: dict[str, Any]

    @classmethod
    def parse(cls, text: str) -> MethodSpec:
        try:
            name, params = parse_method_spec(text)
        except CompressionError as exc:
            raise BenchmarkError(str(exc)) from exc
        return cls(text.strip(), name, params)


# ------------------------------------------------------------------------------------ encoding
def load_benchmark_encoder(name: str, kind: str, **options: Any):  # noqa: ANN201
    """A `TextTokenEncoder` for text corpora, a Col* encoder (`load_encoder`) for page images."""
    if kind == "text":
        from vrag_compress.encoders.text import TextTokenEncoder

        return TextTokenEncoder(name, **options)
    from vrag_compress.encoders import load_encoder

    return load_encoder(name, **options)


def _cache_file(cache_dir: Path, dataset: BeirDataset, encoder: Any) -> Path:
    key = json.dumps(
        [
            CACHE_FORMAT,
            dataset.name,
            str(dataset.root),
            len(dataset.docs),
            len(dataset.queries),
            encoder.model_id,
            encoder.dim,
            getattr(encoder, "max_length", None),
        ]
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir / f"{dataset.name}-{digest}.npz"


def _save_cache(path: Path, corpus: EncodedCorpus) -> None:
    """Plain arrays in an .npz (no pickle): concatenated rows plus lengths."""
    path.parent.mkdir(parents=True, exist_ok=True)
    query_ids = list(corpus.queries)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(
        tmp,
        model_id=np.array(corpus.model_id),
        n_layers=np.array(corpus.n_layers),
        doc_ids=np.array(corpus.doc_ids),
        doc_lengths=np.array([p.n_tokens for p in corpus.pages]),
        vectors=np.concatenate([p.vectors for p in corpus.pages]),
        centrality=np.concatenate([p.centrality for p in corpus.pages], axis=1),
        eos=np.concatenate([p.eos_attention for p in corpus.pages], axis=1),
        query_ids=np.array(query_ids),
        query_lengths=np.array([corpus.queries[q].shape[0] for q in query_ids]),
        query_vectors=np.concatenate([corpus.queries[q] for q in query_ids]),
    )
    tmp.replace(path)


def _split(array: np.ndarray, lengths: np.ndarray, axis: int = 0) -> list[np.ndarray]:
    return np.split(array, np.cumsum(lengths)[:-1], axis=axis)


def _load_cache(path: Path) -> EncodedCorpus:
    with np.load(path, allow_pickle=False) as data:
        lengths = data["doc_lengths"]
        pages = [
            PageEncoding(v, centrality=c, eos_attention=e)
            for v, c, e in zip(
                _split(data["vectors"], lengths),
                _split(data["centrality"], lengths, axis=1),
                _split(data["eos"], lengths, axis=1),
                strict=True,
            )
        ]
        queries = dict(
            zip(
                [str(q) for q in data["query_ids"]],
                _split(data["query_vectors"], data["query_lengths"]),
                strict=True,
            )
        )
        return EncodedCorpus(
            str(data["model_id"]),
            int(data["n_layers"]),
            [str(d) for d in data["doc_ids"]],
            pages,
            queries,
        )


def encode_corpus(
    dataset: BeirDataset,
    encoder: Any,
    *,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> EncodedCorpus:
    """Encode every document (with statistics) and every query once; reuse an .npz cache."""
    cache = _cache_file(cache_dir, dataset, encoder) if cache_dir is not None else None
    if cache is not None and cache.is_file():
        return _load_cache(cache)
    empty = set(dataset.empty_docs())
    doc_ids = [d for d in dataset.doc_ids if d not in empty]
    if progress:
        progress("start:encoding documents", len(doc_ids))
    if dataset.kind == "text":
        pages = encoder.encode_documents(
            [dataset.docs[d] for d in doc_ids],
            with_stats=True,
            progress=(lambda n: progress("encoding documents", n)) if progress else None,
        )
    else:
        pages = []
        for start in range(0, len(doc_ids), 4):
            chunk = doc_ids[start : start + 4]
            pages.extend(
                encoder.encode_pages([dataset.load_image(d) for d in chunk], with_stats=True)
            )
            if progress:
                progress("encoding documents", len(chunk))
    query_ids = list(dataset.queries)
    vectors = encoder.encode_queries([dataset.queries[q] for q in query_ids])
    corpus = EncodedCorpus(
        encoder.model_id,
        int(encoder.n_layers),
        doc_ids,
        pages,
        dict(zip(query_ids, vectors, strict=True)),
    )
    if cache is not None:
        _save_cache(cache, corpus)
    return corpus


# ------------------------------------------------------------------------------------- scoring
def score_all(
    query_vectors: Sequence[np.ndarray], docs: Sequence[np.ndarray], max_rows: int = 256
) -> np.ndarray:
    """Exact MaxSim of every query against every document -> [n_queries, n_docs] (fp64 sums),
    queries scored in blocks of about ``max_rows`` token rows."""
    if not docs:
        raise ValueError("scoring needs at least one document")
    empty = [i for i, d in enumerate(docs) if len(d) == 0]
    if empty:
        raise ValueError(f"document {empty[0]} has no vectors")
    tokens, bounds = pack_pages(docs)
    return maxsim_scores(query_vectors, tokens, bounds, sum_dtype=np.float64, query_rows=max_rows)


@dataclass
class Scored:
    """Scores of the evaluation queries against every document and their metrics."""

    scores: np.ndarray  # [n_queries, n_docs]
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]  # metric -> query id -> value


def score_and_evaluate(
    corpus: EncodedCorpus,
    docs: Sequence[np.ndarray],
    query_ids: Sequence[str],
    qrels: dict[str, dict[str, int]],
) -> Scored:
    scores = score_all([corpus.queries[q] for q in query_ids], docs)
    run = {q: top_k_run(scores[i], corpus.doc_ids, RUN_DEPTH) for i, q in enumerate(query_ids)}
    return Scored(scores, *evaluate_queries(qrels, run, METRICS))


def mean_score_retention(
    full: np.ndarray, compressed: np.ndarray, pairs: Sequence[tuple[int, int]]
) -> float:
    """Mean SR over (query row, doc column) pairs; SR = 1 where the full score is 0."""
    ratios = [1.0 if full[q, d] == 0 else compressed[q, d] / full[q, d] for q, d in pairs]
    return float(np.mean(ratios)) if ratios else float("nan")


# --------------------------------------------------------------------------------- calibration
@dataclass
class Calibration:
    """The SR-selected SAP window and its evidence."""

    window: list[int]
    sr_curve: list[float] | None
    query_ids: list[str]
    held_out: bool


def calibration_pairs(
    corpus: EncodedCorpus, dataset: BeirDataset, query_ids: Sequence[str]
) -> list[tuple[np.ndarray, PageEncoding]]:
    """(query vectors, page) for each calibration query and its most relevant document."""
    index = corpus.doc_index()
    return [(corpus.queries[q], corpus.pages[index[dataset.best_document(q)]]) for q in query_ids]


def calibrate_window(
    pairs: Sequence[tuple[np.ndarray, PageEncoding]],
    n_layers: int,
    *,
    gamma: float = 0.1,
    rho: float = 0.2,
) -> tuple[list[int], list[float]]:
    """Per-layer SR curve of single-layer SAP at ``gamma`` and the window it selects."""
    from vrag_compress.calibrate import select_window, sr_curve

    pages = [page for _, page in pairs]
    curve = [float(v) for v in sr_curve(pages, [query for query, _ in pairs], ratio=gamma)]
    if len(curve) != n_layers:
        raise BenchmarkError(f"SR curve has {len(curve)} layers, the encoder {n_layers}")
    start, end = select_window(curve, rho=rho)
    return list(range(start, end)), curve


# -------------------------------------------------------------------------------- the benchmark
def build_compressor(
    spec: MethodSpec, ratio: float, window: Sequence[int], corpus: EncodedCorpus
) -> Compressor:
    """The compressor for one (method, ratio): methods that read a SAP window get the calibrated
    one unless the spec sets ``layers``; a method with a fitting step (adaptive-eos without
    ``kappa``) is fitted on the corpus pages (label-free) so the mean keep ratio is ``ratio``."""
    from vrag_compress.compress import compressor_for

    return compressor_for(
        spec.name,
        n_layers=corpus.n_layers,
        ratio=ratio,
        window=window,
        fit_pages=corpus.pages,
        **spec.params,
    )


def settle_budget(
    compressor: Compressor, pages: Sequence[PageEncoding]
) -> tuple[Compressor, dict[str, Any] | None]:
    """An adaptive budget left to its check (``budget_fallback`` None) decided once on the
    whole corpus, as ``compress_many`` over it would; the check's figures for the result row."""
    from dataclasses import replace

    from vrag_compress.compress.budget_check import CHECK_MIN_PAGES

    if (
        getattr(compressor, "budget", "fixed") != "adaptive"
        or getattr(compressor, "budget_fallback", True) is not None
        or getattr(compressor, "budget_threshold", None) is not None
        or len(pages) < CHECK_MIN_PAGES
    ):
        return compressor, None
    check = compressor.check_budget(pages)  # type: ignore[attr-defined]
    settled = replace(compressor, budget_fallback=not check.signal_helps)  # type: ignore[type-var]
    figures = {
        "pseudo_ndcg_adaptive": check.adaptive,
        "pseudo_ndcg_fixed": check.fixed,
        "n_queries": check.n_queries,
        "fallback": not check.signal_helps,
    }
    return settled, figures


def run_retention(
    dataset: BeirDataset,
    corpus: EncodedCorpus,
    methods: Sequence[str],
    ratios: Sequence[float],
    *,
    window: Sequence[int] | str = "auto",
    limit_queries: int | None = None,
    calibration_queries: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    keep_kept: Callable[[str, float, list], None] | None = None,
    codes: Sequence[str] = ("fp16",),
    keep_scores: Callable[[str, Scored, list[str]], None] | None = None,
) -> dict[str, Any]:
    """Run every method at every ratio on the same encodings; returns the JSON-ready result.

    ``keep_kept(label, ratio, compressed_pages)`` lets a caller inspect what each method kept;
    ``keep_scores(name, scored, eval_query_ids)`` gets every score matrix ("uncompressed",
    then ``method@ratio``, with ``/code`` unless fp16).
    ``codes`` scores the compressed vectors as stored: fp16, or centroid + 4/2/1-bit residual
    codes decoded (one result row per code, with the bytes stored per token).
    """
    specs = [MethodSpec.parse(m) for m in methods]
    ratios = [float(r) for r in ratios]
    for r in ratios:
        if not 0.0 < r <= 1.0:
            raise BenchmarkError(f"ratio {r} is outside (0, 1]")
    calibration = _calibration(dataset, corpus, window, calibration_queries, seed)
    eval_ids = [q for q in dataset.judged_queries() if q not in set(calibration.query_ids)]
    if limit_queries is not None:
        eval_ids = eval_ids[: int(limit_queries)]
    if not eval_ids:
        raise BenchmarkError(f"{dataset.name}: no judged query left to evaluate")
    qrels = {q: dataset.qrels[q] for q in eval_ids}
    index = corpus.doc_index()
    pairs = [
        (row, index[d])
        for row, q in enumerate(eval_ids)
        for d, g in qrels[q].items()
        if g > 0 and d in index
    ]
    # The reference is the uncompressed index as a store keeps it (fp16), so identity scores 1.0.
    full_vectors, _ = _stored_vectors([p.vectors for p in corpus.pages], "fp16", seed)
    full = score_and_evaluate(corpus, full_vectors, eval_ids, qrels)
    if keep_scores is not None:
        keep_scores("uncompressed", full, eval_ids)
    results = []
    per_query: dict[tuple[str, float], np.ndarray] = {}
    if progress:
        progress("start:compressing + scoring", len(specs) * len(ratios))
    for spec in specs:
        for ratio in ratios:
            compressor = build_compressor(spec, ratio, calibration.window, corpus)
            compressor, check = settle_budget(compressor, corpus.pages)
            compressed = compressor.compress_many(corpus.pages)
            if keep_kept is not None:
                keep_kept(spec.label, ratio, compressed)
            for code in codes:
                vectors, per_token = _stored_vectors([c.vectors for c in compressed], code, seed)
                scored = score_and_evaluate(corpus, vectors, eval_ids, qrels)
                if keep_scores is not None:
                    suffix = "" if code == "fp16" else f"/{code}"
                    keep_scores(f"{spec.label}@{ratio:g}{suffix}", scored, eval_ids)
                row = _result_row(spec.label, ratio, scored, full, pairs, compressed)
                row["realised_ratio"] = row["tokens_per_doc"] / _mean_full_tokens(corpus)
                if check is not None:
                    row["budget_check"] = check
                if code == "fp16":
                    per_query[(spec.label, ratio)] = _per_query_ndcg(scored, eval_ids)
                if list(codes) != ["fp16"]:
                    row["codes"] = code
                    row["bytes_per_token"] = round(per_token, 2)
                    row["size_vs_fp16_full"] = (
                        per_token
                        * row["tokens_per_doc"]
                        / (2.0 * corpus.pages[0].vectors.shape[1] * _mean_full_tokens(corpus))
                    )
                results.append(row)
            if progress:
                progress("compressing + scoring", 1)
    compare_budgets(specs, results, per_query, _per_query_ndcg(full, eval_ids), seed)
    return {
        "dataset": dataset.name,
        "encoder": corpus.model_id,
        "n_queries": len(eval_ids),
        "n_docs": len(corpus.doc_ids),
        "window": [int(layer) for layer in calibration.window],
        "full": full.metrics,
        "results": results,
        "calibration": {
            "n_queries": len(calibration.query_ids),
            "held_out": calibration.held_out,
            "sr_curve": calibration.sr_curve,
            "gamma": 0.1,
            "rho": 0.2,
        },
        "n_layers": corpus.n_layers,
        "tokens_per_doc_full": float(np.mean([p.n_tokens for p in corpus.pages])),
    }


def _per_query_ndcg(scored: Scored, eval_ids: Sequence[str]) -> np.ndarray:
    return np.array([scored.per_query["ndcg@10"][q] for q in eval_ids])


def fixed_twin(spec: MethodSpec) -> str | None:
    """The label of the same method with the fixed budget (its spec without ``budget`` and
    the ``budget_*`` parameters), for a spec with ``budget=adaptive``; else None."""
    if spec.params.get("budget") != "adaptive":
        return None
    kept = [
        part
        for part in spec.label.split(":")[1:]
        if not part.split("=", 1)[0].strip().startswith("budget")
    ]
    return ":".join([spec.name, *kept])


def compare_budgets(
    specs: Sequence[MethodSpec],
    results: list[dict[str, Any]],
    per_query: dict[tuple[str, float], np.ndarray],
    full: np.ndarray,
    seed: int,
) -> None:
    """Give each adaptive-budget row whose fixed twin ran too (same method and ratio) a
    ``vs_fixed`` block: the retention@10 difference, its paired 90% bootstrap interval over
    the evaluation queries, and whether the adaptive budget is within that noise of fixed or
    better (the interval reaches 0 or above)."""
    twins = {spec.label: fixed_twin(spec) for spec in specs}
    for row in results:
        twin = twins.get(row["method"])
        key, other = (row["method"], row["ratio"]), (twin, row["ratio"])
        if twin is None or row.get("codes", "fp16") != "fp16" or other not in per_query:
            continue
        difference, low, high = paired_difference(per_query[key], per_query[other], full, seed)
        row["vs_fixed"] = {
            "method": twin,
            "difference": difference,
            "low": low,
            "high": high,
            "within_noise_or_better": bool(high >= 0.0),
        }


def paired_difference(
    a: np.ndarray, b: np.ndarray, full: np.ndarray, seed: int = 0, level: float = 0.9
) -> tuple[float, float, float]:
    """Retention of ``a`` minus retention of ``b`` (per-query NDCG over the same queries, both
    against ``full``) and its paired bootstrap interval at ``level``: the retention interval of
    the per-query differences, since mean(a) - mean(b) = mean(a - b)."""
    from vrag_compress.estimate import retention_interval

    total = float(full.mean())
    if total <= 0 or len(full) < 2:
        return math.nan, math.nan, math.nan
    low, high = retention_interval(a - b, full, seed, level)
    return float((a.mean() - b.mean()) / total), low, high


def _stored_vectors(
    pages: list[np.ndarray], code: str, seed: int
) -> tuple[list[np.ndarray], float]:
    """The pages' vectors after a round trip through ``code`` and the bytes kept per token."""
    from vrag_compress.store.candidates.codec import code_roundtrip

    lengths = [len(p) for p in pages]
    decoded, per_token = code_roundtrip(np.concatenate(pages), code, seed=seed)
    return np.split(decoded, np.cumsum(lengths)[:-1]), per_token


def _mean_full_tokens(corpus: EncodedCorpus) -> float:
    return float(np.mean([p.n_tokens for p in corpus.pages]))


def _result_row(
    label: str,
    ratio: float,
    scored: Scored,
    full: Scored,
    pairs: Sequence[tuple[int, int]],
    compressed: Sequence[Any],
) -> dict[str, Any]:
    row: dict[str, Any] = {"method": label, "ratio": ratio}
    row.update(scored.metrics)
    retention = {
        name: scored.metrics[name] / full.metrics[name] if full.metrics[name] > 0 else float("nan")
        for name in METRICS
    }
    row["retention@10"] = retention["ndcg@10"]
    row.update({f"retention_{name}": value for name, value in retention.items()})
    row["sr"] = mean_score_retention(full.scores, scored.scores, pairs)
    row["tokens_per_doc"] = float(np.mean([c.vectors.shape[0] for c in compressed]))
    return row


def default_calibration_size(n_judged: int) -> int:
    """20% of the judged queries (at most 500, the paper's pair count); 0 below 20 queries."""
    return 0 if n_judged < 20 else min(500, math.ceil(0.2 * n_judged))


def _calibration(
    dataset: BeirDataset,
    corpus: EncodedCorpus,
    window: Sequence[int] | str,
    n_calibration: int | None,
    seed: int,
) -> Calibration:
    if not isinstance(window, str):
        layers = [int(layer) for layer in window]
        bad = [layer for layer in layers if not 0 <= layer < corpus.n_layers]
        if not layers or bad:
            raise BenchmarkError(f"window {layers} must name layers in 0..{corpus.n_layers - 1}")
        return Calibration(layers, None, [], held_out=False)
    if window != "auto":
        raise BenchmarkError(f"window must be 'auto' or a list of layers, got {window!r}")
    judged = dataset.judged_queries()
    size = default_calibration_size(len(judged)) if n_calibration is None else n_calibration
    if size > 0:
        cal_ids, _ = split_queries(dataset, size, seed)
        held_out = True
    else:  # too small to hold queries out: calibrate on the evaluation queries (reported)
        cal_ids, held_out = judged, False
    if not cal_ids:
        raise DatasetError(f"{dataset.name}: no judged query to calibrate the window on")
    layers, curve = calibrate_window(calibration_pairs(corpus, dataset, cal_ids), corpus.n_layers)
    return Calibration(layers, curve, cal_ids if held_out else [], held_out)
