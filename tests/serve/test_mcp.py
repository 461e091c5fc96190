"""`vrag mcp`: the MCP server over one index, driven by the SDK's own client in process, over
stdio (the server a subprocess, as an MCP client starts it) and over streamable HTTP (a
subprocess on a loopback port, with the `vrag serve` host and key checks)."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from PIL import Image
from typer.testing import CliRunner

from vrag_compress import VisualIndex
from vrag_compress.cli import app as cli

# The MCP SDK (and the server module, which imports it) is imported by the tests that use it:
# collecting this module runs in every pytest-xdist worker, and only one of them runs these tests.
if importlib.util.find_spec("mcp") is None:
    pytest.skip("the [mcp] extra (in the dev extra)", allow_module_level=True)
if TYPE_CHECKING:
    from mcp import Client

KEY = "mcp-test-key"
ENV = {"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def index_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline MiniLM page-text encoder over a court transcript (one page) and a five-page
    PDF: a model the server subprocesses load by themselves."""
    path = tmp_path_factory.mktemp("mcp") / "pages.vrag"
    pdfs = [
        shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf",
        shared_data / "pdfs" / "edge" / "multi_page.pdf",
    ]
    with VisualIndex.create(path, model="minilm") as index:
        report = index.add(pdfs, metadata={"team": "law"}, progress=False, ocr="never")
    assert not report.failures and report.pages_indexed == 6
    return path


def run(coroutine: Any) -> Any:
    return anyio.run(lambda: coroutine)


async def session_calls(client: Client) -> dict[str, Any]:
    """What every transport must answer alike: the tools, a search, a page and an error."""
    tools = sorted(t.name for t in (await client.list_tools()).tools)
    found = await client.call_tool("search", {"query": "supreme court oral argument", "k": 2})
    empty = await client.call_tool("search", {"query": "   "})
    docs = await client.call_tool("list_documents", {})
    return {"tools": tools, "found": found, "empty": empty, "docs": docs}


def check_session(answers: dict[str, Any], index_dir: Path) -> None:
    from vrag_compress.serve.mcp_server import page_uri

    assert answers["tools"] == ["get_page", "info", "list_documents", "search"]
    found = answers["found"]
    assert not found.is_error
    top = found.structured_content["hits"][0]
    assert top["source"] == "scotus-transcript-p1.pdf" and top["page_no"] == 1
    assert "Supreme Court" in top["snippet"] and "text" not in top
    assert top["uri"] == page_uri(top["doc_id"], 1) and isinstance(top["regions"], list)
    assert str(index_dir.resolve()) not in json.dumps(found.structured_content)
    assert answers["empty"].is_error and "the query is empty" in answers["empty"].content[0].text
    names = {d["filename"] for d in answers["docs"].structured_content["documents"]}
    assert names == {"scotus-transcript-p1.pdf", "multi_page.pdf"}


# ------------------------------------------------------------------------- in process


@pytest.fixture(scope="module")
def served(index_dir: Path) -> Iterator[Any]:
    from vrag_compress.serve.mcp_server import build_server

    with VisualIndex.open(index_dir, readonly=True) as index:
        yield build_server(index)


def test_tools_answer_as_the_rest_api_does(served, index_dir):
    from mcp import Client

    async def calls() -> dict[str, Any]:
        async with Client(served) as client:
            return await session_calls(client)

    check_session(run(calls()), index_dir)


def test_get_page_returns_the_image_its_text_and_where_a_query_matched(served):
    from mcp import Client

    async def calls() -> Any:
        async with Client(served) as client:
            by_name = await client.call_tool(
                "get_page",
                {"document": "multi_page.pdf", "page": 2, "query": "page", "max_side": 200},
            )
            docs = (await client.call_tool("list_documents", {})).structured_content
            doc_id = next(d["doc_id"] for d in docs["documents"] if d["n_pages"] == 5)
            by_id = await client.call_tool("get_page", {"document": doc_id, "page": 2})
            return by_name, by_id, doc_id

    by_name, by_id, doc_id = run(calls())
    picture, text = by_name.content
    assert picture.type == "image" and picture.mime_type == "image/webp"
    image = Image.open(io.BytesIO(base64.b64decode(picture.data)))
    assert max(image.size) == 200
    details = json.loads(text.text)
    assert details["doc_id"] == doc_id and details["page_no"] == 2 and details["text"]
    assert details["metadata"]["team"] == "law" and "score" in details
    assert details["source"] == "multi_page.pdf"
    assert not by_id.is_error and json.loads(by_id.content[1].text)["regions"] == []


