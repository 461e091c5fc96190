"""Store API: CRUD, exact vs brute force, two-stage recall, filters, validation, locks.

The behavioural tests run on both backends (`backend` fixture): the embedded `LocalStore` (with
fp16 vectors, and without them: "embedded-codes" keeps only centroid + 4-bit residual codes and
scores the decoded vectors) and the `QdrantStore` in Qdrant's local mode; kernel, recall,
compaction and lock tests are embedded.
"""

from __future__ import annotations

import importlib.util
import inspect

import numpy as np
import pytest

from vrag_compress.scoring import maxsim
from vrag_compress.scoring.packed import gather_pages, maxsim_scores, page_chunks, top_k
from vrag_compress.store import (
    DocumentRecord,
    DuplicatePageError,
    FilterError,
    LocalStore,
    MultiVectorStore,
    PageNotFoundError,
    PageRecord,
    StoreConfigMismatch,
    StoreError,
    StoreExistsError,
    StoreInputError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from vrag_compress.store.open import create_store, open_store
from vrag_compress_bench.synthetic import clustered_pages, queries_for

DIM = 16
CONFIG = {"dim": DIM, "model_id": "tiny/col", "compressor": {"name": "sap", "ratio": 0.1}}


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_pages(n: int, seed: int = 0, prefix: str = "p") -> list[PageRecord]:
    rng = np.random.default_rng(seed)
    return [
        PageRecord(
            page_id=f"{prefix}{i:04d}",
            doc_id=f"doc{i % 4}",
            page_no=i // 4 + 1,
            vectors=unit(rng, int(rng.integers(1, 12))),
            metadata={
                "year": 1995 + i % 30,
                "lang": ["en", "de", "fr"][i % 3],
                "kind": f"k{i % 5}",
            },
            image_ref=f"img/{i}.png",
            text=f"text {i}",
        )
        for i in range(n)
    ]


def brute_force(
    query: np.ndarray, pages: list[PageRecord], k: int, store=None
) -> list[tuple[str, float]]:
    """Reference ranking: per-page `maxsim` over the vectors the store keeps: fp16-rounded, or
    (a store without fp16 vectors) decoded from its codes, as `get` returns them."""
    if store is not None and store.config.get("fp16", True) is False:
        kept = {r.page_id: r.vectors for r in store.get([p.page_id for p in pages])}
    else:
        kept = {p.page_id: p.vectors.astype(np.float16).astype(np.float32) for p in pages}
    scored = [(p.page_id, maxsim(query, kept[p.page_id])) for p in pages]
    return sorted(scored, key=lambda t: (-t[1], t[0]))[:k]


HAS_QDRANT = importlib.util.find_spec("qdrant_client") is not None
BACKENDS = [
    "embedded",
    "embedded-codes",
    pytest.param(
        "qdrant",
        marks=pytest.mark.skipif(
            not HAS_QDRANT,
            reason="qdrant-client not installed (pip install 'vrag-compress[qdrant]')",
        ),
    ),
]


def store_target(tmp_path, backend: str):
    """Where a test store lives: a folder (embedded) or a Qdrant local-mode URL."""
    if backend.startswith("embedded"):
        return tmp_path / "store"
    return f"qdrant+local://{tmp_path / 'qdrant'}?collection=store"


def config_for(backend: str) -> dict:
    """The test config; "embedded-codes" keeps no fp16 vectors, only 4-bit residual codes."""
    return {**CONFIG, "codes": "4bit", "fp16": False} if backend == "embedded-codes" else CONFIG


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def store(tmp_path, backend):
    s = create_store(store_target(tmp_path, backend), config_for(backend))
    yield s
    s.close()


def test_protocol_and_config_roundtrip(store, tmp_path, backend):
    assert isinstance(store, MultiVectorStore)
    assert store.config == config_for(backend)
    store.update_config(calibration={"window": [11, 14]})
    store.close()
    with open_store(store_target(tmp_path, backend), readonly=True) as again:
        assert again.config["calibration"] == {"window": [11, 14]}
        assert again.library_version


def test_backends_match_every_protocol_signature(store):
    """What callers rely on is declared on the protocol, and each backend takes exactly those
    parameters (names, kinds, defaults), so code written against the protocol runs on both."""
    declared = {
        name: member
        for name, member in vars(MultiVectorStore).items()
        if callable(member) and (not name.startswith("_") or name in ("__enter__", "__exit__"))
    }
    assert {"get", "search", "close", "__enter__", "__exit__"} <= set(declared)
    for name, member in declared.items():
        want = inspect.signature(member).parameters
        got = inspect.signature(getattr(type(store), name)).parameters
        assert [(p.name, p.kind, p.default) for p in got.values()] == [
            (p.name, p.kind, p.default) for p in want.values()
        ], f"{type(store).__name__}.{name}"
    assert store.get(["nope"], missing="skip") == []
    assert store.readonly is False and store.closed is False
    with store as entered:
        assert entered is store
    assert store.closed


def test_add_get_count_documents(store):
    pages = make_pages(20)
    store.add(pages[:10], documents=[DocumentRecord("doc0", source="a.pdf", n_pages=5)])
    store.add(pages[10:])
    assert store.count() == 20
    got = store.get(["p0003", "p0001"])
    assert [g.page_id for g in got] == ["p0003", "p0001"]
    if store.config.get("fp16", True):
        np.testing.assert_array_equal(got[1].vectors, pages[1].vectors.astype(np.float16))
    else:  # decoded from centroid + residual codes: the same shape, close in direction
        assert got[1].vectors.shape == pages[1].vectors.shape
        cos = (got[1].vectors * pages[1].vectors).sum(1) / np.linalg.norm(got[1].vectors, axis=1)
        assert cos.min() > 0.8
    assert got[0].metadata == pages[3].metadata and got[0].text == "text 3"
    assert got[0].image_ref == "img/3.png" and got[0].vectors.dtype == np.float32
    docs = {d.doc_id: d for d in store.documents()}
    assert set(docs) == {"doc0", "doc1", "doc2", "doc3"}
    assert docs["doc0"].source == "a.pdf" and docs["doc1"].source is None
    store.put_document(DocumentRecord("doc0", source="a.pdf", n_pages=5, complete=True))
    assert store.document("doc0").complete and store.document("nope") is None
    assert store.page_ids(doc_id="doc1") == ["p0001", "p0005", "p0009", "p0013", "p0017"]
    assert store.page_ids() == sorted(p.page_id for p in pages)
    with pytest.raises(PageNotFoundError, match="missing"):
        store.get(["p0001", "missing"])
    assert [p.page_id for p in store.get(["missing", "p0002"], missing="skip")] == ["p0002"]


def test_add_is_all_or_nothing(store):
    pages = make_pages(6)
    store.add(pages[:3])
    with pytest.raises(DuplicatePageError, match="upsert"):
        store.add(pages[2:])
    bad = make_pages(2, prefix="q")
    bad[1].vectors = np.ones((3, DIM + 1), dtype=np.float32)
    with pytest.raises(StoreInputError, match=r"pages\[1\].*shape"):
        store.add(bad)
    assert store.count() == 3
    assert store.verify().ok


def test_upsert_delete_compact(store, backend):
    pages = make_pages(12)
    store.add(pages)
    new = PageRecord("p0000", "doc9", 7, unit(np.random.default_rng(5), 3), {"lang": "xx"})
    store.upsert([new])
    assert store.count() == 12
    got = store.get(["p0000"])[0]
    assert got.doc_id == "doc9" and got.page_no == 7 and got.vectors.shape == (3, DIM)
    assert store.delete(page_ids=["p0001", "p0002", "absent"]) == 2
    assert store.delete(doc_id="doc3") == 3
    assert store.document("doc3") is None
    before = store.verify()
    assert before.ok and (before.dead_bytes > 0 or not backend.startswith("embedded"))
    q = unit(np.random.default_rng(9), 4)
    ranking = [(r.page_id, r.score) for r in store.search(q, k=20)]
    store.compact()
    after = store.verify()
    assert after.ok and after.dead_bytes == 0 and after.pages == 7
    assert [(r.page_id, r.score) for r in store.search(q, k=20)] == ranking
    with pytest.raises(StoreInputError, match="exactly one"):
        store.delete()


@pytest.mark.parametrize("clustered", [False, True])
def test_exact_search_equals_brute_force(store, clustered):
    rng = np.random.default_rng(1)
    if clustered:
        arr = clustered_pages(60, 9, DIM, n_topics=8, seed=3)
        pages = [PageRecord(f"c{i:03d}", "d", i + 1, arr[i]) for i in range(60)]
        queries = queries_for(arr, 5, tokens=6, seed=1)
    else:
        pages = make_pages(60, seed=2)
        queries = [unit(rng, int(rng.integers(1, 8))) for _ in range(5)]
    store.add(pages)
    for q in queries:
        expected = brute_force(q, pages, 10, store)
        got = store.search(q, k=10, mode="exact")
        assert [r.page_id for r in got] == [e[0] for e in expected]
        np.testing.assert_allclose([r.score for r in got], [e[1] for e in expected], rtol=1e-5)
    batched = store.search_many(queries, k=10, mode="exact")
    assert [[r.page_id for r in res] for res in batched] == [
        [r.page_id for r in store.search(q, k=10)] for q in queries
    ]


def test_kernel_chunking_and_ties():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 30, size=40)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    tokens = unit(rng, int(bounds[-1]))
    queries = [unit(rng, 3), unit(rng, 5)]
    full = maxsim_scores(queries, tokens, bounds, chunk_tokens=10**9, threads=1)
    chunked = maxsim_scores(queries, tokens, bounds, chunk_tokens=37, threads=3)
    np.testing.assert_allclose(full, chunked, rtol=1e-6)
    for qi, q in enumerate(queries):
        ref = [maxsim(q, tokens[bounds[p] : bounds[p + 1]]) for p in range(40)]
        np.testing.assert_allclose(full[qi], ref, rtol=1e-5)
    assert [b - a for a, b in page_chunks(bounds, 37)] and page_chunks(bounds, 1)[0] == (0, 1)
    rows, nb = gather_pages(bounds, np.array([3, 1]))
    np.testing.assert_array_equal(rows, np.r_[bounds[3] : bounds[4], bounds[1] : bounds[2]])
    assert nb[-1] == len(rows)
    assert top_k(np.array([1.0, 3.0, 3.0, 2.0, 3.0]), 2).tolist() == [1, 2]


