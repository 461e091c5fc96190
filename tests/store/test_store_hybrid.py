"""The text index (SQLite FTS5) of the embedded store and the text / hybrid search modes: fusion
math, filters on both sides, hostile query strings, crash safety, and old catalogs gaining it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.store import LocalStore, PageRecord, StoreError
from vrag_compress.store.fusion import RRF_K, fuse
from vrag_compress.store.lexical import match_expression
from vrag_compress.store.local import catalog as cat
from vrag_compress.store.validate import StoreInputError

DIM = 8
CONFIG = {"dim": DIM, "model_id": "test/hybrid"}
TEXTS = {
    "p0": "Boundary layer transition on a flat plate at Mach 3",
    "p1": "Heat transfer in hypersonic flow past a blunt body",
    "p2": "The café menu: crème brûlée, naïve pricing, ÉCLAIRS",
    "p3": None,
    "p4": "Pressure distribution on a flat plate in supersonic flow",
    "p5": "Buckling of thin cylindrical shells under axial compression",
}


def vec(i: int) -> np.ndarray:
    v = np.random.default_rng(i).normal(size=(4, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def pages(texts: dict[str, str | None] = TEXTS) -> list[PageRecord]:
    return [
        PageRecord(pid, f"doc{i % 2}", i + 1, vec(i), {"team": "ab"[i % 2], "n": i}, text=t)
        for i, (pid, t) in enumerate(texts.items())
    ]


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "s.vrag"
    with LocalStore.create(path, CONFIG) as store:
        store.add(pages())
    return path


def text_ids(store: LocalStore, text: str, k: int = 10, **kw) -> list[str]:
    return [r.page_id for r in store.search(None, k, mode="text", text=text, **kw)]


# --- fusion math ---------------------------------------------------------------------------


SIDES = {"visual": [("a", 10.0), ("b", 5.0), ("c", 1.0)], "text": [("b", 3.0), ("d", 1.0)]}


def test_rrf_sums_one_over_60_plus_rank_on_each_side():
    fused = fuse(SIDES, 4)
    assert [f.key for f in fused] == ["b", "a", "d", "c"]
    scores = {f.key: f.score for f in fused}
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)  # 2nd visual, 1st text
    assert scores["a"] == pytest.approx(1 / 61)
    assert scores["d"] == pytest.approx(1 / 62)
    assert scores["c"] == pytest.approx(1 / 63)
    assert RRF_K == 60
    b = fused[0]
    assert b.components == {"visual": {"rank": 2, "score": 5.0}, "text": {"rank": 1, "score": 3.0}}


def test_alpha_interpolates_min_max_normalised_scores():
    # visual normalised: a 1, b (5-1)/(10-1) = 4/9, c 0; text normalised: b 1, d 0
    fused = fuse(SIDES, 4, alpha=0.5)
    scores = {f.key: f.score for f in fused}
    assert scores == pytest.approx({"a": 0.5, "b": 0.5 * 4 / 9 + 0.5, "c": 0.0, "d": 0.0})
    assert [f.key for f in fused] == ["b", "a", "c", "d"]  # ties by key
    assert [f.key for f in fuse(SIDES, 2, alpha=1.0)] == ["a", "b"]  # the visual ranking
    assert [f.key for f in fuse(SIDES, 2, alpha=0.0)] == ["b", "d"]  # the text ranking


@pytest.mark.parametrize("alpha", [-0.1, 1.5, "0.5", True])
def test_alpha_outside_0_1_is_refused(alpha):
    with pytest.raises(StoreInputError, match="alpha"):
        fuse(SIDES, 3, alpha=alpha)


# --- text mode -------------------------------------------------------------------------------


def test_text_search_is_bm25_case_and_diacritics_insensitive(store_path):
    with LocalStore.open(store_path, readonly=True) as store:
        assert text_ids(store, "CAFE creme brulee naive eclairs") == ["p2"]
        assert text_ids(store, "Café") == ["p2"]
        hits = store.search(None, 5, mode="text", text="flat plate flow")
        assert {h.page_id for h in hits} == {"p0", "p1", "p4"}
        assert hits[0].page_id == "p4"  # all three words
        assert all(
            h.components == {"text": {"rank": i + 1, "score": h.score}} for i, h in enumerate(hits)
        )
        assert hits[0].score > hits[1].score > 0
        assert hits[0].found_by == ["text"]
        assert text_ids(store, "nothing like this") == []


def test_filters_apply_to_the_text_side(store_path):
    with LocalStore.open(store_path, readonly=True) as store:
        assert text_ids(store, "flat plate flow", filter={"team": "a"}) == ["p4", "p0"]
        assert text_ids(store, "flat plate", filter={"page_no": {"$gte": 5}}) == ["p4"]


def test_hybrid_filters_both_sides_before_fusion(store_path):
    with LocalStore.open(store_path, readonly=True) as store:
        q = vec(1)  # visually p1 is the exact best page
        unfiltered = store.search(q, 6, mode="hybrid", text="flat plate")
        assert unfiltered[0].page_id in {"p1", "p0", "p4"}
        top = {h.page_id: h for h in unfiltered}
        assert top["p1"].components["visual"]["rank"] == 1 and "text" not in top["p1"].components
        assert top["p4"].found_by == ["visual", "text"]
        filtered = store.search(q, 6, mode="hybrid", text="flat plate", filter={"team": "a"})
        assert {h.page_id for h in filtered} == {"p0", "p2", "p4"}  # p1 (team b) never appears
        for hit in filtered:  # ranks are counted among the filtered pages only
            assert all(c["rank"] <= 3 for c in hit.components.values())


def test_hybrid_components_and_scores_are_consistent(store_path):
    with LocalStore.open(store_path, readonly=True) as store:
        hits = store.search(vec(4), 6, mode="hybrid", text="supersonic flow")
        for h in hits:
            assert h.score == pytest.approx(
                sum(1 / (RRF_K + c["rank"]) for c in h.components.values())
            )
        assert hits[0].page_id == "p4"  # best on both sides
        exact = {r.page_id: r.score for r in store.search(vec(4), 6, mode="exact")}
        assert all(
            h.components["visual"]["score"] == pytest.approx(exact[h.page_id])
            for h in hits
            if "visual" in h.components
        )
        mixed = store.search(vec(4), 3, mode="hybrid", text="supersonic flow", alpha=0.3)
        assert mixed[0].page_id == "p4" and mixed[0].score == pytest.approx(1.0)


def test_text_and_hybrid_need_the_query_text(store_path):
    with LocalStore.open(store_path, readonly=True) as store:
        with pytest.raises(StoreInputError, match="query text"):
            store.search(vec(0), 3, mode="hybrid")
        with pytest.raises(StoreInputError, match="query vectors"):
            store.search(None, 3, mode="hybrid", text="flow")
        with pytest.raises(StoreInputError, match="mode must be one of"):
            store.search(vec(0), 3, mode="bm25")


HOSTILE = [
    '"',
    '"unbalanced quote',
    "flat NEAR plate",
    "NEAR(flat plate, 2)",
    "plat*",
    "*",
    "-flow",
    "flow -plate",
    "((flat plate",
    "flat)) OR (",
    "AND OR NOT",
    "text:flat",
    "^flat",
    "flat\x00plate",
    "😀 🚀",
    "",
    "   ",
    "flat " * 2000,  # 10 kB
    "x" * 10_000,
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_query_strings_give_results_never_sqlite_errors(store_path, query):
    with LocalStore.open(store_path, readonly=True) as store:
        hits = store.search(None, 5, mode="text", text=query)
        hybrid = store.search(vec(0), 5, mode="hybrid", text=query)
    words = {w.casefold() for w in query.replace("\x00", " ").split()}
    if words & {"flat", "plate", "flat)),", "((flat"}:
        assert {"p0", "p4"} <= {h.page_id for h in hits}
    assert len(hybrid) == 5


def test_raw_fts_syntax_is_opt_in_and_its_errors_are_clear(store_path):
    with LocalStore.open(store_path, readonly=True) as store:
        assert text_ids(store, '"flat plate" NOT supersonic', fts_syntax=True) == ["p0"]
        assert text_ids(store, "NEAR(boundary plate, 5)", fts_syntax=True) == ["p0"]
        assert set(text_ids(store, "hyper*", fts_syntax=True)) == {"p1"}
        for bad in ["((flat", '"open', "flat AND", "nosuchcolumn:flat"]:
            with pytest.raises(StoreInputError, match="not valid FTS5 syntax"):
                store.search(None, 3, mode="text", text=bad, fts_syntax=True)
        with pytest.raises(StoreInputError, match="characters"):
            store.search(None, 3, mode="text", text="a" * 200_000)


def test_match_expression_quotes_every_word():
    assert match_expression('say "NEAR"(x*) -y') == '"say" OR "NEAR" OR "x" OR "y"'
    assert match_expression("?!") is None
    assert match_expression("Ünïcode ÜNÏCODE unicode") == '"Ünïcode"'
    assert match_expression("the flow of air") == '"flow" OR "air"'  # stop words left out
    assert match_expression("to be or not to be") == '"to" OR "be" OR "or" OR "not"'


# --- writes keep the index exact --------------------------------------------------------------


def test_upsert_delete_compact_keep_the_text_index_exact(store_path):
    with LocalStore.open(store_path) as store:
        store.upsert([PageRecord("p0", "doc0", 1, vec(0), text="wind tunnel calibration")])
        store.delete(page_ids=["p4"])
        store.delete(doc_id="doc1")  # p1, p3, p5
        assert text_ids(store, "flat plate") == []
        assert text_ids(store, "tunnel") == ["p0"]
        store.compact()
        assert text_ids(store, "tunnel calibration") == ["p0"]
        assert text_ids(store, "cafe") == ["p2"]
        report = store.verify()
        assert report.ok, report.problems
        with sqlite3.connect(store_path / cat.CATALOG_NAME) as conn:
            indexed = conn.execute("SELECT count(*) FROM pages_fts_docsize").fetchone()[0]
        assert indexed == store.count() == 2


@pytest.mark.parametrize(
    "tamper",
    [
        "INSERT INTO pages_fts(rowid, text) VALUES (9999, 'phantom words')",
        "INSERT INTO pages_fts(pages_fts, rowid, text) "
        "SELECT 'delete', pid, text FROM pages WHERE page_id = 'p4'",  # a page's words dropped
    ],
)
def test_verify_finds_a_text_index_out_of_step_and_optimize_repairs_it(store_path, tamper):
    conn = sqlite3.connect(store_path / cat.CATALOG_NAME, isolation_level=None)
    conn.execute(tamper)
    conn.close()
    report = LocalStore.verify_path(store_path)
    assert not report.ok and "text index" in " ".join(report.problems)
    with LocalStore.open(store_path) as store:
        store.optimize()
        assert store.verify().ok
        assert text_ids(store, "phantom") == []


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from vrag_compress.store import LocalStore, PageRecord
    from vrag_compress.store.local import catalog as cat

    def die_after(name):
        original = getattr(cat, name)
        def wrapped(*a, **kw):
            original(*a, **kw)
            os.kill(os.getpid(), signal.SIGKILL)
        setattr(cat, name, wrapped)

    store = LocalStore.open(sys.argv[1])
    v = np.ones((4, 8), dtype=np.float32)
    if sys.argv[2] == "add":
        die_after("set_segment_rows")  # pages and text indexed, the transaction not committed
        store.add([PageRecord("new", "docn", 1, v, text="zeppelin aerodynamics")])
    else:
        store.delete(page_ids=["p0"])
        die_after("move_pages")  # compaction moved the rows, not committed
        store.compact()
    """
)


