"""QDRANT_API_KEY never reaches a server that only an index folder names, on any front end.

A real HTTP listener on loopback stands in for whoever wrote the folder: every command that opens
a store is pointed at it through store.json, with the key in the environment. The listener must
never see the key, and each command must say why the server refused (the key was withheld).
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrag_compress.cli.app import app
from vrag_compress.index import VisualIndex
from vrag_compress.store.base import StoreError

# find_spec, not importorskip: collecting this module (in every pytest-xdist worker) then costs
# no qdrant-client import; the tests import the Qdrant store where they use it
if importlib.util.find_spec("qdrant_client") is None:
    pytest.skip("could not import 'qdrant_client'", allow_module_level=True)

SECRET = "listener-must-never-see-this"
WITHHELD = "was not sent to 127.0.0.1"


class Recorder(BaseHTTPRequestHandler):
    """Answers every request 401, as a Qdrant server does without its key, and keeps headers."""

    seen: list[dict[str, str]] = []

    def _refuse(self) -> None:
        Recorder.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = json.dumps({"status": {"error": "Must provide an API key"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _refuse

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[int]:
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def pointed(tmp_path: Path, listener: int, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An index folder whose store.json names the listener; the key is in the environment."""
    monkeypatch.setenv("QDRANT_API_KEY", SECRET)
    for name in ("VRAG_QDRANT_URL", "QDRANT_API_KEY_HOSTS"):
        monkeypatch.delenv(name, raising=False)
    folder = tmp_path / "downloaded.vrag"
    folder.mkdir()
    (folder / "store.json").write_text(json.dumps({"url": f"qdrant://127.0.0.1:{listener}/x"}))
    return folder


def _key_never_sent() -> None:
    assert Recorder.seen, "the listener saw no request: the test did not reach it"
    assert all("api-key" not in h and SECRET not in str(h) for h in Recorder.seen)


@pytest.mark.parametrize(
    "args",
    [
        ["info", "{dir}"],
        ["search", "{dir}", "anything"],
        ["verify", "{dir}"],
        ["delete", "{dir}", "some-doc"],
        ["migrate", "{dir}", "{tmp}/copy"],
    ],
    ids=["info", "search", "verify", "delete", "migrate"],
)
def test_cli_commands_withhold_the_key_and_say_why(
    pointed: Path, tmp_path: Path, args: list[str]
) -> None:
    argv = [a.format(dir=pointed, tmp=tmp_path) for a in args]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert WITHHELD in " ".join((result.stderr or result.output).split())
    _key_never_sent()


def test_the_library_and_the_server_withhold_the_key(pointed: Path) -> None:
    with pytest.raises(StoreError, match=WITHHELD):
        VisualIndex.open(pointed)
    from vrag_compress.serve.app import ServeConfig, create_app

    with pytest.raises(StoreError, match=WITHHELD):
        create_app(ServeConfig(pointed))
    _key_never_sent()


def test_both_frameworks_withhold_the_key(pointed: Path) -> None:
    from langchain_vrag_compress import CompressedColPaliRetriever as LangChainRetriever
    from llama_index.retrievers.vrag_compress import CompressedColPaliRetriever as LlamaRetriever

    with pytest.raises(StoreError, match=WITHHELD):
        LangChainRetriever.from_path(pointed)
    with pytest.raises(StoreError, match=WITHHELD):
        LlamaRetriever(str(pointed))
    _key_never_sent()


def test_a_server_the_user_names_gets_the_key(
    pointed: Path, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VRAG_QDRANT_URL", f"qdrant://127.0.0.1:{listener}")
    with pytest.raises(Exception):  # noqa: B017  (the listener refuses anyway)
        VisualIndex.open(pointed)
    assert any(h.get("api-key") == SECRET for h in Recorder.seen)