def test_ties_sorted_by_page_id(store):
    v = np.zeros((2, DIM), dtype=np.float32)
    v[0, 0], v[1, 1] = 0.5, 0.25
    store.add([PageRecord(pid, "d", 1, v) for pid in ["b", "c", "a", "d"]])
    got = store.search(np.eye(2, DIM, dtype=np.float32), k=3)
    assert [r.page_id for r in got] == ["a", "b", "c"]
    assert {r.score for r in got} == {0.75}


def test_two_stage_recall_on_clustered_data(tmp_path):
    dim = 32
    arr = clustered_pages(800, 12, dim, n_topics=64, seed=7)
    queries = queries_for(arr, 40, tokens=16, seed=7)
    with LocalStore.create(tmp_path / "s", {"dim": dim, "model_id": "m"}) as s:
        s.add([PageRecord(f"p{i:04d}", f"d{i // 10}", i % 10 + 1, arr[i]) for i in range(800)])
        hits = total = 0
        for q in queries:
            exact = {r.page_id for r in s.search(q, k=10, mode="exact")}
            two = s.search(q, k=10, mode="two_stage")
            hits += len(exact & {r.page_id for r in two})
            total += len(exact)
        assert hits / total >= 0.99
        # the token index follows deletes and upserts incrementally
        s.delete(doc_id="d0")
        s.upsert([PageRecord("p0100", "d10", 1, arr[5])])
        for q in queries[:10]:
            assert not any(r.doc_id == "d0" for r in s.search(q, k=10, mode="two_stage"))
        best = s.search(queries_for(arr[5:6], 1, tokens=8, seed=1)[0], k=2, mode="two_stage")
        assert "p0100" in {r.page_id for r in best}


