"""`estimate_retention`: an index or a folder of documents in, the estimate out. Samples the
source (`sampling`), builds its pseudo-queries (`pseudo_queries`), estimates each sample
(`estimator`) and pools them (`pooling`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vrag_compress.encoders.base import Encoder, PageEncoding
from vrag_compress.estimate.estimator import estimate_pages
from vrag_compress.estimate.pooling import bracketed, pooled
from vrag_compress.estimate.pseudo_queries import (
    BOTH,
    DEFAULT_QUERY_KIND,
    QUERY_CHOICES,
    cloze_queries,
    image_queries,
    reads_text,
)
from vrag_compress.estimate.report import (
    DEFAULT_METHODS,
    DEFAULT_NEIGHBOURS,
    DEFAULT_RATIOS,
    DEFAULT_RELEVANCE,
    DEFAULT_SAMPLE,
    RELEVANCE,
    EstimateError,
    Progress,
    RetentionEstimate,
)
from vrag_compress.estimate.sampling import Sample, folder_sample, index_sample, too_few


def estimate_retention(
    source: str | Path | Any,
    *,
    methods: Sequence[str] = DEFAULT_METHODS,
    ratios: Sequence[float] = DEFAULT_RATIOS,
    sample: int = DEFAULT_SAMPLE,
    seed: int = 0,
    model: str | None = None,
    encoder: Encoder | None = None,
    device: str = "auto",
    neighbours: int = DEFAULT_NEIGHBOURS,
    queries: str = DEFAULT_QUERY_KIND,
    relevance: str = DEFAULT_RELEVANCE,
    scale_to_collection: bool = True,
    draws: int = 1,
    progress: Progress | None = None,
) -> RetentionEstimate:
    """Estimate each method's retention at each ratio on ``source`` before committing to one.

    source: an index folder or an open `VisualIndex` (its pages are re-encoded with its model),
    or a folder / files of documents (read with `vrag_compress.ingest`, encoded with ``model``,
    default the index default, or ``encoder``). ``sample`` pages are drawn with ``seed``;
    ``queries`` is the pseudo-query kind, "lead", "sentence" or "keyword" (see
    `vrag_compress.estimate`: choose the kind your users' queries look like), or "both" lead
    and keyword (each row's ``keyword`` beside its ``estimated``). ``scale_to_collection``
    predicts the rankings in the whole collection rather than in the sample (`collection_ndcg`;
    False: the sample's own rankings, which run high when the collection is much larger than
    the sample).
    ``draws`` > 1 repeats the estimate on that many page samples (seeds ``seed``, ``seed`` + 1,
    ...) and pools them (`pooled`): the interval then includes how another page sample moves
    the figure, at ``draws`` times the cost.
    """
    from vrag_compress.index import VisualIndex

    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 2:
        raise EstimateError(f"sample must be at least 2 pages, got {sample!r}")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise EstimateError(f"draws must be at least 1 page sample, got {draws!r}")
    if queries not in QUERY_CHOICES:
        raise EstimateError(f"queries must be one of {', '.join(QUERY_CHOICES)}, got {queries!r}")
    if relevance not in RELEVANCE:
        raise EstimateError(f"relevance must be one of {', '.join(RELEVANCE)}, got {relevance!r}")
    plan = _Plan(
        methods, ratios, seed, neighbours, queries, progress, relevance, scale_to_collection
    )
    seeds = range(seed, seed + draws)
    if isinstance(source, VisualIndex):
        return _estimate_index(source, sample, plan, seeds)
    path = Path(source)
    if not path.exists():
        raise EstimateError(f"{path}: no such index, folder or file")
    if VisualIndex.exists(path):
        # read-only: an estimate must not wait on a writer nor upgrade an old index
        with VisualIndex.open(
            path, model=model, encoder=encoder, device=device, readonly=True
        ) as index:
            return _estimate_index(index, sample, plan, seeds)
    if encoder is None:
        from vrag_compress.defaults import DEFAULT_MODEL
        from vrag_compress.encoders import load_encoder

        encoder = load_encoder(model or DEFAULT_MODEL, device=device)
    samples = ((s, folder_sample(path, sample, s)) for s in seeds)
    return _estimate_samples(encoder, samples, plan)


def _sized(plan: _Plan, collection_pages: int) -> _Plan:
    """``plan`` with the source's page count, when the estimate is scaled to it."""
    return replace(plan, collection_pages=collection_pages if plan.scale_to_collection else None)


@dataclass(frozen=True)
class _Plan:
    """What to estimate and how, the same for an index and a folder."""

    methods: Sequence[str]
    ratios: Sequence[float]
    seed: int
    neighbours: int
    queries: str
    progress: Progress | None
    relevance: str = DEFAULT_RELEVANCE
    scale_to_collection: bool = True
    collection_pages: int | None = None
    """Pages in the source the sample was drawn from (set once the source is read)."""


def _estimate_index(
    index: Any, sample: int, plan: _Plan, seeds: Sequence[int]
) -> RetentionEstimate:
    ids = sorted(index.store.page_ids())
    too_few(len(ids), index.path)
    samples = ((seed, index_sample(index, ids, sample, seed)) for seed in seeds)
    return _estimate_samples(index.encoder, samples, plan)


def _estimate_samples(
    encoder: Any, samples: Iterable[tuple[int, Sample]], plan: _Plan
) -> RetentionEstimate:
    """The estimate of ``plan.queries`` on each (seed, sample), pooled over the samples
    (`pooled`); with "both", lead and keyword on the same samples (page images are encoded
    once per sample: they keep their text whatever the query). Samples are read one at a time."""
    kinds = ("lead", "keyword") if plan.queries == BOTH else (plan.queries,)
    per_kind: dict[str, list[RetentionEstimate]] = {kind: [] for kind in kinds}
    for seed, (texts, images, total) in samples:
        pages = None if reads_text(encoder) else encoder.encode_pages(list(images), with_stats=True)
        for kind in kinds:
            drawn = replace(_sized(plan, total), queries=kind, seed=seed)
            per_kind[kind].append(_estimate_kind(encoder, texts, pages, drawn))
    results = [pooled(per_kind[kind]) for kind in kinds]
    return results[0] if len(results) == 1 else bracketed(*results)


def _estimate_kind(
    encoder: Any, texts: list[str | None], pages: list[PageEncoding] | None, plan: _Plan
) -> RetentionEstimate:
    if pages is None:
        pseudo = cloze_queries(texts, encoder, plan.seed, plan.queries)
    else:
        usable = [i for i, p in enumerate(pages) if p.n_tokens > 0]
        pseudo = image_queries(
            [pages[i] for i in usable], [texts[i] for i in usable], encoder, plan.seed, plan.queries
        )
    if plan.progress:
        plan.progress(f"encoded {len(pseudo.pages)} sampled pages ({plan.queries} queries)")
    return estimate_pages(
        pseudo,
        plan.methods,
        plan.ratios,
        n_layers=int(encoder.n_layers),
        model_id=getattr(encoder, "model_id", None),
        encoder_name=str(getattr(encoder, "model_id", "")),
        neighbours=plan.neighbours,
        relevance=plan.relevance,
        collection_pages=plan.collection_pages,
        progress=plan.progress,
    )
