"""What compression will cost on your own collection, estimated without labels.

``estimate_retention(INDEX_OR_FOLDER)`` samples pages, builds pseudo-queries from them and
compares, for each method and keep ratio, the ranking that compressed pages give with the one
the uncompressed pages give. Pseudo-queries follow the inverse cloze task: a piece of a page's
text is the query, and the page, encoded without it, is the page it should find, so the query
shares meaning with its page rather than copying it. The piece is the page's lead (``"lead"``,
the default): its title, heading or first sentence, which states the topic in a few words as a
user's question does; running heads repeated on other sampled pages are skipped. Pages without
a lead fall back to one random sentence (``"sentence"``, the first version: a detail of the page,
and details are what compression loses first, so it runs low). Pages without text (scans
without OCR, figures) fall back to a span of the page's own tokens, removed from it.

How users ask matters more than anything else the estimate chooses (docs/retention.md): leads
stand for topical questions ("what similarity laws must be obeyed ..."); on collections searched
by tags or a few rare words they ran high by up to 0.24. ``"keyword"`` stands for those: each
page's rarest word that another sampled page also has, taken out of the page as the lead is (a
tag search finds pages on its topic, often without its word); pooled over five page samples
(``draws``) it was within ±0.07 on three judged keyword collections and 0.08-0.14 high on a
fourth (subject tags), on questions up to 0.23 low. One page sample's keyword figure moves by
more than its interval says, so pool three or more. Choose the kind your users' queries look
like, or ``"both"`` for the range.

Per method and ratio the report gives:
- ``estimated``: the expected retention@10, the NDCG@10 of the compressed ranking over the
  NDCG@10 of the uncompressed ranking, with graded pseudo-relevance: the query's own page
  (gain 2) and the ``neighbours`` pages nearest to it (gain 1, by the cosine of their mean
  uncompressed token vectors), since real queries are judged on topics that several pages cover.
  The rankings stand for the whole collection, not the sample: a collection ten times the sample
  has about ten times the pages that can outrank a relevant one, so each relevant page's rank is
  predicted there (`collection_ndcg`); on the sample alone the estimate ran high by up to 0.1;
- ``low`` / ``high``: its 90% bootstrap interval over the pseudo-queries (how much another
  draw of queries could move it);
- ``sr``: mean Score Retention (compressed / uncompressed MaxSim) of each query and its page;
- ``rank_agreement``: the share of the uncompressed top 10 that the compressed top 10 keeps;
- ``tokens_per_page``: the vectors a page keeps on average.

It needs the pages at full resolution: an index's stored pages are re-encoded from their text or
images (the index holds compressed vectors only); a folder is read with `vrag_compress.ingest`.

The parts, each a module here: `sampling` draws the pages, `pseudo_queries` builds the queries,
`ranking` compares rankings, `estimator` estimates one sample, `pooling` pools samples,
`validation` says how far to trust the figures, `retention` runs the whole estimate on an index
or a folder, and `questions` measures the same on users' own questions instead.
"""

from vrag_compress.estimate.estimator import (
    estimate_pages,
)
from vrag_compress.estimate.pooling import (
    BRACKET_NOTE,
    RANGE_ADVICE,
    bracketed,
    mean_interval,
    pooled,
)
from vrag_compress.estimate.pseudo_queries import (
    BOTH,
    DEFAULT_QUERY_KIND,
    KEYWORD,
    KEYWORD_SHARE,
    KEYWORDS,
    LEAD_WORDS,
    MIN_SENTENCE_WORDS,
    QUERY_CHOICES,
    QUERY_KINDS,
    SPAN_TOKENS,
    TEXT_UNIT,
    PseudoQueries,
    cloze_queries,
    cloze_split,
    encode_texts,
    image_queries,
    keyword_splits,
    lead_splits,
    pseudo_splits,
    reads_text,
    token_span_queries,
)
from vrag_compress.estimate.ranking import (
    BOOTSTRAP,
    TOP,
    collection_ndcg,
    leave_out,
    maxsim_matrix,
    pseudo_gains,
    retention_interval,
)
from vrag_compress.estimate.report import (
    DEFAULT_METHODS,
    DEFAULT_NEIGHBOURS,
    DEFAULT_RATIOS,
    DEFAULT_RELEVANCE,
    DEFAULT_SAMPLE,
    MIN_PAGES_TO_RECOMMEND,
    RANGE_TERMS,
    RELEVANCE,
    EstimateError,
    EstimateRow,
    Progress,
    RetentionEstimate,
    point_range,
    row_range,
)
from vrag_compress.estimate.retention import (
    estimate_retention,
)
from vrag_compress.estimate.sampling import (
    Sample,
    render_pages,
    too_few,
)
from vrag_compress.estimate.validation import (
    KEYWORD_DRAW_SD,
    KEYWORD_SAMPLE_SHIFT,
    OTHER_KIND,
    POOL_ADVICE,
    PROFILE_SLACK,
    VALIDATED,
    VALIDATED_SAMPLE,
    Validated,
    bias_notes,
)

__all__ = [
    "BOOTSTRAP",
    "BOTH",
    "BRACKET_NOTE",
    "DEFAULT_METHODS",
    "DEFAULT_NEIGHBOURS",
    "DEFAULT_QUERY_KIND",
    "DEFAULT_RATIOS",
    "DEFAULT_RELEVANCE",
    "DEFAULT_SAMPLE",
    "EstimateError",
    "EstimateRow",
    "KEYWORD",
    "KEYWORDS",
    "KEYWORD_DRAW_SD",
    "KEYWORD_SAMPLE_SHIFT",
    "KEYWORD_SHARE",
    "LEAD_WORDS",
    "MIN_PAGES_TO_RECOMMEND",
    "MIN_SENTENCE_WORDS",
    "OTHER_KIND",
    "POOL_ADVICE",
    "PROFILE_SLACK",
    "Progress",
    "PseudoQueries",
    "QUERY_CHOICES",
    "QUERY_KINDS",
    "RANGE_ADVICE",
    "RANGE_TERMS",
    "RELEVANCE",
    "RetentionEstimate",
    "SPAN_TOKENS",
    "Sample",
    "TEXT_UNIT",
    "TOP",
    "VALIDATED",
    "VALIDATED_SAMPLE",
    "Validated",
    "bias_notes",
    "bracketed",
    "cloze_queries",
    "cloze_split",
    "collection_ndcg",
    "encode_texts",
    "estimate_pages",
    "estimate_retention",
    "image_queries",
    "keyword_splits",
    "lead_splits",
    "leave_out",
    "maxsim_matrix",
    "mean_interval",
    "point_range",
    "pooled",
    "pseudo_gains",
    "pseudo_splits",
    "reads_text",
    "render_pages",
    "retention_interval",
    "row_range",
    "token_span_queries",
    "too_few",
]
