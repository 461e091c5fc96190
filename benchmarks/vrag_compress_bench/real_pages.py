"""Store-benchmark pages that look like real data: resampled MiniLM token vectors of a corpus.

Synthetic topic mixtures make every page equally far from every other; real token vectors are
heavy-tailed (a few huge clusters of function words, many small ones) and co-occur within a
document. This generator keeps both: the corpus (a BEIR folder, Cranfield by default) is encoded
once with the MiniLM text encoder, projected to ``dim`` by PCA and clustered; each page is a
0.7/0.3 mix of two random documents' tokens, each token replaced by a random member of its
cluster plus small noise. Queries are the corpus's real queries encoded the same way. The
encodings are cached (``.npz`` without pickles) so later runs skip the encoder.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

POOL_CLUSTERS = 1024
MIX = 0.7
NOISE = 0.05
QUERIES_FROM_PAGES = 225  # queries drawn from a PDF folder's pages (as many as Cranfield)


@dataclass
class TokenPool:
    """Real token vectors grouped by document and by cluster, and the encoded queries."""

    tokens: np.ndarray  # [N, dim] unit float32
    doc_bounds: np.ndarray  # [n_docs + 1] rows of each document
    cluster_members: np.ndarray  # [N] token rows sorted by cluster
    cluster_bounds: np.ndarray  # [n_clusters + 1]
    labels: np.ndarray  # [N] cluster of each token
    queries: list[np.ndarray]

    @property
    def dim(self) -> int:
        return int(self.tokens.shape[1])


def _normalise(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)).astype(np.float32)


def encode_corpus(
    source: Path, dim: int, cache_dir: Path | None, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(document tokens [N, dim], document bounds, query token arrays), cached by source+dim."""
    key = hashlib.sha1(f"{Path(source).resolve()}|{dim}|minilm|{seed}".encode()).hexdigest()[:12]
    cache = None if cache_dir is None else Path(cache_dir) / f"real-pages-{key}.npz"
    if cache is not None and cache.is_file():
        with np.load(cache, allow_pickle=False) as z:
            q_bounds = z["query_bounds"]
            queries = [z["queries"][a:b] for a, b in zip(q_bounds[:-1], q_bounds[1:], strict=True)]
            return z["tokens"], z["doc_bounds"], queries
    from vrag_compress.encoders.text import TextTokenEncoder

    texts, query_texts = corpus_texts(source, seed=seed)
    encoder = TextTokenEncoder("minilm")
    docs = [e.vectors for e in encoder.encode_documents(texts)]
    queries = encoder.encode_queries(query_texts)
    raw = np.concatenate(docs)
    basis = _pca_basis(raw, dim, seed)
    tokens = _normalise(raw @ basis)
    queries = [_normalise(q @ basis) for q in queries]
    doc_bounds = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        q_bounds = np.concatenate([[0], np.cumsum([len(q) for q in queries])]).astype(np.int64)
        tmp = cache.with_suffix(".tmp.npz")
        np.savez(
            tmp,
            tokens=tokens,
            doc_bounds=doc_bounds,
            queries=np.concatenate(queries),
            query_bounds=q_bounds,
        )
        tmp.replace(cache)
    return tokens, doc_bounds, queries


def corpus_texts(source: Path, *, seed: int = 0) -> tuple[list[str], list[str]]:
    """Document and query texts of a BEIR folder, or of a folder of PDFs (one document per
    page with a text layer; as queries, a run of 4-12 words from a random page, since such a
    folder has none of its own)."""
    source = Path(source)
    if (source / "corpus.jsonl").is_file():
        from vrag_compress.beir import load_beir

        data = load_beir(source)
        return [t for t in data.docs.values() if t.strip()], list(data.queries.values())
    texts = [t for t in pdf_page_texts(source) if len(t.split()) >= 8]
    if not texts:
        raise ValueError(f"{source} holds no corpus.jsonl and no PDF page with text")
    rng = np.random.default_rng(seed)
    queries = []
    for _ in range(QUERIES_FROM_PAGES):
        words = texts[int(rng.integers(len(texts)))].split()
        n = int(rng.integers(4, 13))
        start = int(rng.integers(0, max(1, len(words) - n)))
        queries.append(" ".join(words[start : start + n]))
    return texts, queries


