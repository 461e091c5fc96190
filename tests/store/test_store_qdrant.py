"""QdrantStore in Qdrant's local mode: exact scores vs the embedded store, prefetch variants,
filters, deletes, errors, retries, migration round trip and VisualIndex over a store URL.

(The shared behavioural suite in test_store.py also runs on this backend.) Tests that need a real
server run only when VRAG_QDRANT_URL (e.g. qdrant://localhost:6333/vrag_test) is set.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from vrag_compress.store import (
    DocumentRecord,
    FilterError,
    LocalStore,
    PageRecord,
    StoreConfigMismatch,
    StoreExistsError,
    StoreInputError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from vrag_compress.store.migrate import compare_stores, copy_store
from vrag_compress.store.open import open_store, read_store_pointer
from vrag_compress.store.qdrant.access import (
    QdrantUnavailableError,
    parse_qdrant_url,
    with_retries,
)
from vrag_compress_bench.synthetic import clustered_pages, queries_for

# qdrant-client (with the Qdrant store, which imports it) is imported by the tests that use it:
# collecting this module runs in every pytest-xdist worker, and few of them run these tests.

DIM = 16
CONFIG = {"dim": DIM, "model_id": "tiny/col"}


def synthetic_pages(n: int = 120, tokens: int = 8, seed: int = 3) -> tuple[list, list]:
    arr = clustered_pages(n, tokens, DIM, n_topics=12, seed=seed)
    pages = [
        PageRecord(
            f"p{i:04d}",
            f"d{i // 10}",
            i % 10 + 1,
            arr[i].astype(np.float32),
            {"n": i % 7, "lang": ["en", "de"][i % 2]},
        )
        for i in range(n)
    ]
    return pages, queries_for(arr, 8, tokens=6, seed=seed)


@pytest.fixture
def pair(tmp_path):
    """The same pages in an embedded store and a Qdrant local-mode store."""
    from vrag_compress.store.qdrant.store import QdrantStore

    pages, queries = synthetic_pages()
    local = LocalStore.create(tmp_path / "local", CONFIG)
    remote = QdrantStore.create(f"qdrant+local://{tmp_path / 'q'}", CONFIG, candidate="mean")
    for store in (local, remote):
        store.add(pages, documents=[DocumentRecord("d0", source="a.pdf", complete=True)])
    yield local, remote, queries
    local.close()
    remote.close()


def test_parse_urls():
    server = parse_qdrant_url("qdrant://db.example:6400/my_docs")
    assert (server.host, server.port, server.collection, server.https) == (
        "db.example",
        6400,
        "my_docs",
        False,
    )
    assert parse_qdrant_url("qdrants://h:443/c").https
    assert parse_qdrant_url("qdrant://h:6333/c?grpc=true").prefer_grpc
    local = parse_qdrant_url("qdrant+local:///tmp/q?collection=pages")
    assert (local.path, local.collection, local.host) == ("/tmp/q", "pages", None)
    assert parse_qdrant_url("qdrant+memory://x").path == ":memory:"
    for bad in (
        "http://h:6333/c",
        "qdrant://h:port/c",
        "qdrant://h:6333/bad/name",
        "qdrant+local://",
    ):
        with pytest.raises(StoreInputError):
            parse_qdrant_url(bad)


def test_exact_scores_equal_embedded_store(pair):
    local, remote, queries = pair
    for q in queries:
        want = local.search(q, k=10, mode="exact")
        got = remote.search(q, k=10, mode="exact")
        assert [h.page_id for h in got] == [h.page_id for h in want]
        np.testing.assert_allclose([h.score for h in got], [h.score for h in want], rtol=1e-5)
        assert got[0].metadata == local.get([got[0].page_id])[0].metadata
    batched = remote.search_many(queries, k=5, mode="exact")
    assert [[h.page_id for h in r] for r in batched] == [
        [h.page_id for h in local.search(q, k=5, mode="exact")] for q in queries
    ]
    np.testing.assert_array_equal(remote.get(["p0007"])[0].vectors, local.get(["p0007"])[0].vectors)


@pytest.mark.parametrize("candidate", ["mean", "binary"])
def test_prefetch_rerank_scores_are_exact_maxsim(tmp_path, candidate):
    """Two-stage hits carry exact MaxSim scores; with a prefetch as large as the collection the
    ranking equals the exact one."""
    from vrag_compress.store.qdrant.store import QdrantStore

    pages, queries = synthetic_pages(60)
    with (
        LocalStore.create(tmp_path / "l", CONFIG) as local,
        QdrantStore.create(
            "qdrant+memory://c", CONFIG, candidate=candidate, candidates=60
        ) as remote,
    ):
        local.add(pages)
        remote.add(pages)
        for q in queries:
            want = local.search(q, k=5, mode="exact")
            got = remote.search(q, k=5, mode="two_stage")
            assert [h.page_id for h in got] == [h.page_id for h in want]
            np.testing.assert_allclose([h.score for h in got], [h.score for h in want], rtol=1e-5)


def test_filters_match_embedded_store(pair):
    local, remote, queries = pair
    specs = [
        {"lang": "de"},
        {"n": {"$in": [1, 3]}, "page_no": {"$lte": 5}},
        {"$or": [{"doc_id": "d3"}, {"n": {"$gte": 6}}]},
        {"lang": {"$nin": ["en"]}},
        {"n": {"$ne": 2}, "missing": {"$exists": False}},
        {"n": 2.0},
    ]
    for spec in specs:
        for mode in ("exact", "two_stage"):
            want = [h.page_id for h in local.search(queries[0], k=7, filter=spec, mode="exact")]
            got = [h.page_id for h in remote.search(queries[0], k=7, filter=spec, mode=mode)]
            assert got == want, (spec, mode)
    with pytest.raises(FilterError, match="numbers only"):
        remote.search(queries[0], filter={"lang": {"$gte": "de"}})
    assert remote.search(queries[0], filter={"a.b": 1}) == []  # dotted keys are literal keys
    with pytest.raises(FilterError, match="double quote"):
        remote.search(queries[0], filter={'a"b': 1})


def test_deletes_and_upserts(pair):
    local, remote, queries = pair
    for store in (local, remote):
        assert store.delete(doc_id="d1") == 10
        assert store.delete(page_ids=["p0000", "p0001", "absent"]) == 2
        store.upsert([PageRecord("p0002", "d9", 3, store.get(["p0050"])[0].vectors)])
    assert remote.count() == local.count() == 108
    assert remote.document("d1") is None and remote.document("d9") is not None
    assert remote.page_ids("d9") == local.page_ids("d9") and "p0002" in remote.page_ids("d9")
    assert remote.documents() == local.documents()
    for q in queries:
        got = remote.search(q, k=10)
        assert not any(h.doc_id == "d1" for h in got)
        assert [h.page_id for h in got] == [h.page_id for h in local.search(q, k=10)]
    assert remote.verify().ok


def test_errors_are_typed(tmp_path):
    from vrag_compress.store.qdrant.store import QdrantStore

    url = f"qdrant+local://{tmp_path / 'q'}"
    with pytest.raises(StoreNotFoundError):
        QdrantStore.open(url)
    store = QdrantStore.create(url, CONFIG)
    with pytest.raises(StoreLockedError, match="one client"):
        QdrantStore.open(url)  # local mode: one client per folder
    with pytest.raises(StoreInputError, match=r"shape \[k, 16\]"):
        store.add([PageRecord("x", "d", 1, np.ones((2, 8), np.float32))])
    store.close()
    with pytest.raises(StoreExistsError):
        QdrantStore.create(url, CONFIG)
    with pytest.raises(StoreConfigMismatch) as info:
        QdrantStore.open(url, expect={"model_id": "other", "dim": 128})
    assert set(info.value.differences) == {"model_id", "dim"}
    with QdrantStore.open(url, readonly=True) as reader, pytest.raises(StoreReadOnlyError):
        reader.add([PageRecord("x", "d", 1, np.ones((2, DIM), np.float32))])
    with pytest.raises(StoreInputError, match="candidate"):
        QdrantStore.create("qdrant+memory://z", CONFIG, candidate="pq")


def test_retries_transient_errors_only():
    from qdrant_client.http.exceptions import ResponseHandlingException

    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ResponseHandlingException(ConnectionError("refused"))
        return "ok"

    assert with_retries(flaky, retries=3, backoff_s=0, what="upsert") == "ok"
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(QdrantUnavailableError, match="after 2 attempts"):
        with_retries(flaky, retries=1, backoff_s=0, what="upsert")

    def broken():
        calls.append(1)
        raise ValueError("bad request")

    calls.clear()
    with pytest.raises(ValueError):
        with_retries(broken, retries=3, backoff_s=0, what="upsert")
    assert len(calls) == 1


def test_migration_round_trip(tmp_path):
    from vrag_compress.store.qdrant.store import QdrantStore

    pages, _ = synthetic_pages(50)
    with LocalStore.create(tmp_path / "src", CONFIG) as src:
        src.add(pages, documents=[DocumentRecord("d0", source="a.pdf", n_pages=10, complete=True)])
        with QdrantStore.create(f"qdrant+local://{tmp_path / 'q'}", CONFIG) as mid:
            assert copy_store(src, mid, batch=16) == 50
            there = compare_stores(src, mid, queries=10)
            assert there.ok and there.queries == 10, there
            with LocalStore.create(tmp_path / "back", CONFIG) as back:
                copy_store(mid, back, batch=7)
                again = compare_stores(src, back, queries=10)
                assert again.ok and again.max_score_diff == 0.0
        mid_broken = LocalStore.create(tmp_path / "partial", CONFIG)
        mid_broken.add(pages[:40])
        assert not compare_stores(src, mid_broken, queries=5).ok
        mid_broken.close()


def test_migrate_cli_and_repoint(tmp_path):
    from vrag_compress.cli import app
    from vrag_compress.cli import migrate as _registers_migrate  # noqa: F401

    pages, queries = synthetic_pages(30)
    with LocalStore.create(tmp_path / "idx", CONFIG) as src:
        src.add(pages)
    url = f"qdrant+local://{tmp_path / 'q'}?collection=idx"
    result = CliRunner().invoke(
        app,
        [
            "migrate",
            str(tmp_path / "idx"),
            url,
            "--candidate",
            "binary",
            "--repoint",
            str(tmp_path / "idx"),
            "--json",
            str(tmp_path / "m.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert '"ok": true' in (tmp_path / "m.json").read_text()
    assert read_store_pointer(tmp_path / "idx") == url
    with open_store(url, readonly=True) as remote:
        assert remote.count() == 30 and remote.candidate == "binary"
    again = CliRunner().invoke(app, ["migrate", url, str(tmp_path / "idx")])
    assert again.exit_code == 1 and "not an empty directory" in " ".join(again.output.split())


class ReadOnce:
    """The real OCR engine, run once per distinct page image: both indexes below read the same
    three pages, and OCR (not the store) was half of this test's CPU."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.name, self.read = engine, engine.name, {}

    def recognize(self, image: Any) -> list:
        key = (image.size, image.mode, image.tobytes())
        if key not in self.read:
            self.read[key] = self.engine.recognize(image)
        return self.read[key]


