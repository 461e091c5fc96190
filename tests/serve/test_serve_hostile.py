"""Hostile filters, ids and metadata against the real `vrag serve` app: every one is a 4xx with a
message, nothing is logged as an unhandled error, and oversized ids are neither echoed nor logged
in full. The CLI reads filters through the same function and gives the same messages."""

from __future__ import annotations

import itertools
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from vrag_compress import VisualIndex
from vrag_compress.cli import app as cli
from vrag_compress.serve import ServeConfig, create_app
from vrag_compress.store.filters import MAX_CONDITIONS, MAX_IN_VALUES
from vrag_compress.store.user_input import MAX_JSON_DEPTH
from vrag_compress.testing import WordEncoder

KEY = "hostile-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def and_nest(depth: int) -> str:
    return '{"$and": [' * depth + '{"team": "law"}' + "]}" * depth


def and_dict(depth: int) -> dict:
    spec: dict = {"team": "law"}
    for _ in range(depth):
        spec = {"$and": [spec]}
    return spec


def object_nest(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def list_nest(depth: int, closed: bool = True) -> str:
    return "[" * depth + ("]" * depth if closed else "")


# (name, filter= values of GET /api/search, a piece of the expected message)
HOSTILE_FILTERS = [
    ("and-1200", [and_nest(1200)], f"more than {MAX_JSON_DEPTH} levels"),
    ("and-2000", [and_nest(2000)], f"more than {MAX_JSON_DEPTH} levels"),  # 3,000: URL too long
    ("object-1200", [object_nest(1200)], f"more than {MAX_JSON_DEPTH} levels"),
    ("object-3000", [object_nest(3000)], f"more than {MAX_JSON_DEPTH} levels"),
    ("and-40", [and_nest(40)], "more than 32 levels"),
    ("pair-list-5000", ["x=" + list_nest(5000)], f"more than {MAX_JSON_DEPTH} levels"),
    ("pair-open-5000", ["x=" + list_nest(5000, closed=False)], f"more than {MAX_JSON_DEPTH}"),
    ("unknown-operator", ['{"team": {"$regex": "^l"}}'], "unknown filter operator '$regex'"),
    ("unknown-logical", ['{"$where": "1"}'], "unknown logical operator '$where'"),
    ("nested-operator", ['{"team": {"$in": [{"$gt": 1}]}}'], "values must be str"),
    ("empty-key-json", ['{"": 1}'], "non-empty"),
    ("empty-key-pair", ["=1"], "expected KEY=VALUE"),
    ("no-equals", ["team"], "expected KEY=VALUE"),
    ("not-an-object", ['{"team": 1} trailing'], "invalid JSON filter"),
    ("array-not-object", ["[1, 2]"], "expected KEY=VALUE"),
    ("nan", ['{"n": NaN}'], "NaN is not a finite number"),
    ("huge-int", ['{"n": 18446744073709551616}'], "64 bits"),
    ("nul-value", ['{"team": "la\\u0000w"}'], "NUL"),
    ("nul-key", ['{"te\\u0000am": "law"}'], "NUL"),
    ("nul-pair", ["team=la\x00w"], "NUL"),
    ("rtl-value", ['{"team": "\u202ewal"}'], "U+202E"),
    ("rtl-key", ['{"te\u202eam": "law"}'], "U+202E"),
    ("rtl-isolate-pair", ["team=\u2067law"], "U+2067"),
]


@pytest.fixture(scope="module")
def built(law_index: Path) -> Path:
    return law_index


@pytest.fixture()
def index_dir(built, tmp_path) -> Path:
    path = tmp_path / "served.vrag"
    shutil.copytree(built, path)
    return path


def fake_chat() -> Any:
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_vrag_compress import LangChainChatModel

    return LangChainChatModel(
        GenericFakeChatModel(messages=itertools.repeat(AIMessage("an answer")))
    )


@pytest.fixture(scope="module")
def encoder(built: Path) -> Any:
    """The index's own encoder, loaded once: each test's server gets a fresh copy of the index
    but not a fresh model load, which these input checks never reach."""
    with VisualIndex.open(built, readonly=True) as index:
        return index.encoder


@pytest.fixture()
def client(index_dir, encoder, caplog):
    config = ServeConfig(index_dir, api_key=KEY, ocr="never")
    with (
        caplog.at_level(logging.INFO),
        TestClient(
            create_app(config, encoder=encoder, chat_model=fake_chat()),
            base_url="http://127.0.0.1",
        ) as test,
    ):
        yield test
    assert_no_unhandled_errors(caplog)


def assert_no_unhandled_errors(caplog) -> None:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage()[:300] for r in errors]


def assert_refused(response, status: int, piece: str) -> str:
    assert response.status_code == status, response.text[:500]
    message = response.json()["error"]
    assert piece in message and "Traceback" not in message and len(message) < 600, message
    return message