@pytest.mark.parametrize("point", ["add", "compact"])
def test_a_killed_writer_leaves_the_text_index_exact_and_resume_works(store_path, point):
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(store_path), point], capture_output=True, timeout=120
    )
    assert run.returncode == -9, run.stderr.decode()
    with LocalStore.open(store_path) as store:
        assert store.verify().ok
        assert text_ids(store, "zeppelin") == []
        assert text_ids(store, "boundary") == (["p0"] if point == "add" else [])
        store.add([PageRecord("new", "docn", 1, vec(9), text="zeppelin aerodynamics")])
        store.compact()
        assert text_ids(store, "zeppelin") == ["new"]
        report = store.verify()
        assert report.ok, report.problems


# --- schema: old catalogs gain the index, newer ones are refused -------------------------------


def schema_of(path: Path) -> tuple[int, bool]:
    conn = sqlite3.connect(path / cat.CATALOG_NAME)
    version = int(conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
    has = cat.has_text_index(conn)
    conn.close()
    return version, has


def test_an_old_index_opens_and_gains_the_text_index(store_path, make_old):
    make_old(store_path)
    assert schema_of(store_path) == (1, False)
    with LocalStore.open(store_path, readonly=True) as reader:  # cannot write: a private index
        assert text_ids(reader, "flat plate") == ["p4", "p0"]
        assert reader.verify().ok
    assert schema_of(store_path) == (1, False)
    with LocalStore.open(store_path) as store:
        assert schema_of(store_path) == (cat.SCHEMA_VERSION, True)
        assert text_ids(store, "flat plate") == ["p4", "p0"]
        store.add([PageRecord("p9", "doc9", 1, vec(9), text="flat plate heating")])
        assert "p9" in text_ids(store, "flat plate")
        assert store.verify().ok


def test_a_reader_of_an_old_index_sees_later_writes(store_path, make_old):
    make_old(store_path)
    with LocalStore.open(store_path, readonly=True) as reader:
        assert text_ids(reader, "zeppelin") == []
        with LocalStore.open(store_path) as writer:  # upgrades the catalog under the reader
            writer.add([PageRecord("z", "dz", 1, vec(7), text="zeppelin")])
        assert text_ids(reader, "zeppelin") == ["z"]


def test_a_newer_schema_is_refused_clearly(store_path):
    conn = sqlite3.connect(store_path / cat.CATALOG_NAME, isolation_level=None)
    conn.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(cat.SCHEMA_VERSION + 1),)
    )
    cat.seal_meta(conn)
    conn.close()
    for readonly in (True, False):
        with pytest.raises(StoreError, match="newer than this vrag_compress"):
            LocalStore.open(store_path, readonly=readonly)


