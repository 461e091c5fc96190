"""Stateful property test: random add/upsert/delete/compact/reopen/search vs an in-memory model,
for a store with fp16 vectors and one keeping only 4-bit residual codes (whose model is the
decoded vectors `get` returned right after the write)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from vrag_compress.scoring import maxsim
from vrag_compress.store import DuplicatePageError, LocalStore, PageRecord

pytestmark = pytest.mark.slow  # a long random walk through the store's operations

DIM = 8
IDS = [f"p{i:02d}" for i in range(24)]
DOCS = ["a", "b", "c"]


def vectors(seed: int, n: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


page_spec = st.tuples(
    st.sampled_from(IDS),
    st.sampled_from(DOCS),
    st.integers(1, 5),
    st.integers(0, 10**6),
    st.integers(1, 6),
)


class StoreMachine(RuleBasedStateMachine):
    CONFIG: dict = {"dim": DIM, "model_id": "m"}
    OPTIONS: dict = {"segment_max_bytes": 600}

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.store = LocalStore.create(self.dir / "s", self.CONFIG, **self.OPTIONS)
        self.model: dict[str, PageRecord] = {}
        self.kept: dict[str, np.ndarray] = {}  # the vectors the store keeps, per page

    def remember(self, pages: list[PageRecord]) -> None:
        self.model.update({p.page_id: p for p in pages})
        if self.CONFIG.get("fp16", True):
            self.kept.update({p.page_id: p.vectors.astype(np.float16) for p in pages})
        else:  # decoded codes: fixed once written, as long as nothing retrains the codes
            got = self.store.get([p.page_id for p in pages])
            self.kept.update({g.page_id: g.vectors for g in got})

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def records(specs: list[tuple]) -> list[PageRecord]:
        unique = {s[0]: s for s in specs}
        return [
            PageRecord(pid, doc, no, vectors(seed, n), {"doc": doc, "seed": seed % 7})
            for pid, doc, no, seed, n in unique.values()
        ]

    @rule(specs=st.lists(page_spec, min_size=1, max_size=5))
    def add(self, specs: list[tuple]) -> None:
        pages = self.records(specs)
        if any(p.page_id in self.model for p in pages):
            try:
                self.store.add(pages)
            except DuplicatePageError:
                return
            raise AssertionError("add accepted an existing page id")
        self.store.add(pages)
        self.remember(pages)

    @rule(specs=st.lists(page_spec, min_size=1, max_size=5))
    def upsert(self, specs: list[tuple]) -> None:
        pages = self.records(specs)
        self.store.upsert(pages)
        self.remember(pages)

    @rule(ids=st.lists(st.sampled_from(IDS), max_size=4, unique=True))
    def delete_pages(self, ids: list[str]) -> None:
        removed = self.store.delete(page_ids=ids)
        assert removed == sum(i in self.model for i in ids)
        for i in ids:
            self.model.pop(i, None)

    @rule(doc=st.sampled_from(DOCS))
    def delete_doc(self, doc: str) -> None:
        gone = [k for k, p in self.model.items() if p.doc_id == doc]
        assert self.store.delete(doc_id=doc) == len(gone)
        for k in gone:
            del self.model[k]

    @rule()
    def compact(self) -> None:
        self.store.compact()

    @rule(readonly=st.booleans())
    def reopen(self, readonly: bool) -> None:
        self.store.close()
        if readonly:
            with LocalStore.open(self.dir / "s", readonly=True, **self.OPTIONS) as reader:
                assert reader.page_ids() == sorted(self.model)
        self.store = LocalStore.open(self.dir / "s", **self.OPTIONS)

    @precondition(lambda self: bool(self.model))
    @rule(
        seed=st.integers(0, 10**6),
        k=st.integers(1, 8),
        doc=st.sampled_from([None, *DOCS]),
        mode=st.sampled_from(["exact", "two_stage", "auto"]),
    )
    def search(self, seed: int, k: int, doc: str | None, mode: str) -> None:
        q = vectors(seed, 3)
        pool = [p for p in self.model.values() if doc is None or p.metadata["doc"] == doc]
        ref = sorted((-maxsim(q, self.vectors(p.page_id)), p.page_id) for p in pool)[:k]
        got = self.store.search(q, k=k, filter={"doc": doc} if doc else None, mode=mode)
        if mode == "two_stage":  # candidates are approximate; every hit must still be exact
            assert {r.page_id for r in got} <= {p.page_id for p in pool}
            for r in got:
                assert np.isclose(r.score, maxsim(q, self.vectors(r.page_id)), rtol=1e-4)
            return
        assert [r.page_id for r in got] == [pid for _, pid in ref]
        np.testing.assert_allclose([r.score for r in got], [-s for s, _ in ref], rtol=1e-5)

    @invariant()
    def agrees_with_model(self) -> None:
        assert self.store.count() == len(self.model)
        assert self.store.page_ids() == sorted(self.model)
        if self.model:
            some = sorted(self.model)[:3]
            for got in self.store.get(some):
                want = self.model[got.page_id]
                assert (got.doc_id, got.page_no, got.metadata) == (
                    want.doc_id,
                    want.page_no,
                    want.metadata,
                )
                np.testing.assert_array_equal(got.vectors, self.kept[got.page_id])

    def vectors(self, page_id: str) -> np.ndarray:
        return np.asarray(self.kept[page_id], dtype=np.float32)

    @invariant()
    def verifies(self) -> None:
        report = self.store.verify()
        assert report.ok, report.problems


StoreMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreMachine = StoreMachine.TestCase


class CodesStoreMachine(StoreMachine):
    CONFIG = {"dim": DIM, "model_id": "m", "codes": "4bit", "fp16": False}
    # a retrain re-encodes decoded vectors (they move a little): only `optimize` may, here
    OPTIONS = {"segment_max_bytes": 600, "centroid_min_tokens": -1}


CodesStoreMachine.TestCase.settings = StoreMachine.TestCase.settings
TestCodesStoreMachine = CodesStoreMachine.TestCase