@pytest.mark.parametrize(
    "values,piece", [c[1:] for c in HOSTILE_FILTERS], ids=[c[0] for c in HOSTILE_FILTERS]
)
def test_hostile_search_filters_are_400s(client, values, piece):
    response = client.get("/api/search", params={"q": "background", "filter": values})
    assert_refused(response, 400, piece)


@pytest.mark.parametrize(
    "spec,piece",
    [
        ({"team": "x" * 1_000_000}, "1,000,000 characters"),
        (and_dict(200), f"more than {MAX_JSON_DEPTH} levels"),
        ({"team": {"$in": list(range(MAX_IN_VALUES + 1))}}, f"{MAX_IN_VALUES + 1:,} values"),
        ({"$or": [{"n": i} for i in range(MAX_CONDITIONS + 1)]}, "conditions"),
        ({f"k{i}": 1 for i in range(MAX_CONDITIONS + 1)}, "conditions"),
        ({"team": {"$nin": "law"}}, "needs a list"),
        ({"team": {"$exists": "yes"}}, "true or false"),
        ({"\u202e": 1}, "U+202E"),
        ({"$and": [[]]}, "must be a dict"),
    ],
    ids=[
        "1MB-value",
        "and-200",
        "huge-in",
        "huge-or",
        "many-keys",
        "nin-text",
        "exists-text",
        "rtl",
        "list",
    ],
)
def test_hostile_ask_filters_are_400s(client, spec, piece):
    response = client.post("/api/ask", json={"question": "who argued?", "filter": spec})
    assert_refused(response, 400, piece)


def test_a_3000_deep_ask_body_is_a_400(client):
    body = '{"question": "who argued?", "filter": ' + and_nest(3000) + "}"
    response = client.post("/api/ask", content=body, headers={"Content-Type": "application/json"})
    assert_refused(response, 400, "error parsing the body")


def test_ordinary_filters_still_work(client):
    """Right-to-left letters are text like any other; deep-but-legal filters still select."""
    hits = client.get("/api/search", params={"q": "court", "filter": "team=law"}).json()["hits"]
    assert len(hits) == 1
    arabic = client.get("/api/search", params={"q": "court", "filter": "team=قانون"})
    assert arabic.status_code == 200 and arabic.json()["hits"] == []
    nested = '{"$and": [' * 32 + '{"team": "law"}' + "]}" * 32
    assert len(client.get("/api/search", params={"q": "x", "filter": nested}).json()["hits"]) == 1
    many = {"team": {"$in": ["law", *map(str, range(5000))]}}
    asked = client.post("/api/ask", json={"question": "who argued?", "k": 1, "filter": many})
    assert asked.status_code == 200 and '"done"' in asked.text


LONG_PAGE, LONG_DOC = "p" * 1100, "d" * 5000


@pytest.mark.parametrize(
    "method,url,status,piece",
    [
        ("GET", "/api/pages/a%00b/image", 400, "page id must not contain NUL"),
        ("GET", "/api/pages/a%00b/explain?q=x", 400, "page id must not contain NUL"),
        ("GET", f"/api/pages/{LONG_PAGE}/explain?q=court", 400, "1,100 characters"),
        ("GET", f"/api/pages/{LONG_PAGE}/image", 400, "1,100 characters"),
        ("DELETE", "/api/documents/a%00", 400, "doc id must not contain NUL"),
        ("DELETE", f"/api/documents/{LONG_DOC}", 400, "5,000 characters"),
        ("GET", f"/api/jobs/{LONG_DOC}", 404, "no job"),
    ],
    ids=[
        "image-nul",
        "explain-nul",
        "explain-long",
        "image-long",
        "delete-nul",
        "delete-long",
        "job-long",
    ],
)
def test_hostile_ids_are_4xx_and_not_echoed_in_full(client, method, url, status, piece):
    message = assert_refused(client.request(method, url, headers=AUTH), status, piece)
    assert "p" * 200 not in message and "d" * 200 not in message


@pytest.mark.parametrize(
    "metadata,piece",
    [
        (object_nest(3000), f"more than {MAX_JSON_DEPTH} levels"),
        ('{"x": ' + list_nest(1200) + "}", f"more than {MAX_JSON_DEPTH} levels"),
        ('{"x": NaN}', "NaN is not a finite number"),
        ('{"x": 1e999}', "inf is not a finite number"),
        ('{"$team": "law"}', "starts with '$'"),
        ('{"doc_id": "mine"}', "built-in field"),
        ('{"": 1}', "non-empty"),
        ('{"team": "\u202ewal"}', "U+202E"),
        ('{"team": "a\\u0000b"}', "NUL"),
        ('["team"]', "must be an object"),
        ('{"team": ', "invalid JSON metadata"),
    ],
    ids=[
        "deep-3000",
        "list-1200",
        "nan",
        "inf",
        "dollar",
        "builtin",
        "empty",
        "rtl",
        "nul",
        "list",
        "broken",
    ],
)
def test_hostile_upload_metadata_is_422_and_nothing_is_kept(
    client, index_dir, shared_data, metadata, piece
):
    pdf = shared_data / "pdfs" / "edge" / "multi_page.pdf"
    response = client.post(
        "/api/documents",
        headers=AUTH,
        files={"file": ("multi.pdf", pdf.read_bytes(), "application/pdf")},
        data={"metadata": metadata},
    )
    assert_refused(response, 422, piece)
    uploads = index_dir / "uploads"
    assert not uploads.exists() or not any(uploads.iterdir())
    assert len(client.get("/api/documents").json()["documents"]) == 1


