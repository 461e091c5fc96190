"""The server's errors in the CLI's words, with the status codes docs/serve.md lists."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from vrag_compress.cli import app as cli
from vrag_compress.serve import ServeConfig, create_app

pytestmark = pytest.mark.slow  # a tiny model behind a real app


@pytest.fixture(scope="module")
def index_dir(law_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the session's tiny-model index: the wording under test does not depend on
    which pages it holds, and the server may write beside them (so never the original)."""
    path = tmp_path_factory.mktemp("serve-messages") / "idx.vrag"
    shutil.copytree(law_index, path)
    return path


@pytest.fixture(scope="module")
def client(index_dir: Path):
    app = create_app(ServeConfig(index_dir, api_key="k", ocr="never"))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client


def cli_error(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 2, result.output
    return result.output


def test_an_empty_query_is_worded_as_the_cli_words_it(client: TestClient, index_dir: Path):
    for query in ("", "   "):
        answer = client.get("/api/search", params={"q": query})
        assert answer.status_code == 422
        assert answer.json() == {"error": "q: the query is empty"}
    assert "the query is empty" in cli_error("search", str(index_dir), " ")
    asked = client.post("/api/ask", json={"question": ""})
    assert asked.status_code == 422 and asked.json() == {"error": "question: the query is empty"}


def test_k_below_one_is_worded_as_the_cli_words_it(client: TestClient, index_dir: Path):
    for k in ("0", "many"):
        answer = client.get("/api/search", params={"q": "page", "k": k})
        assert answer.status_code == 422
        field, _, message = answer.json()["error"].partition(": ")
        assert field == "k" and message in cli_error("search", str(index_dir), "x", "-k", k)


def test_a_body_that_is_not_json_says_so(client: TestClient):
    answer = client.post(
        "/api/ask", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 422
    assert answer.json()["error"].startswith("the request body is not valid JSON (")
    assert "decode" not in answer.json()["error"]


def test_k_over_the_limit_is_refused_alike_by_search_and_ask(client: TestClient):
    searched = client.get("/api/search", params={"q": "page", "k": 1000})
    asked = client.post("/api/ask", json={"question": "page", "k": 1000})
    assert searched.status_code == 400
    assert searched.json() == {"error": "k=1000 is over this server's limit of 100"}
    assert asked.status_code == 400  # no LLM here: refused before k is looked at
