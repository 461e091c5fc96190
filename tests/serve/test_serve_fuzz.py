"""Fuzzing every route, parameter and body of the `vrag serve` API in-process (no network): any
input gives a non-5xx answer without a traceback, nothing is logged as an unhandled error, and the
index still verifies afterwards. Bounded: 50 examples per route, no deadline."""

from __future__ import annotations

import io
import itertools
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from starlette import testclient

from vrag_compress import VisualIndex
from vrag_compress.serve import ServeConfig, create_app

KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
EXAMPLES = 50

# Text as it can travel in a URL or form (UTF-8 encodable: no lone surrogates); JSON bodies also
# carry lone surrogates as \ud800 escapes.
url_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
any_text = st.text(max_size=40)
nasty = st.sampled_from(
    ["", " ", "\x00", "a\x00b", "\u202e", "../../etc/passwd", "%00", "p" * 1100, "d" * 5000,
     "{", "[" * 2000, '{"a": ' * 300, "NaN", "-1", "1e999", "😀", "\ud800", "$gt", "team=law"]
)  # fmt: skip
junk = st.one_of(url_text, nasty.filter(lambda t: "\ud800" not in t), st.integers().map(str))
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), any_text, nasty)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(any_text | nasty, inner, max_size=4)
    ),
    max_leaves=12,
)
words = st.lists(st.sampled_from(["court", "oral", "argument", "the", "Mercer"]), min_size=1)
queries = words.map(" ".join) | st.text(st.characters(blacklist_categories=("Cs",)), min_size=1)
conditions = st.fixed_dictionaries(
    {},
    optional={
        "team": st.sampled_from(["law", "x"]) | json_scalars,
        "page_no": st.integers(-2, 3)
        | st.dictionaries(st.sampled_from(["$gt", "$in"]), json_values),
        "doc_id": json_values,
        "n": st.dictionaries(st.sampled_from(["$exists", "$nin", "$lt", "$regex"]), json_values),
    },
)
filters = st.one_of(
    conditions,
    conditions,
    st.builds(
        lambda op, parts: {op: parts}, st.sampled_from(["$and", "$or"]), st.lists(conditions)
    ),
    st.dictionaries(any_text | nasty, json_values, max_size=3),
    json_values,
)


def mostly(valid: st.SearchStrategy, bad: st.SearchStrategy = junk) -> st.SearchStrategy:
    """``valid`` about three times in four, so most requests get past validation to the code
    behind it (hypothesis favours small integers, so 0..2 picks ``valid`` and 3 ``bad``)."""
    return st.integers(0, 3).flatmap(lambda i: bad if i == 3 else valid)


def png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), "white").save(buffer, "PNG")
    return buffer.getvalue()


PNG = png_bytes()


def some(draw, params: dict[str, st.SearchStrategy]) -> dict[str, Any]:
    """Each parameter present about seven times in eight, drawn from its strategy."""
    return {k: draw(v) for k, v in params.items() if draw(st.integers(0, 7)) != 7}


@st.composite
def search_requests(draw) -> tuple[str, str, dict[str, Any]]:
    params = some(
        draw,
        {
            "q": mostly(queries),
            "k": mostly(st.integers(1, 100).map(str)),
            "mode": mostly(st.sampled_from(["auto", "exact", "two_stage", "text", "hybrid"])),
            "alpha": st.floats(0, 1).map(str) | junk,
            "filter": st.lists(mostly(filters.map(json.dumps)) | st.just("team=law"), max_size=2),
        },
    )
    if params.get("mode") != "hybrid" and draw(st.integers(0, 3)) != 3:
        params.pop("alpha", None)
    return "GET", "/api/search", {"params": params}


def path_id(draw, real: str) -> str:
    return quote(draw(mostly(st.just(real))), safe="")


@st.composite
def page_requests(draw, page_id: str) -> tuple[str, str, dict[str, Any]]:
    pid = path_id(draw, page_id)
    if draw(st.booleans()):
        params = some(draw, {"max_side": mostly(st.integers(16, 4096).map(str))})
        return "GET", f"/api/pages/{pid}/image", {"params": params}
    params = some(
        draw,
        {
            "q": mostly(queries),
            "format": mostly(st.sampled_from(["json", "png"])),
            "overlay": mostly(st.sampled_from(["true", "false"])),
        },
    )
    return "GET", f"/api/pages/{pid}/explain", {"params": params}