def test_search_with_an_image_finds_the_page_it_shows(served, index_dir):
    """A page's picture as the query: on this text-encoder index its words are read by OCR."""
    from mcp import Client

    with VisualIndex.open(index_dir, readonly=True) as index:
        (court,) = [d for d in index.documents() if d.n_pages == 1]
        picture = index.page_image(court.doc_id, 1)
    buffer = io.BytesIO()
    picture.save(buffer, "PNG")
    data = base64.b64encode(buffer.getvalue()).decode()

    async def calls() -> Any:
        async with Client(served) as client:
            found = await client.call_tool("search", {"image": data, "k": 1})
            junk = base64.b64encode(b"not a picture").decode()
            not_image = await client.call_tool("search", {"image": junk})
            not_base64 = await client.call_tool("search", {"image": "%%%"})
            both = await client.call_tool("search", {"image": data, "query": "court"})
            return found, not_image, not_base64, both

    found, not_image, not_base64, both = run(calls())
    assert not found.is_error, found.content
    answer = found.structured_content
    assert answer["image_query"]["read_by"] == "ocr" and answer["hits"][0]["doc_id"] == court.doc_id
    assert "image" in not_image.content[0].text and not_image.is_error
    assert not_base64.is_error and "not base64" in not_base64.content[0].text
    assert both.is_error and "not both" in both.content[0].text


@pytest.mark.parametrize(
    ("tool", "arguments", "words"),
    [
        ("search", {"query": "court", "mode": "fuzzy"}, "mode must be one of"),
        ("search", {"query": "court", "k": 0}, "k must be between 1 and 100"),
        ("search", {"query": "court", "filter": {"$nope": 1}}, "unknown logical operator"),
        ("search", {"query": "court", "mode": "hybrid", "filter": {"team": "law"}}, None),
        ("get_page", {"document": "missing.pdf", "page": 1}, "no document 'missing.pdf'"),
        ("get_page", {"document": "multi_page.pdf", "page": 9}, "it has pages 1..5"),
        ("get_page", {"document": "multi_page.pdf", "page": 1, "max_side": 3}, "max_side"),
        ("get_page", {"document": "multi_page.pdf", "page": 1, "query": " "}, "query is empty"),
        ("search", {"k": 3}, "query"),
    ],
)
def test_bad_arguments_are_tool_errors_and_the_server_goes_on(served, tool, arguments, words):
    from mcp import Client

    async def calls() -> Any:
        async with Client(served) as client:
            answer = await client.call_tool(tool, arguments)
            after = await client.call_tool("info", {})
            return answer, after

    answer, after = run(calls())
    if words is None:  # a valid call among the invalid ones
        assert not answer.is_error, answer.content
    else:
        assert answer.is_error and words in answer.content[0].text, answer.content
    assert not after.is_error and after.structured_content["pages"] == 6
    assert after.structured_content["path"] == "pages.vrag"


def test_page_images_are_resources(served):
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    from vrag_compress.serve.mcp_server import page_uri

    async def calls() -> Any:
        async with Client(served) as client:
            templates = (await client.list_resource_templates()).resource_templates
            docs = (await client.call_tool("list_documents", {})).structured_content
            doc_id = docs["documents"][0]["doc_id"]
            page = await client.read_resource(page_uri(doc_id, 1))
            with pytest.raises(MCPError, match="no page 40 of document"):
                await client.read_resource(page_uri(doc_id, 40))
            with pytest.raises(MCPError, match="must be a page number"):
                await client.read_resource(f"vrag://pages/{quote(doc_id)}/first")
            return templates, page

    templates, page = run(calls())
    assert [t.uri_template for t in templates] == ["vrag://pages/{document}/{page}"]
    (content,) = page.contents
    assert content.mime_type == "image/webp"
    Image.open(io.BytesIO(base64.b64decode(content.blob))).verify()


# ---------------------------------------------------------------------- subprocesses


def vrag_command() -> list[str]:
    return [sys.executable, "-m", "vrag_compress"]


