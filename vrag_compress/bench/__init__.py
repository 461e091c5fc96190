"""Benchmarks and retrieval evaluation: the `vrag bench` commands and what only they use.

One module per command (`capture`, `compress`, `ingest`, `ocr`, `retention`, `store`,
`store_qdrant`), the retention evaluation (`eval/`: BEIR datasets, ranx metrics, runner, plots),
synthetic store pages (`synthetic`) and where the shared data lives (`paths`). Nothing in the
indexing pipeline imports this package; it imports the pipeline.
"""
