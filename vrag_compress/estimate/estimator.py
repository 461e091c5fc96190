"""The estimate on pseudo-queries already built: each method compresses the same pages, and its
rankings are compared with the uncompressed ones."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vrag_compress.compress import compressor_for, parse_method_spec
from vrag_compress.estimate.pseudo_queries import PseudoQueries
from vrag_compress.estimate.ranking import (
    collection_ndcg,
    maxsim_matrix,
    pseudo_gains,
    retention_interval,
    top_overlap,
)
from vrag_compress.estimate.report import (
    DEFAULT_METHODS,
    DEFAULT_NEIGHBOURS,
    DEFAULT_RATIOS,
    DEFAULT_RELEVANCE,
    EstimateError,
    EstimateRow,
    Progress,
    RetentionEstimate,
)
from vrag_compress.estimate.validation import bias_notes, fallback_note


def estimate_pages(
    pseudo: PseudoQueries,
    methods: Sequence[str] = DEFAULT_METHODS,
    ratios: Sequence[float] = DEFAULT_RATIOS,
    *,
    n_layers: int | None = None,
    model_id: str | None = None,
    window: Sequence[int] | None = None,
    encoder_name: str = "",
    neighbours: int = DEFAULT_NEIGHBOURS,
    relevance: str = DEFAULT_RELEVANCE,
    collection_pages: int | None = None,
    progress: Progress | None = None,
) -> RetentionEstimate:
    """The estimate on already-built pseudo-queries; ``methods`` are names or
    ``name:key=value`` specs (as in the retention benchmark); ``neighbours`` pages nearest to a
    query's own page count as partly relevant (0: only its own page); ``relevance`` says
    whether the own page counts (``"own"``) or is left out (``"away"``, see `pseudo_gains`);
    ``collection_pages`` is the size of the collection the pages were sampled from, which the
    rankings are scaled to (`collection_ndcg`; None: the sample is the collection)."""
    if len(pseudo.pages) < 2 or not pseudo.queries:
        raise EstimateError(
            f"the estimate needs at least 2 pages and 1 pseudo-query, got {len(pseudo.pages)} "
            f"pages and {len(pseudo.queries)} queries"
        )
    full = maxsim_matrix(pseudo.queries, [p.vectors for p in pseudo.pages])
    gains = pseudo_gains(pseudo.pages, pseudo.sources, neighbours, relevance)
    total = max(collection_pages or 0, len(pseudo.pages))
    full_ndcg = collection_ndcg(full, gains, total)
    full_mean = float(full_ndcg.mean())
    own = full[np.arange(len(pseudo.sources)), pseudo.sources]
    profile = {
        "pseudo_ndcg": full_mean,
        "own_first": float(np.mean(np.argmax(full, axis=1) == np.asarray(pseudo.sources))),
    }
    rows = []
    for spec in methods:
        name, params = parse_method_spec(spec)
        for ratio in ratios:
            compressor = compressor_for(
                name, n_layers=n_layers, model_id=model_id, ratio=ratio, window=window, **params
            )
            compressed = compressor.compress_many(pseudo.pages)
            scores = maxsim_matrix(pseudo.queries, [c.vectors for c in compressed])
            kept = scores[np.arange(len(pseudo.sources)), pseudo.sources]
            ndcg = collection_ndcg(scores, gains, total)
            low, high = retention_interval(ndcg, full_ndcg)
            rows.append(
                EstimateRow(
                    method=spec,
                    ratio=float(ratio),
                    estimated=float(ndcg.mean()) / full_mean if full_mean > 0 else math.nan,
                    low=low,
                    high=high,
                    sr=float(np.mean(np.where(own > 0, kept / np.where(own > 0, own, 1), 1.0))),
                    rank_agreement=top_overlap(full, scores),
                    tokens_per_page=float(np.mean([len(c.vectors) for c in compressed])),
                )
            )
            if progress:
                progress(f"{spec} @ {ratio:g}")
    result = RetentionEstimate(
        rows=rows,
        n_pages=len(pseudo.pages),
        n_queries=len(pseudo.queries),
        query_kind=pseudo.kind,
        encoder=encoder_name,
        tokens_per_page_full=float(np.mean([p.n_tokens for p in pseudo.pages])),
        notes=fallback_note(pseudo.fallbacks, len(pseudo.queries)),
        fallback_queries=pseudo.fallbacks,
        relevance=relevance,
        collection_pages=total,
        profile=profile,
    )
    result.notes += bias_notes(result)
    return result
