"""Text and hybrid search on the Qdrant backend (local mode): sparse BM25 vectors with Qdrant's
IDF modifier, fused with MaxSim under the same results contract as the embedded store."""

from __future__ import annotations

import numpy as np
import pytest

from tests.store.test_store_hybrid import CONFIG, HOSTILE, TEXTS, pages, vec
from vrag_compress.store import LocalStore, PageRecord, StoreInputError
from vrag_compress.store.fusion import RRF_K

# qdrant-client (with the Qdrant store, which imports it) is imported by the tests that use it:
# collecting this module runs in every pytest-xdist worker, and few of them run these tests.


@pytest.fixture
def pair(tmp_path):
    """The same pages (with text) in an embedded store and a Qdrant local-mode store."""
    from vrag_compress.store.qdrant.store import QdrantStore

    local = LocalStore.create(tmp_path / "local", CONFIG)
    remote = QdrantStore.create(f"qdrant+local://{tmp_path / 'q'}", CONFIG, candidate="none")
    for store in (local, remote):
        store.add(pages())
    yield local, remote
    local.close()
    remote.close()


def ids(hits) -> list[str]:
    return [h.page_id for h in hits]


def test_text_mode_is_bm25_over_folded_words(pair):
    _, remote = pair
    assert ids(remote.search(None, 5, mode="text", text="CAFE Creme brulee")) == ["p2"]
    hits = remote.search(None, 5, mode="text", text="flat plate flow")
    assert set(ids(hits)) == {"p0", "p1", "p4"} and hits[0].page_id == "p4"
    assert hits[0].components == {"text": {"rank": 1, "score": hits[0].score}}
    assert remote.search(None, 5, mode="text", text="zeppelin") == []


def test_hybrid_has_the_embedded_store_contract(pair):
    local, remote = pair
    for alpha in (None, 0.5):
        a = local.search(vec(4), 6, mode="hybrid", text="supersonic flow", alpha=alpha)
        b = remote.search(vec(4), 6, mode="hybrid", text="supersonic flow", alpha=alpha)
        assert ids(a)[0] == ids(b)[0] == "p4"
        for x, y in zip(a, b, strict=True):
            assert x.found_by == y.found_by or x.page_id != y.page_id
        vis_a = {h.page_id: h.components["visual"] for h in a if "visual" in h.components}
        vis_b = {h.page_id: h.components["visual"] for h in b if "visual" in h.components}
        assert vis_a.keys() == vis_b.keys()
        for pid in vis_a:  # the visual side is the same exact MaxSim on both backends
            assert vis_a[pid]["rank"] == vis_b[pid]["rank"]
            assert vis_a[pid]["score"] == pytest.approx(vis_b[pid]["score"], rel=1e-4)
    for h in remote.search(vec(4), 6, mode="hybrid", text="supersonic flow"):
        assert h.score == pytest.approx(sum(1 / (RRF_K + c["rank"]) for c in h.components.values()))


def test_hybrid_ranking_equals_qdrant_own_rrf_fusion(pair):
    """Cross-check with Qdrant's fusion query API over the same two prefetches (Qdrant counts
    positions from 0, so its k=61 is our 60)."""
    from qdrant_client import models

    from vrag_compress.store.qdrant.store import PAGES, TEXT

    _, remote = pair
    from vrag_compress.store.lexical import sparse_query

    indices, values = sparse_query("flat plate supersonic")
    response = remote.client.query_points(
        remote.collection,
        prefetch=[
            models.Prefetch(query=vec(0).tolist(), using=PAGES, limit=50),
            models.Prefetch(
                query=models.SparseVector(indices=indices, values=values), using=TEXT, limit=50
            ),
        ],
        query=models.RrfQuery(rrf=models.Rrf(k=RRF_K + 1)),
        limit=6,
        with_payload=True,
    )
    theirs = [(p.payload["page_id"], p.score) for p in response.points]
    ours = remote.search(vec(0), 6, mode="hybrid", text="flat plate supersonic")
    assert [h.score for h in ours] == pytest.approx([s for _, s in theirs])
    assert sorted(ids(ours)) == sorted(pid for pid, _ in theirs)


def test_filters_apply_to_both_sides(pair):
    _, remote = pair
    hits = remote.search(vec(1), 6, mode="hybrid", text="flat plate", filter={"team": "a"})
    assert set(ids(hits)) == {"p0", "p2", "p4"}
    text = remote.search(None, 6, mode="text", text="flat plate flow", filter={"team": "b"})
    assert ids(text) == ["p1"]


def test_upsert_and_delete_update_the_sparse_vectors(pair):
    _, remote = pair
    remote.upsert([PageRecord("p0", "doc0", 1, vec(0), text="wind tunnel")])
    remote.delete(page_ids=["p4"])
    assert ids(remote.search(None, 5, mode="text", text="flat plate")) == []
    assert ids(remote.search(None, 5, mode="text", text="tunnel")) == ["p0"]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_queries(pair, query):
    _, remote = pair
    assert isinstance(remote.search(None, 5, mode="text", text=query), list)
    assert len(remote.search(vec(0), 5, mode="hybrid", text=query)) == 5


def test_raw_fts_syntax_is_refused_clearly(pair):
    _, remote = pair
    with pytest.raises(StoreInputError, match="embedded store only"):
        remote.search(None, 5, mode="text", text="flat*", fts_syntax=True)


def test_a_collection_made_before_text_search_says_how_to_get_it(tmp_path):
    from vrag_compress.store.qdrant.store import QdrantStore

    url = f"qdrant+local://{tmp_path / 'q'}"
    with QdrantStore.create(url, CONFIG) as store:
        store.add(pages({"a": "flat plate"}))
        store._meta.pop("text_index")
        store._put_meta()
    with QdrantStore.open(url) as store:
        assert store.search(vec(0), 1)[0].page_id == "a"
        with pytest.raises(Exception, match="vrag migrate"):
            store.search(None, 1, mode="text", text="flat")


def test_text_is_not_required_on_every_page(pair):
    _, remote = pair
    assert TEXTS["p3"] is None
    assert "p3" not in ids(remote.search(None, 6, mode="text", text="flat plate flow heat"))
    assert np.isfinite([h.score for h in remote.search(vec(3), 6, mode="hybrid", text="x")]).all()


def test_hybrid_with_a_prefetched_visual_side(tmp_path):
    """`auto` past exact_max_pages: the visual side is itself a candidate prefetch + MaxSim
    rerank, nested inside the fusion query."""
    from vrag_compress.store.qdrant.store import QdrantStore

    url = f"qdrant+local://{tmp_path / 'q'}"
    with QdrantStore.create(url, CONFIG, candidate="mean", exact_max_pages=0) as store:
        store.add(pages())
        hits = store.search(vec(4), 4, mode="hybrid", text="supersonic flow")
        exact = {h.page_id: h.score for h in store.search(vec(4), 6, mode="exact")}
    assert hits[0].page_id == "p4" and hits[0].found_by == ["visual", "text"]
    for h in hits:
        assert h.score == pytest.approx(sum(1 / (RRF_K + c["rank"]) for c in h.components.values()))
        if "visual" in h.components:
            assert h.components["visual"]["score"] == pytest.approx(exact[h.page_id], rel=1e-4)
