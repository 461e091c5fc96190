"""What users type (filters, `-m` metadata, KEY=VALUE) read without trusting its size or shape:
hostile input is one usage error (exit 2) before any work starts, never a traceback, in the CLI
and in `VisualIndex.add`; the store refuses filters too costly to run."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from typer.testing import CliRunner

from vrag_compress import VisualIndex
from vrag_compress.cli import app
from vrag_compress.serve.logs import MAX_LOGGED_CHARS, ShortArgs
from vrag_compress.store import FilterError, LocalStore, PageRecord
from vrag_compress.store.filters import (
    MAX_CONDITIONS,
    MAX_IN_VALUES,
    check_user_metadata,
    parse_user_filter,
)
from vrag_compress.store.user_input import MAX_JSON_DEPTH, UserInputError, parse_pairs

DEEP = "[" * 5000
runner = CliRunner()


def invoke(*args: str):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    assert not isinstance(result.exception, RecursionError), result.exception
    return result


@pytest.mark.parametrize(
    "value", [DEEP, DEEP + "]" * 5000, "{" + '"a":{' * 4000], ids=["open", "closed", "object"]
)
def test_cli_deep_filter_pairs_are_usage_errors(tmp_path, value):
    result = invoke("search", tmp_path, "q", "--filter", f"x={value}")
    assert result.exit_code == 2
    assert f"more than {MAX_JSON_DEPTH} levels" in result.output and "--filter" in result.output


@pytest.mark.parametrize(
    "pair,piece",
    [
        (f"x={DEEP}", f"more than {MAX_JSON_DEPTH} levels"),
        ("x=NaN", "NaN is not a finite number"),
        ("x=-Infinity", "-Infinity is not a finite number"),
        ("x=1e999", "inf is not a finite number"),
        ("$team=law", "starts with '$'"),
        ("page_no=3", "built-in field"),
        ("team=\u202ewal", "U+202E"),
        ("team", "expected KEY=VALUE"),
    ],
)
def test_cli_bad_metadata_is_refused_before_anything_is_created(shared_data, tmp_path, pair, piece):
    index_dir = tmp_path / "new.vrag"
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    args = ("index", pdf, "-i", index_dir, "--model", "tiny-colqwen2", "-m", pair)
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert piece in result.output and "--metadata" in result.output
    assert not index_dir.exists()  # refused before the model loaded or a page was rendered


def test_quoted_nan_and_ordinary_values_are_text_or_json():
    assert parse_pairs(['x="NaN"', "n=3", "b=true", "t=[[x", "s=hello"], "metadata") == {
        "x": "NaN",
        "n": 3,
        "b": True,
        "t": "[[x",
        "s": "hello",
    }
    assert check_user_metadata({"team": "قانون", "tags": [1, {"a": None}]})["team"] == "قانون"


def test_visual_index_add_refuses_unfilterable_metadata_up_front(tmp_path):
    with VisualIndex.create(tmp_path / "idx", model="tiny-colqwen2") as index:
        for bad in ({"$x": 1}, {"doc_id": "a"}, {"x": float("nan")}, {"x": object()}):
            with pytest.raises(UserInputError):
                index.add([tmp_path / "missing.pdf"], metadata=bad, progress=False)
        assert index.store.count() == 0


def test_parse_user_filter_forms():
    assert parse_user_filter(None) is None and parse_user_filter([]) is None
    assert parse_user_filter(["team=law", "n=3"]) == {"team": "law", "n": 3}
    assert parse_user_filter('{"n": {"$gte": 2}}') == {"n": {"$gte": 2}}
    assert parse_user_filter({"team": "law"}) == {"team": "law"}
    with pytest.raises(FilterError, match="invalid JSON filter: Extra data"):
        parse_user_filter('{"a": 1} x')
    with pytest.raises(FilterError, match="field names must be strings"):
        parse_user_filter({1: "a"})
    with pytest.raises(FilterError, match="65,537 characters is over the limit of 65,536"):
        parse_user_filter({"team": "x" * 65_537})


@pytest.fixture()
def store(tmp_path):
    s = LocalStore.create(tmp_path / "s", {"dim": 4, "model_id": "tiny/col"})
    vectors = np.ones((2, 4), dtype=np.float32)
    s.add([PageRecord(f"p{i}", "d", i + 1, vectors, {"n": i}) for i in range(3)])
    yield s
    s.close()


def test_the_store_refuses_filters_too_costly_to_plan(store):
    """40,000 OR-ed conditions took 188 s to plan in SQLite; now refused at once."""
    query = np.ones((1, 4), dtype=np.float32)
    at_limit = {"$or": [{"n": i} for i in range(MAX_CONDITIONS)]}
    assert len(store.search(query, k=5, filter=at_limit, mode="exact")) == 3
    with pytest.raises(FilterError, match="conditions, over the limit"):
        store.search(query, filter={"$or": [{"n": i} for i in range(40_000)]}, mode="exact")
    with pytest.raises(FilterError, match="values, over the limit"):
        store.search(query, filter={"n": {"$in": list(range(MAX_IN_VALUES + 1))}}, mode="exact")


def test_long_log_arguments_are_cut():
    path = "/api/documents/" + "d" * 5000
    record = logging.LogRecord("uvicorn.access", 20, "", 0, '%s "%s %s"', ("ip", "GET", path), None)
    assert ShortArgs().filter(record)
    line = record.getMessage()
    assert len(line) < MAX_LOGGED_CHARS + 60 and "5,015 characters" in line