# --- compatibility forms: ligatures, full width ------------------------------------------------

COMPAT = {"lig": "the ﬁnancial proﬁle of the ﬂeet", "wide": "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ report"}


def make_schema_2(path: Path) -> None:
    """Turns a store folder into one of schema 2: a text index of the raw page text (triggers
    without compatibility folding), as vrag_compress wrote before it folded."""
    raw = [stmt.replace(f"{cat.NFKC_SQL}(new.text)", "new.text") for stmt in cat.FTS_STATEMENTS]
    raw = [stmt.replace(f"{cat.NFKC_SQL}(old.text)", "old.text") for stmt in raw]
    conn = sqlite3.connect(path / cat.CATALOG_NAME, isolation_level=None)
    for kind in ("fts", "log"):  # schema 2 had no text change log either
        for event in ("insert", "delete", "update"):
            conn.execute(f"DROP TRIGGER pages_{kind}_{event}")
    conn.execute("DROP TABLE pages_fts")
    conn.execute("DROP TABLE text_log")
    for stmt in raw:
        conn.execute(stmt)
    conn.execute("INSERT INTO pages_fts(pages_fts) VALUES ('rebuild')")
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    cat.seal_meta(conn)
    conn.close()


def test_ligatures_and_full_width_text_are_found_by_their_plain_letters(tmp_path):
    with LocalStore.create(tmp_path / "c.vrag", CONFIG) as store:
        store.add(pages(COMPAT))
        for query in ("financial", "PROFILE", "ﬁnancial", "fleet", "fullwidth", "abc"):
            assert len(text_ids(store, query)) == 1, query
        assert text_ids(store, '"financial profile"', fts_syntax=True) == ["lig"]
        hit = store.search(None, 1, mode="text", text="financial")[0]
        assert hit.text == COMPAT["lig"]  # the page text is kept as given
        store.delete(page_ids=["lig"])
        assert text_ids(store, "financial") == [] and store.verify().ok


