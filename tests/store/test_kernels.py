"""MaxSim straight from residual codes (`store/candidates/kernels.py`): the compiled kernel scores
what numpy's decode-then-product scores, within the stated bound of not rounding through fp16,
for 1-, 2- and 4-bit codes, base and tail parts, odd page and query lengths, on one thread or
several; and a codes-only store past its fp32 cache answers through it exactly as one that
decodes into the cache."""

from __future__ import annotations

import numpy as np
import pytest

from vrag_compress.scoring import maxsim
from vrag_compress.scoring.packed import gather_pages, maxsim_scores
from vrag_compress.store import LocalStore, PageRecord
from vrag_compress.store.candidates.codec import ResidualCodec, _pack, _unpack
from vrag_compress.store.candidates.kernels import byte_table

DIM = 32
CENTRES = np.random.default_rng(0).normal(size=(40, DIM))


def page(i: int) -> np.ndarray:
    """Clustered unit vectors, 7 to 22 of them (odd and even lengths)."""
    rng = np.random.default_rng(i)
    n = 7 + i % 16
    x = CENTRES[rng.integers(0, len(CENTRES), size=n)] + 0.4 * rng.normal(size=(n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_the_byte_table_holds_each_packed_bytes_bucket_means(nbits):
    rng = np.random.default_rng(nbits)
    weights = rng.normal(size=(DIM, 1 << nbits)).astype(np.float32)
    buckets = rng.integers(0, 1 << nbits, size=(50, DIM)).astype(np.uint8)
    packed = _pack(buckets, nbits)
    table = byte_table(weights, nbits)
    per = 8 // nbits
    looked_up = table[np.arange(packed.shape[1]), packed].reshape(50, DIM)
    assert np.array_equal(_unpack(packed, nbits, DIM), buckets)
    assert np.array_equal(looked_up, weights[np.arange(DIM), buckets])
    assert table.shape == (DIM // per, 256, per)


@pytest.fixture(scope="module", params=["1bit", "2bit", "4bit"])
def coded_store(request, tmp_path_factory):
    """A codes-only store with a trained base and, added after it, a tail part."""
    path = tmp_path_factory.mktemp(request.param) / "s"
    config = {"dim": DIM, "model_id": "t/kernel", "codes": request.param, "fp16": False}
    with LocalStore.create(path, config, codes_min_tokens=1_000) as store:
        store.add([PageRecord(f"p{i:04d}", "d", i + 1, page(i)) for i in range(300)])
        store.optimize()
        store.add([PageRecord(f"t{i:04d}", "tail", i + 1, page(1000 + i)) for i in range(40)])
    return path


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("query_tokens", [1, 3, 4, 5, 20])
def test_the_kernel_scores_what_the_decoded_rows_score(coded_store, threads, query_tokens):
    rng = np.random.default_rng(query_tokens)
    q = rng.normal(size=(query_tokens, DIM)).astype(np.float32)
    with LocalStore.open(coded_store, readonly=True, cache_fp32_max_bytes=0) as store:
        snap = store._searcher.snapshots.current()
        tokens = snap.tokens
        assert tokens.index.tail.resid is not None and len(tokens.index.tail.codes) > 0
        pages = np.sort(rng.choice(len(snap.pids), size=150, replace=False))
        fast = tokens.maxsim(q, pages, threads)
        rows, bounds = gather_pages(snap.bounds, pages)
        decoded = tokens[rows]
        slow = maxsim_scores([q], decoded, bounds, sum_dtype=np.float64)[0]
        error = tokens.maxsim_error(q)
    # scored as q.centroid + q.residual without the fp16 rounding of a decoded page: apart by
    # no more than the stated bound, and the bound is small beside the scores themselves
    assert np.abs(fast - slow).max() <= error + 2e-6 * np.abs(slow).max()
    assert error < 0.01 * np.abs(slow).mean()


def test_the_kernel_bound_covers_the_largest_rounding_a_page_can_get():
    """Tokens whose every coordinate rounds by nearly half an fp16 step, against a query that
    weighs each coordinate in the rounding's direction: the gap stays within the bound."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(400, DIM)).astype(np.float32) * 0.3
    centroids = (x[:16] + 1e-3).astype(np.float32)
    codes = rng.integers(0, 16, 400).astype(np.int32)
    codec = ResidualCodec.fit(x - centroids[codes], 2)
    packed = codec.encode(x, codes, centroids)
    decoded = codec.decode(packed, codes, centroids)
    from types import SimpleNamespace

    from vrag_compress.store.candidates.kernels import coded_maxsim

    index = SimpleNamespace(
        centroids=centroids,
        kernel_arrays=lambda: (400, codes, packed, codes[:0], packed[:0], centroids, table),
    )
    table = byte_table(codec.weights, 2)
    unrounded = centroids[codes] + codec.weights[np.arange(DIM), _unpack(packed, 2, DIM)]
    q = np.sign(decoded - unrounded)[:1].astype(np.float32)  # row 0: every rounding adds up
    q /= np.linalg.norm(q)
    fast = coded_maxsim(q, index, np.array([0]), np.array([1]))
    gap = abs(float(fast[0]) - float(decoded[0] @ q[0]))
    norm = float(np.linalg.norm(decoded[0]))
    assert 0 < gap <= 2.0**-11 * norm * 1.01


def test_the_compiled_decoder_rounds_as_the_numpy_decoder_rounds():
    """Decoded values go through fp16; the kernel's bit rounding gives the same values."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, DIM)).astype(np.float32) * 0.3
    centroids = x[:16] + 1e-3
    codes = rng.integers(0, 16, 400).astype(np.int32)
    codec = ResidualCodec.fit(x - centroids[codes], 2)
    packed = codec.encode(x, codes, centroids)
    decoded = codec.decode(packed, codes, centroids)
    from vrag_compress.store.candidates.kernels import kernels

    table = byte_table(codec.weights, 2)
    empty = np.empty((0, packed.shape[1]), np.uint8)
    out = np.empty_like(decoded)
    arrays = (400, codes, packed, codes[:0], empty, centroids, table)
    assert kernels().decode_rows(np.arange(400, dtype=np.int64), arrays, out)
    assert np.array_equal(out.view(np.uint32), decoded.view(np.uint32))


def test_a_codes_only_store_ranks_by_its_decoded_vectors(coded_store):
    """Searches score codes in place; the ranking and scores are those of the decoded vectors
    that `get` returns, with or without the fp32 cache, on one thread or two."""
    rng = np.random.default_rng(11)
    queries = [rng.normal(size=(n, DIM)).astype(np.float32) for n in (1, 4, 9)]
    answers = {}
    for cache, threads in ((0, 1), (1 << 30, 2)):
        opts = {"cache_fp32_max_bytes": cache, "threads": threads}
        with LocalStore.open(coded_store, readonly=True, **opts) as store:
            kept = {r.page_id: r.vectors for r in store.get(store.page_ids())}
            answers[cache] = [
                [(h.page_id, h.score) for h in store.search(q, k=10, mode=mode, filter=where)]
                for q in queries
                for mode in ("exact", "two_stage")
                for where in (None, {"doc_id": "tail"})
            ]
    assert answers[0] == answers[1 << 30]
    for q, hits in zip(queries, answers[0][::4], strict=True):  # exact, unfiltered
        truth = sorted(((-maxsim(q, v), p) for p, v in kept.items()))[:10]
        assert [p for _, p in truth] == [p for p, _ in hits]
        np.testing.assert_allclose([-s for s, _ in truth], [s for _, s in hits], rtol=1e-5)


def test_without_a_writable_cache_folder_the_kernels_cache_in_a_temporary_one(monkeypatch):
    from types import SimpleNamespace

    from vrag_compress.store.candidates import kernels

    asked: list[str | None] = []

    def load(cache_dir: str | None = None) -> SimpleNamespace:
        asked.append(cache_dir)
        if cache_dir is None:
            raise RuntimeError("cannot cache function 'coded_maxsim': no locator available")
        return SimpleNamespace(coded_maxsim="coded", list_gains="lists", decode_rows="decode")

    monkeypatch.setattr(kernels, "_load_loops", load)
    kernels.kernels.cache_clear()
    try:
        assert kernels.kernels() == kernels.Kernels("coded", "lists", "decode")
        assert asked[0] is None and "vrag-numba-" in str(asked[1])
    finally:
        kernels.kernels.cache_clear()


def test_a_new_process_reads_the_compiled_kernels_from_the_cache(tmp_path):
    """The kernels are compiled once and read back by later processes (compiling takes
    seconds, which every first query would otherwise pay)."""
    import subprocess
    import sys

    script = (
        "import time, numpy as np\n"
        "from vrag_compress.store.candidates.kernels import kernels, list_gains\n"
        "t = time.perf_counter(); k = kernels()\n"
        "list_gains(np.zeros((1, 1), np.int64), np.ones((1, 1), np.float32),"
        " np.array([0, 1]), np.array([0], np.int32), 1)\n"
        "print(k.list_gains.stats.cache_hits)\n"
    )
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    assert runs[1].stdout.strip() not in ("", "Counter()"), runs[1].stdout


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_compiled_decode_is_the_codecs_decode_bit_for_bit(nbits):
    """Including values below fp16's smallest normal (2^-14), which round in steps of 2^-24."""
    from types import SimpleNamespace

    from vrag_compress.store.candidates.kernels import decode_rows

    rng = np.random.default_rng(nbits)
    levels = 1 << nbits
    weights = (rng.normal(size=(DIM, levels)) * 2e-5).astype(np.float32)
    cutoffs = np.zeros((DIM, levels - 1), np.float32)  # unused by decode
    codec = ResidualCodec(nbits, cutoffs, weights)
    scale = np.array([0.3] * 8 + [3e-5] * 8, np.float32)[:, None]  # half the centroids tiny
    centroids = (rng.normal(size=(16, DIM)) * scale).astype(np.float32)
    codes = rng.integers(0, 16, 600).astype(np.int32)
    packed = rng.integers(0, 256, (600, DIM * nbits // 8)).astype(np.uint8)
    want = codec.decode(packed, codes, centroids)
    n_base = 400
    arrays = (
        n_base,
        codes[:n_base],
        packed[:n_base],
        codes[n_base:],
        packed[n_base:],
        centroids,
        byte_table(codec.weights, nbits),
    )
    index = SimpleNamespace(kernel_arrays=lambda: arrays, centroids=centroids, root=None)
    rows = rng.permutation(600)
    got = decode_rows(index, rows)
    assert np.array_equal(got.view(np.uint32), want[rows].view(np.uint32))
    assert (np.abs(want) < 2.0**-14).sum() > 100  # the subnormal branch was exercised


def test_damaged_codes_raise_a_store_error_not_garbage(coded_store, tmp_path):
    """A centroid id past the centroids (a flipped bit in the codes file) never reads memory
    out of bounds: the search raises a store error naming the candidate index."""
    import shutil

    from vrag_compress.store.base import StoreCorruptError

    copy = tmp_path / "damaged"
    shutil.copytree(coded_store, copy)
    with LocalStore.open(copy, readonly=True) as store:
        index = store._searcher.snapshots.current().tokens.index
        arrays = index.kernel_arrays()
        base_codes = arrays[1]
        forged = np.array(base_codes)
        forged[5] = np.iinfo(forged.dtype).max
        index._kernel_arrays = (arrays[0], forged, *arrays[2:])
        with pytest.raises(StoreCorruptError, match="centroids or rows that do not exist"):
            store.search(np.ones((2, DIM), np.float32), k=5, mode="exact")
