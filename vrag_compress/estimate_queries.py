"""The estimate on users' own questions, under the import path it had before the label-free and
question estimates became one package: the code lives in `vrag_compress.estimate.questions`."""

from vrag_compress.estimate.questions import (
    DEFAULT_QUERY_SAMPLE,
    LEVEL,
    MIN_QUESTIONS,
    SAMPLE_BIAS,
    Progress,
    QueryEstimate,
    QueryRow,
    SourcePages,
    agreement,
    estimate_on_queries,
    judged_files,
    judged_gains,
    mean_bootstrap,
    measure,
    read_judged,
    read_questions,
    read_source,
)

__all__ = [
    "DEFAULT_QUERY_SAMPLE",
    "LEVEL",
    "MIN_QUESTIONS",
    "Progress",
    "QueryEstimate",
    "QueryRow",
    "SAMPLE_BIAS",
    "SourcePages",
    "agreement",
    "estimate_on_queries",
    "judged_files",
    "judged_gains",
    "mean_bootstrap",
    "measure",
    "read_judged",
    "read_questions",
    "read_source",
]