def test_a_schema_2_index_is_read_folded_and_upgraded_consistently(tmp_path):
    path = tmp_path / "old.vrag"
    with LocalStore.create(path, CONFIG) as store:
        store.add(pages(COMPAT))
    make_schema_2(path)
    assert schema_of(path) == (2, True)
    with LocalStore.open(path, readonly=True) as reader:  # cannot rebuild: a private index
        assert text_ids(reader, "financial") == ["lig"]
        assert reader.verify().ok
    assert schema_of(path) == (2, True)
    with LocalStore.open(path) as store:
        assert schema_of(path) == (cat.SCHEMA_VERSION, True)
        assert text_ids(store, "financial") == ["lig"] and store.verify().ok
        store.add([PageRecord("new", "dn", 1, vec(8), text="ﬁnal ﬁgures")])
        assert text_ids(store, "final") == ["new"] and store.verify().ok
        store.rebuild_text_index()
        assert text_ids(store, "figures") == ["new"] and store.verify().ok


def test_the_sparse_terms_fold_as_the_text_index_does():
    from vrag_compress.store.lexical import sparse_query, terms

    assert terms(COMPAT["wide"]) == ["fullwidth", "abc", "report"]
    assert terms("ﬁnancial") == ["financial"]
    assert sparse_query("ﬁnancial") == sparse_query("FINANCIAL")


# --- options a mode does not use are errors ---------------------------------------------------


@pytest.mark.parametrize(
    "mode, options, named",
    [
        ("auto", {"text": "flat plate"}, "text applies"),
        ("exact", {"alpha": 0.5}, "alpha applies"),
        ("two_stage", {"fts_syntax": True}, "fts_syntax applies"),
        ("text", {"alpha": 0.5}, "alpha applies to mode='hybrid'"),
        ("text", {"text_k": 5}, "text_k applies to mode='hybrid'"),
    ],
)
def test_an_option_the_mode_does_not_use_is_refused(store_path, mode, options, named):
    query = None if mode == "text" else vec(0)
    kw = {"text": "flat plate"} if mode == "text" else {}
    with LocalStore.open(store_path, readonly=True) as store:
        with pytest.raises(StoreInputError, match=named):
            store.search(query, 3, mode=mode, **(kw | options))


def test_a_bad_text_k_is_named(store_path):
    with LocalStore.open(store_path, readonly=True) as store:
        with pytest.raises(StoreInputError, match="text_k must be a positive int"):
            store.search(vec(0), 3, mode="hybrid", text="flat plate", text_k=0)