@st.composite
def document_requests(draw, doc_id: str) -> tuple[str, str, dict[str, Any]]:
    headers = draw(mostly(st.just(AUTH), st.sampled_from([{}, {"Authorization": "Bearer no"}])))
    kind = draw(st.sampled_from(["list", "delete", "upload", "upload", "job"]))
    if kind == "list":
        return "GET", "/api/documents", {}
    if kind == "delete":
        return "DELETE", f"/api/documents/{path_id(draw, doc_id)}", {"headers": headers}
    if kind == "job":
        return "GET", f"/api/jobs/{path_id(draw, 'nojob')}", {}
    name = draw(mostly(st.sampled_from(["a.png", "a.pdf", "../x.png", "ünï 文档.png"]), url_text))
    content = draw(mostly(st.just(PNG), st.sampled_from([b"%PDF-1.4\n%%EOF", b""]) | st.binary()))
    data = some(
        draw, {"metadata": mostly(conditions.map(json.dumps), junk | json_values.map(json.dumps))}
    )
    files = {"file": (name, content, "application/octet-stream")}
    return "POST", "/api/documents", {"headers": headers, "files": files, "data": data}


@st.composite
def ask_requests(draw) -> tuple[str, str, dict[str, Any]]:
    body: Any = some(
        draw,
        {
            "question": mostly(queries, any_text | nasty | json_values),
            "k": mostly(st.integers(1, 5), st.integers() | json_values),
            "filter": mostly(conditions, filters),
        },
    )
    if draw(st.integers(0, 7)) == 7:
        body = draw(json_values)
    text = json.dumps(body)
    return "POST", "/api/ask", {"content": text, "headers": {"Content-Type": "application/json"}}


@st.composite
def other_requests(draw) -> tuple[str, str, dict[str, Any]]:
    path = draw(
        st.sampled_from(["/api/info", "/api/verify", "/", "/openapi.json", "/docs"])
        | st.builds(lambda n: f"/static/{quote(n, safe='')}", mostly(st.just("app.js")))
        | st.builds(lambda n: f"/docs-assets/{quote(n, safe='')}", junk)
    )
    params = draw(st.dictionaries(st.sampled_from(["q", "x", "k"]), junk, max_size=2))
    return "GET", path, {"params": params}


@pytest.fixture(scope="module")
def built(law_index: Path) -> Path:
    return law_index


@pytest.fixture()
def served(built, tmp_path, caplog):
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_vrag_compress import LangChainChatModel

    index_dir = tmp_path / "served.vrag"
    shutil.copytree(built, index_dir)
    chat = LangChainChatModel(
        GenericFakeChatModel(messages=itertools.repeat(AIMessage("an answer")))
    )
    app = create_app(ServeConfig(index_dir, api_key=KEY, ocr="never"), chat_model=chat)
    with caplog.at_level(logging.INFO):
        with TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1") as client:
            page = client.get("/api/search", params={"q": "court"}).json()["hits"][0]
            yield client, page
            wait_for_jobs(app.state.server.jobs)
            assert client.get("/api/verify").json()["ok"]
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info]
        assert not errors, [r.getMessage()[:300] for r in errors]
    with VisualIndex.open(index_dir, readonly=True) as index:
        report = index.verify()
        assert report.ok, report.problems


def wait_for_jobs(jobs: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while any(j.state in ("queued", "running") for j in list(jobs.jobs.values())):
        assert time.monotonic() < deadline, "uploads did not finish"
        time.sleep(0.2)


def check(client: TestClient, request: tuple[str, str, dict[str, Any]]) -> None:
    method, url, options = request
    try:
        response = client.request(method, url, **options)
    except testclient.httpx.InvalidURL:  # over the client's URL limit: nobody can send it
        return
    assert response.status_code < 500, (method, url[:200], response.text[:300])
    assert "Traceback" not in response.text, (method, url[:200])
    if response.headers.get("content-type", "").startswith("application/json"):
        body = response.json()
        assert response.is_success or isinstance(body.get("error"), str), body


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(data=st.data())
def test_fuzz_search(served, data):
    check(served[0], data.draw(search_requests()))


@FUZZ
@given(data=st.data())
def test_fuzz_pages(served, data):
    client, page = served
    check(client, data.draw(page_requests(page["page_id"])))


@FUZZ
@given(data=st.data())
def test_fuzz_documents_and_jobs(served, data):
    client, page = served
    check(client, data.draw(document_requests(page["doc_id"])))


@FUZZ
@given(data=st.data())
def test_fuzz_ask(served, data):
    check(served[0], data.draw(ask_requests()))


@FUZZ
@given(data=st.data())
def test_fuzz_index_and_static(served, data):
    check(served[0], data.draw(other_requests()))
