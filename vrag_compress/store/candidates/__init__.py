"""The candidate stage of a two-stage search, as arrays and files (no SQLite): k-means cells and
their page lists (`cells`), the residual codes (`codec`), the persisted candidate index
(`files`), the compiled kernels that score codes (`kernels`, `kernel_loops`), the search
parameters measured on a collection (`tuning`), the FAISS token index used without cells (`ann`)
and the token rows read on demand (`token_rows`). A store backend decides when to train and where
the files live (the embedded store's side is `vrag_compress.store.local.candidates`).
"""