def pdf_page_texts(folder: Path) -> list[str]:
    """The text layer of every page of the PDFs under ``folder`` (unreadable files skipped)."""
    import pypdfium2 as pdfium

    texts = []
    for path in sorted(Path(folder).rglob("*.pdf")):
        try:
            pdf = pdfium.PdfDocument(str(path))
        except pdfium.PdfiumError as exc:
            log.warning("skipping %s: %s", path, exc)
            continue
        for page in pdf:
            texts.append(" ".join(page.get_textpage().get_text_range().split()))
        pdf.close()
    return texts


def _pca_basis(x: np.ndarray, dim: int, seed: int) -> np.ndarray:
    """``[H, dim]`` projection onto the top principal directions (random when dim ≥ H)."""
    rng = np.random.default_rng(seed)
    if dim >= x.shape[1]:
        return (rng.normal(size=(x.shape[1], dim)) / np.sqrt(dim)).astype(np.float32)
    sample = x[rng.choice(len(x), size=min(len(x), 50_000), replace=False)]
    centred = sample - sample.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return vt[:dim].T.astype(np.float32)


def load_pool(
    source: Path, dim: int, cache_dir: Path | None, *, seed: int = 0, clusters: int = POOL_CLUSTERS
) -> TokenPool:
    """Encode (or load) the corpus and cluster its tokens for resampling."""
    tokens, doc_bounds, queries = encode_corpus(source, dim, cache_dir, seed=seed)
    return pool_of(tokens, doc_bounds, queries, seed=seed, clusters=clusters)


def pool_of(
    tokens: np.ndarray,
    doc_bounds: np.ndarray,
    queries: list[np.ndarray],
    *,
    seed: int = 0,
    clusters: int = POOL_CLUSTERS,
) -> TokenPool:
    """Cluster a corpus's unit token vectors for resampling (any source: encoded or synthetic)."""
    import faiss

    dim = int(tokens.shape[1])
    k = min(clusters, max(1, len(tokens) // 40))
    km = faiss.Kmeans(dim, k, niter=15, spherical=True, seed=seed, verbose=False)
    km.train(tokens)
    _, labels = km.index.search(tokens, 1)
    labels = labels[:, 0].astype(np.int64)
    members = np.argsort(labels, kind="stable")
    bounds = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=k), out=bounds[1:])
    return TokenPool(tokens, doc_bounds, members, bounds, labels, queries)


def pages(
    pool: TokenPool, n_pages: int, tokens_per_page: int, *, seed: int = 0, batch: int = 256
) -> Iterator[np.ndarray]:
    """Batches ``[b, tokens_per_page, dim]`` of resampled pages (vectorised per batch)."""
    rng = np.random.default_rng(seed + 11)
    n_docs = len(pool.doc_bounds) - 1
    doc_len = np.diff(pool.doc_bounds)
    n_main = int(round(MIX * tokens_per_page))
    for start in range(0, n_pages, batch):
        b = min(batch, n_pages - start)
        docs = rng.integers(0, n_docs, size=(b, 2))
        which = np.zeros((b, tokens_per_page), dtype=np.int64)
        which[:, n_main:] = 1
        doc = np.take_along_axis(docs, which, axis=1)
        src = pool.doc_bounds[doc] + (rng.random(doc.shape) * doc_len[doc]).astype(np.int64)
        cl = pool.labels[src]
        size = pool.cluster_bounds[cl + 1] - pool.cluster_bounds[cl]
        member = pool.cluster_members[
            pool.cluster_bounds[cl] + (rng.random(cl.shape) * size).astype(np.int64)
        ]
        noise = rng.normal(scale=NOISE / np.sqrt(pool.dim), size=(*member.shape, pool.dim))
        yield _normalise(pool.tokens[member] + noise.astype(np.float32))


def queries(pool: TokenPool, n: int) -> list[np.ndarray]:
    """The first ``n`` real queries (cycled when more are asked than the corpus has)."""
    return [pool.queries[i % len(pool.queries)] for i in range(n)]