def test_two_stage_ivf_path(tmp_path):
    """The IVF token index (used from ivf_min_tokens on) finds the exact top pages."""
    dim = 32
    arr = clustered_pages(600, 16, dim, n_topics=32, seed=3)
    queries = queries_for(arr, 10, tokens=8, seed=3)
    with LocalStore.create(
        tmp_path / "s",
        {"dim": dim, "model_id": "m"},
        ivf_min_tokens=5000,
        exact_max_tokens=1000,
        nprobe=64,
        candidates_per_token=64,
    ) as s:
        s.add([PageRecord(f"p{i:04d}", "d", 1, arr[i]) for i in range(600)])
        hits = 0
        for q in queries:
            exact = [r.page_id for r in s.search(q, k=10, mode="exact")]
            auto = [r.page_id for r in s.search(q, k=10)]  # auto -> two-stage above 1000 tokens
            hits += len(set(exact) & set(auto))
        ann = s._searcher.token_index
        assert ann is not None and ann.kind == "ivf"
        assert hits / 100 >= 0.95


FILTERS = [
    ({"lang": "en"}, lambda m: m["lang"] == "en"),
    ({"year": {"$gte": 2000, "$lt": 2010}}, lambda m: 2000 <= m["year"] < 2010),
    ({"kind": {"$in": ["k1", "k3"]}}, lambda m: m["kind"] in ("k1", "k3")),
    (
        {"kind": {"$nin": ["k1", "k3"]}, "lang": {"$ne": "de"}},
        lambda m: m["kind"] not in ("k1", "k3") and m["lang"] != "de",
    ),
    (
        {"$or": [{"lang": "fr"}, {"year": {"$lte": 1997}}]},
        lambda m: m["lang"] == "fr" or m["year"] <= 1997,
    ),
    (
        {"$and": [{"doc_id": "doc2"}, {"page_no": {"$gt": 2}}]},
        lambda m: m["doc_id"] == "doc2" and m["page_no"] > 2,
    ),
    ({"missing": {"$exists": False}, "year": {"$gt": "2000"}}, lambda m: False),
]


