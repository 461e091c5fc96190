"""Benchmarks and retrieval evaluation for vrag-compress: the `vrag bench` commands and what only
they use, a distribution of its own (vrag-compress-bench) so that the library users import never
loads them.

One module per command (`capture`, `compress`, `encode`, `estimate`, `ingest`, `lexical`, `ocr`,
`onnx`, `plaid`, `query`, `ray_scaling`, `rerank`, `retention`, `serve`, `store`; `store_qdrant` is
`store --backend qdrant-local`), registered on the group in `app` and all imported by `cli` (the
entry point `vrag` loads); their helpers (`store_timing`, `synthetic`, `skewed` and `real_pages`
store corpora, `peers` and `plaid_runner` run by fast-plaid's own Python, `encode_archs`
real-size architectures); the retention evaluation (`eval/`: ranx metrics, runner, plots,
kept-token analysis, hybrid runs); and the command-line view of the inputs (`paths`). The BEIR
reader (`vrag_compress.beir`), the shared data folder (`vrag_compress.shared_data`) and the server
processes (`vrag_compress.serve.process`) belong to the library, which calibration and the tests
use too. Nothing in `vrag_compress` imports this package; it imports the library.
"""
