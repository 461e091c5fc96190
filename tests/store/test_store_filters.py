"""Metadata filters on both backends: awkward keys, long lists, numpy scalars, bad filters, and a
property test comparing what each store selects with a plain Python evaluation of the filter."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from vrag_compress.cli import app
from vrag_compress.store import FilterError, LocalStore, PageRecord
from vrag_compress.store.filters import MAX_DEPTH

HAS_QDRANT = importlib.util.find_spec("qdrant_client") is not None
BACKENDS = [
    "embedded",
    pytest.param("qdrant", marks=pytest.mark.skipif(not HAS_QDRANT, reason="no qdrant-client")),
]
DIM = 4
CONFIG = {"dim": DIM, "model_id": "tiny/col"}
QUERY = np.ones((1, DIM), dtype=np.float32)
ODD_KEYS = ["ключ", "a\nb", "tab\there", "back\\slash", "dot.ted", "br[0]", "emoji😀"]


def open_new(root: Path, backend: str):
    if backend == "embedded":
        return LocalStore.create(root / "local", CONFIG)
    from vrag_compress.store.qdrant.store import QdrantStore

    return QdrantStore.create(f"qdrant+local://{root / 'q'}", CONFIG)


def pages_for(metadatas: list[dict[str, Any]]) -> list[PageRecord]:
    rng = np.random.default_rng(0)
    return [
        PageRecord(f"p{i:03d}", f"d{i % 3}", i + 1, rng.normal(size=(2, DIM)).astype(np.float32), m)
        for i, m in enumerate(metadatas)
    ]


def selected(store, spec: Any, n: int) -> list[str]:
    return sorted(h.page_id for h in store.search(QUERY, k=n + 1, filter=spec, mode="exact"))


@pytest.fixture(params=BACKENDS)
def store(tmp_path, request):
    s = open_new(tmp_path, request.param)
    yield s
    s.close()


def test_awkward_keys_match_exactly(store):
    metas = [{key: "значение", "n": i} for i, key in enumerate(ODD_KEYS)] + [{"other": 1}]
    store.add(pages_for(metas))
    for i, key in enumerate(ODD_KEYS):
        assert selected(store, {key: "значение"}, len(metas)) == [f"p{i:03d}"], repr(key)
        assert selected(store, {key: {"$exists": True}}, len(metas)) == [f"p{i:03d}"], repr(key)
    assert len(selected(store, {"ключ": {"$ne": "значение"}}, len(metas))) == len(metas) - 1


def test_double_quote_key_matches_or_is_refused(store):
    store.add(pages_for([{'say "hi"': 1}, {"say": 1}]))
    if isinstance(store, LocalStore):
        assert selected(store, {'say "hi"': 1}, 2) == ["p000"]
    else:  # Qdrant's key syntax has no escape for '"'
        with pytest.raises(FilterError, match="double quote"):
            store.search(QUERY, filter={'say "hi"': 1})


def test_in_and_or_with_thousands_of_items(store):
    store.add(pages_for([{"n": i, "s": f"v{i}"} for i in range(6)]))
    many = list(range(3, 5000))
    assert selected(store, {"n": {"$in": many}}, 6) == ["p003", "p004", "p005"]
    assert selected(store, {"n": {"$nin": many}}, 6) == ["p000", "p001", "p002"]
    assert selected(store, {"s": {"$in": [f"v{i}" for i in range(1, 3000)]}}, 6) == [
        "p001",
        "p002",
        "p003",
        "p004",
        "p005",
    ]
    assert selected(store, {"$or": [{"n": i} for i in range(4, 1500)]}, 6) == ["p004", "p005"]
    assert selected(store, {"$and": [{"n": {"$ne": i}} for i in range(1, 1500)]}, 6) == ["p000"]
    assert selected(store, {"page_no": {"$in": list(range(5, 3000))}}, 6) == ["p004", "p005"]


def test_numpy_scalars_are_plain_values(store):
    store.add(pages_for([{"n": 2, "x": 0.5, "b": True}, {"n": 3, "x": 1.5, "b": False}]))
    assert selected(store, {"n": np.int64(2)}, 2) == ["p000"]
    assert selected(store, {"x": {"$gt": np.float32(1.0)}}, 2) == ["p001"]
    assert selected(store, {"b": np.bool_(False)}, 2) == ["p001"]
    assert selected(store, {"n": {"$in": np.array([3, 4])}}, 2) == ["p001"]
    assert selected(store, {"page_no": np.int32(2), "n": {"$exists": np.bool_(True)}}, 2) == [
        "p001"
    ]


def nested(depth: int) -> dict:
    spec: dict = {"n": 1}
    for _ in range(depth):
        spec = {"$and": [spec]}
    return spec


@pytest.mark.parametrize(
    "spec,match",
    [
        ({1: "a"}, "field names must be strings"),
        ({"n": {1: 2}}, "unknown filter operator"),
        ({"n": 2**63}, "64 bits"),
        ({"n": {"$in": [1, -(2**63) - 1]}}, "64 bits"),
        ({"n": float("nan")}, "finite"),
        ({"n": [1, 2]}, "values must be str"),
        ({"n": {"$gt": None}}, "range operands"),
        ({"n": "a\x00b"}, "NUL"),
        ({"": 1}, "non-empty"),
        ({"$or": []}, "non-empty list"),
        ({"$or": [1]}, "must be a dict"),
        (nested(1200), f"more than {MAX_DEPTH} levels"),
    ],
)
def test_bad_filters_get_one_clear_error(store, spec, match):
    store.add(pages_for([{"n": 1}]))
    with pytest.raises(FilterError, match=match):
        store.search(QUERY, filter=spec)


def test_filters_just_inside_the_depth_limit_work(store):
    store.add(pages_for([{"n": 1}, {"n": 2}]))
    assert selected(store, nested(MAX_DEPTH), 2) == ["p000"]


@pytest.mark.parametrize(
    "arg",
    [
        '{"n": {"$regex": "a"}}',
        '{"n": 18446744073709551616}',
        '{"$and": [' * 1200 + "{}" + "]}" * 1200,
        '{"$and": [' * 100 + "{}" + "]}" * 100,
        "n=[1,2]",
    ],
)
def test_cli_bad_filter_is_a_usage_error(tmp_path, arg):
    result = CliRunner().invoke(app, ["search", str(tmp_path), "q", "--filter", arg])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "--filter" in result.output
    assert not isinstance(result.exception, (RecursionError, AttributeError, OverflowError))


# ----------------------------------------------------------------------------- property test

MISSING = object()
BUILTINS = ("doc_id", "page_no", "page_id")


def kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "text" if isinstance(value, str) else "other"


def ref_equal(stored: Any, operand: Any) -> bool:
    if operand is None:
        return stored is MISSING or stored is None
    return kind(stored) == kind(operand) and stored == operand


def ref_op(op: str, arg: Any, stored: Any) -> bool:
    if op == "$eq":
        return ref_equal(stored, arg)
    if op == "$ne":
        return not ref_equal(stored, arg)
    if op == "$in":
        return any(ref_equal(stored, a) for a in arg)
    if op == "$nin":
        return not any(ref_equal(stored, a) for a in arg)
    if op == "$exists":
        return (stored is not MISSING) == arg
    if kind(stored) != kind(arg) or kind(arg) not in ("number", "text"):
        return False
    return {"$gt": stored > arg, "$gte": stored >= arg, "$lt": stored < arg, "$lte": stored <= arg}[
        op
    ]


def reference(spec: dict, page: PageRecord) -> bool:
    """What a filter means, evaluated in plain Python over one page."""
    for key, value in spec.items():
        if key == "$and" and not all(reference(s, page) for s in value):
            return False
        if key == "$or" and not any(reference(s, page) for s in value):
            return False
        if key in ("$and", "$or"):
            continue
        stored = getattr(page, key) if key in BUILTINS else page.metadata.get(key, MISSING)
        ops = value if isinstance(value, dict) else {"$eq": value}
        if not all(ref_op(op, arg, stored) for op, arg in ops.items()):
            return False
    return True


def qdrant_refuses(spec: dict) -> bool:
    """Filters the Qdrant backend rejects by design: '"' in a key, ranges on strings."""
    for key, value in spec.items():
        if key in ("$and", "$or"):
            if any(qdrant_refuses(s) for s in value):
                return True
            continue
        if '"' in key:
            return True
        ops = value if isinstance(value, dict) else {}
        if any(
            op in ("$gt", "$gte", "$lt", "$lte") and isinstance(a, str) for op, a in ops.items()
        ):
            return True
    return False


text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=4)
keys = st.sampled_from([*ODD_KEYS, 'q"uote', "k"]) | text.filter(lambda k: k and k[0] != "$")
values = st.sampled_from([None, True, False, 0, 1, 1.0, -2.5, "", "a", "б", "1"]) | st.one_of(
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
fields = keys | st.sampled_from(["doc_id", "page_no"])


@st.composite
def conditions(draw) -> dict:
    key = draw(fields)
    op = draw(
        st.sampled_from(
            ["short", "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"]
        )
    )
    if op == "short":
        return {key: draw(values)}
    if op in ("$in", "$nin"):
        arg: Any = draw(st.lists(values, max_size=4))
    elif op == "$exists":
        arg = draw(st.booleans())
    elif op in ("$eq", "$ne"):
        arg = draw(values)
    else:
        arg = draw(values.filter(lambda v: v is not None and not isinstance(v, bool)))
    return {key: {op: arg}}


filter_specs = st.recursive(
    conditions(),
    lambda inner: (
        st.builds(
            lambda op, parts: {op: parts},
            st.sampled_from(["$and", "$or"]),
            st.lists(inner, min_size=1, max_size=3),
        )
        | st.lists(inner, min_size=2, max_size=3).map(
            lambda ds: {k: v for d in ds for k, v in d.items()}
        )
    ),
    max_leaves=6,
)
metadata = st.dictionaries(keys | st.sampled_from(["$x", "doc_id"]), values, max_size=4)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    metas=st.lists(metadata, min_size=1, max_size=10),
    specs=st.lists(filter_specs, min_size=1, max_size=8),
)
def test_filters_select_what_python_evaluation_selects(backend, metas, specs):
    pages = pages_for(metas)
    with tempfile.TemporaryDirectory() as tmp, open_new(Path(tmp), backend) as store:
        store.add(pages)
        for spec in specs:
            if backend == "qdrant" and qdrant_refuses(spec):
                with pytest.raises(FilterError):
                    store.search(QUERY, filter=spec)
                continue
            want = sorted(p.page_id for p in pages if reference(spec, p))
            assert selected(store, spec, len(pages)) == want, spec