def test_cli_and_server_give_the_same_filter_errors(client, index_dir):
    """One parser: the CLI's usage error carries the server's message word for word."""
    for name, values, _ in HOSTILE_FILTERS:
        server = client.get("/api/search", params={"q": "x", "filter": values}).json()["error"]
        args = ["search", str(index_dir), "x"] + [a for v in values for a in ("--filter", v)]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, (name, result.output)
        assert "Traceback" not in result.output and not isinstance(result.exception, RecursionError)
        flat = " ".join(result.output.split())
        assert " ".join(server.split())[:80] in flat, (name, server, result.output)


@pytest.mark.slow
def test_a_real_server_on_loopback_answers_4xx_and_logs_no_long_lines(index_dir, tmp_path):
    """Through uvicorn itself: the access log cuts long request targets and shows no
    unhandled error (the TestClient above bypasses uvicorn's logging)."""
    import httpx

    from vrag_compress.serve.process import free_port, start_server

    port, log = free_port(), tmp_path / "server.log"
    server = start_server(index_dir, port, log, "--api-key", KEY, "--ocr", "never", timeout=180)
    base = f"http://127.0.0.1:{port}"
    try:
        answers = [
            httpx.delete(f"{base}/api/documents/{LONG_DOC}", headers=AUTH, timeout=30),
            httpx.get(f"{base}/api/pages/{LONG_PAGE}/explain", params={"q": "x"}, timeout=30),
            httpx.get(f"{base}/api/pages/a%00b/image", timeout=30),
            httpx.get(f"{base}/api/search", params={"q": "x", "filter": and_nest(300)}, timeout=30),
        ]
    finally:
        server.terminate()
        server.wait(30)
    assert [a.status_code for a in answers] == [400, 400, 400, 400], [a.text for a in answers]
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "Exception in ASGI" not in text, text[-3000:]
    assert "characters]" in text  # the long targets were logged, cut
    assert max(len(line) for line in text.splitlines()) < 1000


def test_error_answers_never_show_the_index_folder(client, index_dir):
    """Issue 49.10: a missing page, document or answer, and a stored image deleted from disk,
    answered with the absolute index path (``no page 'nope' in /tmp/.../served.vrag``)."""
    page_id = client.get("/api/search", params={"q": "court"}).json()["hits"][0]["page_id"]
    for image in (index_dir / "images").rglob("*.webp"):
        image.unlink()
    answers = {
        "page": client.get("/api/pages/nope/image"),
        "explain": client.get("/api/pages/nope/explain", params={"q": "court"}),
        "document": client.delete("/api/documents/nope", headers=AUTH),
        "ask": client.post("/api/ask", json={"question": "who?", "filter": {"team": "nobody"}}),
        "image": client.get(f"/api/pages/{page_id}/image"),
    }
    for name, answer in answers.items():
        message = assert_refused(answer, 404, "")
        for path in {str(index_dir), str(index_dir.resolve())}:
            assert path not in answer.text, (name, message)
    assert "served.vrag" in answers["page"].json()["error"]
    assert "images/" in answers["image"].json()["error"]


def test_a_no_images_index_whose_source_moved_answers_404(tmp_path, shared_data, caplog):
    """Issue 49.9: a ``--no-images`` page is rendered from its source PDF; once the PDF moved,
    ``GET /api/pages/{id}/image`` answered 500 with an `UnreadablePathError` traceback."""
    encoder = WordEncoder()
    pdf = tmp_path / "docs" / "report.pdf"
    pdf.parent.mkdir()
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", pdf)
    index_dir = tmp_path / "refs.vrag"
    with VisualIndex.create(
        index_dir, encoder=encoder, compressor="identity", store_images=False
    ) as index:
        report = index.add([pdf], progress=False, ocr="never")
        (page_id,) = index.store.page_ids(report.documents_indexed[0])
    pdf.rename(tmp_path / "moved.pdf")
    config = ServeConfig(index_dir, ocr="never")
    app = create_app(config, encoder=encoder, chat_model=fake_chat())
    with caplog.at_level(logging.INFO), TestClient(app, base_url="http://127.0.0.1") as client:
        for params in ({}, {"max_side": 64}):
            answer = client.get(f"/api/pages/{page_id}/image", params=params)
            message = assert_refused(answer, 404, "its source report.pdf does not exist")
            assert str(tmp_path) not in message
        asked = client.post("/api/ask", json={"question": "who argued?", "k": 1})
        assert str(tmp_path) not in assert_refused(asked, 404, "does not exist")
    assert_no_unhandled_errors(caplog)