@pytest.mark.parametrize("spec,pred", FILTERS)
def test_filters_applied_before_scoring(store, backend, spec, pred):
    pages = make_pages(40, seed=4)
    store.add(pages)
    q = unit(np.random.default_rng(2), 3)
    if backend == "qdrant" and spec.get("year") == {"$gt": "2000"}:
        with pytest.raises(FilterError, match="numbers only"):  # Qdrant has no string ranges
            store.search(q, k=8, filter=spec)
        return
    allowed = [p for p in pages if pred({**p.metadata, "doc_id": p.doc_id, "page_no": p.page_no})]
    for mode in ("exact", "two_stage"):
        got = store.search(q, k=8, filter=spec, mode=mode)
        assert [r.page_id for r in got] == [e[0] for e in brute_force(q, allowed, 8, store)]


def test_bad_filters_and_queries(store):
    store.add(make_pages(3))
    q = unit(np.random.default_rng(0), 2)
    with pytest.raises(FilterError, match=r"\$regex"):
        store.search(q, filter={"lang": {"$regex": "e"}})
    with pytest.raises(FilterError, match=r"\$nor"):
        store.search(q, filter={"$nor": [{"lang": "en"}]})
    with pytest.raises(StoreInputError, match=r"shape \[M>=1, 16\]"):
        store.search(np.ones((2, 8), dtype=np.float32))
    with pytest.raises(StoreInputError, match="NaN"):
        store.search(np.full((2, DIM), np.nan, dtype=np.float32))
    with pytest.raises(StoreInputError, match="k must"):
        store.search(q, k=0)
    with pytest.raises(StoreInputError, match="mode"):
        store.search(q, mode="fast")


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda p: setattr(p, "page_no", 0), "1-based"),
        (lambda p: setattr(p, "page_id", ""), "page_id"),
        (lambda p: setattr(p, "vectors", np.ones((0, DIM), np.float32)), "1..65535 rows"),
        (lambda p: setattr(p, "vectors", np.ones((2, DIM), np.int64)), "float array"),
        (lambda p: setattr(p, "vectors", np.full((2, DIM), 1e6, np.float32)), "fp16 range"),
        (lambda p: setattr(p, "metadata", {"x": float("nan")}), "JSON"),
        (lambda p: setattr(p, "metadata", {1: "a"}), "keys must be str"),
    ],
)
def test_page_validation(store, mutate, match):
    page = make_pages(1)[0]
    mutate(page)
    with pytest.raises(StoreInputError, match=match):
        store.add([page])
    with pytest.raises(StoreInputError, match="sequence"):
        store.add(make_pages(1)[0])
    assert store.count() == 0


def test_open_errors_lock_and_mismatch(tmp_path):
    path = tmp_path / "s"
    with pytest.raises(StoreNotFoundError):
        LocalStore.open(path)
    with pytest.raises(StoreInputError, match="model_id"):
        LocalStore.create(path, {"dim": 4})
    writer = LocalStore.create(path, CONFIG)
    with pytest.raises(StoreExistsError):
        LocalStore.create(path, CONFIG)
    with pytest.raises(StoreLockedError, match="readonly=True"):
        LocalStore.open(path)
    reader = LocalStore.open(path, readonly=True)  # readers take no lock
    with pytest.raises(StoreReadOnlyError):
        reader.add(make_pages(1))
    reader.close()
    writer.close()
    with pytest.raises(StoreConfigMismatch) as info:
        LocalStore.open(path, expect={"model_id": "other/model", "dim": 128})
    assert set(info.value.differences) == {"model_id", "dim"}
    assert "model_id" in str(info.value) and "dim" in str(info.value)
    LocalStore.open(path, expect={"model_id": "tiny/col", "dim": DIM}).close()  # lock released
    with LocalStore.open(path) as s, pytest.raises(StoreError, match="cannot change dim"):
        s.add(make_pages(1))
        s.update_config(dim=32)


def test_stores_without_fp16_need_the_embedded_backend(tmp_path):
    with pytest.raises(StoreInputError, match="needs the embedded store"):
        create_store(store_target(tmp_path, "qdrant"), config_for("embedded-codes"))
    with pytest.raises(StoreInputError, match="set codes to 4bit, 2bit or 1bit"):
        create_store(tmp_path / "s", {**CONFIG, "fp16": False})
    with create_store(tmp_path / "c", config_for("embedded-codes")) as store:
        with pytest.raises(StoreError, match="changes only through optimize"):
            store.update_config(fp16=True)