def readme_client_entry() -> dict[str, Any]:
    """The MCP server entry of the client configuration the README shows."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", readme, re.S)
    servers = [json.loads(b)["mcpServers"] for b in blocks if "mcpServers" in b]
    assert len(servers) == 1, "README: one MCP client configuration"
    (entry,) = servers[0].values()
    return entry


@pytest.mark.slow
def test_the_readme_configuration_starts_a_stdio_server_the_sdk_client_uses(index_dir):
    """What an MCP client does with the README's JSON: start the command, talk over stdio."""
    from mcp import Client, StdioServerParameters

    entry = readme_client_entry()
    assert entry["command"] == "vrag" and entry["args"][0] == "mcp"
    found = shutil.which("vrag", path=str(Path(sys.executable).parent))
    command, prefix = (found, []) if found else (sys.executable, ["-m", "vrag_compress"])
    args = [*prefix, "mcp", str(index_dir), *entry["args"][2:]]
    server = StdioServerParameters(command=command, args=args, env={**entry.get("env", {}), **ENV})

    async def calls() -> dict[str, Any]:
        async with Client(server, read_timeout_seconds=300) as client:
            return await session_calls(client)

    check_session(run(calls()), index_dir)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def http_server(index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`vrag mcp --http` with a key on a free loopback port; yields its base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("mcp-http") / "server.log"
    command = [*vrag_command(), "mcp", str(index_dir), "--http", "--port", str(port)]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*command, "--api-key", KEY],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ENV},
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        with httpx.Client(timeout=5) as probe:  # one client: each `httpx.get` builds SSL anew
            while time.monotonic() < deadline:
                assert process.poll() is None, log.read_text()
                try:
                    probe.get(f"{base}/mcp")
                    break
                except httpx.TransportError:
                    time.sleep(0.5)
        yield base
    finally:
        process.terminate()
        process.wait(60)


@pytest.mark.slow
def test_streamable_http_subprocess_with_the_sdk_client(http_server, index_dir):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def calls() -> dict[str, Any]:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
        async with (
            http,
            Client(streamable_http_client(f"{http_server}/mcp", http_client=http)) as c,
        ):
            return await session_calls(c)

    check_session(run(calls()), index_dir)


@pytest.mark.slow
def test_http_requests_need_the_key_and_this_servers_host(http_server):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    url = f"{http_server}/mcp"
    no_key = httpx.post(url, json=body, headers=headers)
    assert no_key.status_code == 401 and "API key" in no_key.json()["error"]
    wrong = httpx.post(url, json=body, headers={**headers, "Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    keyed = {**headers, "Authorization": f"Bearer {KEY}"}
    rebound = httpx.post(url, json=body, headers={**keyed, "Host": "attacker.example"})
    assert rebound.status_code == 400 and "--allowed-host" in rebound.json()["error"]
    page = httpx.post(url, json=body, headers={**keyed, "Origin": "http://attacker.example"})
    assert page.status_code == 403
    listen = httpx.get(url, headers={"Accept": "text/event-stream"})  # the stream GET too
    assert listen.status_code == 401


def test_a_non_loopback_bind_needs_a_key(index_dir, monkeypatch):
    monkeypatch.delenv("VRAG_API_KEY", raising=False)
    result = CliRunner().invoke(cli, ["mcp", str(index_dir), "--http", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "--api-key" in result.output
    stdio = CliRunner().invoke(cli, ["mcp", str(index_dir), "--host", "0.0.0.0"])
    assert stdio.exit_code == 2 and "--http" in stdio.output


def test_a_missing_index_is_one_error_line(tmp_path):
    result = CliRunner().invoke(cli, ["mcp", str(tmp_path / "none.vrag")])
    assert result.exit_code == 1 and "no index here" in result.output


def test_without_the_sdk_the_command_names_the_extra(index_dir, monkeypatch):
    # "mcp" itself even where no test imported the SDK yet: then no submodule imports either
    for name in ["mcp", *[n for n in sys.modules if n.startswith("mcp.")]]:
        monkeypatch.setitem(sys.modules, name, None)  # `import mcp...` raises ImportError
    monkeypatch.delitem(sys.modules, "vrag_compress.serve.mcp_server", raising=False)
    result = CliRunner().invoke(cli, ["mcp", str(index_dir)])
    assert result.exit_code == 1
    assert "pip install 'vrag-compress[mcp]'" in " ".join(result.output.split())