@pytest.mark.slow
def test_visual_index_over_qdrant_local(tmp_path, shared_data: Path):
    from vrag_compress import VisualIndex, get_compressor
    from vrag_compress.encoders import load_encoder
    from vrag_compress.ingest.ocr import PageOcr, RapidOcrEngine

    images = sorted((shared_data / "vidore_arxivqa_sample" / "images").iterdir())[:3]
    encoder = load_encoder("tiny-colqwen2", device="cpu")
    ocr = PageOcr("auto", engine=ReadOnce(RapidOcrEngine()))
    made = {}
    for name, store in (("embedded", None), ("qdrant", f"qdrant+local://{tmp_path / 'q'}")):
        index = VisualIndex.create(
            tmp_path / name,
            compressor=get_compressor("sap", ratio=0.25, layers=[0, 1]),
            encoder=encoder,
            store=store,
        )
        index.add(images, progress=False, ocr=ocr)
        made[name] = [(h.page_id, round(h.score, 4)) for h in index.search("a chart", k=3)]
        index.close()
    assert made["qdrant"] == made["embedded"]
    assert VisualIndex.exists(tmp_path / "qdrant")
    with VisualIndex.open(tmp_path / "qdrant", encoder=encoder) as reopened:
        hits = reopened.search("a chart", k=2)
        assert [h.page_id for h in hits] == [p for p, _ in made["embedded"][:2]]
        assert hits[0].image.size[0] > 0  # images stay in the index folder
        assert reopened.info()["pages"] == 3


@pytest.mark.skipif(
    not os.environ.get("VRAG_QDRANT_URL"),
    reason="set VRAG_QDRANT_URL=qdrant://host:6333/name to test a real server",
)
def test_real_server_round_trip():
    from vrag_compress.store.qdrant.store import QdrantStore

    base = os.environ["VRAG_QDRANT_URL"].rstrip("/")
    url = f"{base}_{uuid.uuid4().hex[:8]}"
    pages, queries = synthetic_pages(40)
    store = QdrantStore.create(url, CONFIG)
    try:
        store.add(pages)
        with LocalStore.create(
            Path(os.environ.get("TMPDIR", "/tmp")) / uuid.uuid4().hex, CONFIG
        ) as local:
            local.add(pages)
            assert compare_stores(local, store, queries=5).ok
    finally:
        store.client.delete_collection(store.collection)
        store.client.delete_collection(store.sidecar)
        store.close()
