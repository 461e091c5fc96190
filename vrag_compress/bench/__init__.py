"""Benchmarks and retrieval evaluation: the `vrag bench` commands and what only they use.

One module per command (`capture`, `compress`, `encode`, `ingest`, `lexical`, `ocr`, `plaid`,
`retention`, `serve`, `store`; `store_qdrant` is `store --backend qdrant-local`), their helpers
(`store_timing`, `synthetic` and `real_pages` store corpora, `plaid_runner` run by fast-plaid's own
Python, `encode_archs` real-size
architectures), the retention evaluation (`eval/`: ranx metrics, runner, plots, kept-token
analysis, hybrid runs), the BEIR dataset reader (`beir`, which `vrag calibrate` reads too) and
where the shared data lives (`paths`). Nothing in the indexing pipeline imports this package; it
imports the pipeline.
"""
