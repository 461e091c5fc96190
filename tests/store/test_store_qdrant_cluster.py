"""Collection options for a Qdrant cluster (shards, replicas, on-disk multivectors), checked at
the HTTP boundary: no Qdrant server can run on the test machines, so a small fake server records
what the real `qdrant-client` sends when `QdrantStore.create` makes a collection."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from vrag_compress.store import StoreInputError

# find_spec, not importorskip: collecting this module (in every pytest-xdist worker) then costs
# no qdrant-client import; the tests import the Qdrant store where they use it
if importlib.util.find_spec("qdrant_client") is None:
    pytest.skip("could not import 'qdrant_client'", allow_module_level=True)

CONFIG = {"dim": 8, "model_id": "test"}


class FakeQdrant(BaseHTTPRequestHandler):
    """Just enough of Qdrant's REST API to create a collection and write and read its config."""

    collections: dict[str, dict[str, Any]] = {}
    points: dict[str, dict[Any, dict[str, Any]]] = {}

    def log_message(self, *args: Any) -> None:  # keep the test output clean
        pass

    def _reply(self, result: Any) -> None:
        body = json.dumps({"result": result, "status": "ok", "time": 0.0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def _parts(self) -> list[str]:
        return self.path.split("?")[0].strip("/").split("/")

    def do_GET(self) -> None:
        parts = self._parts()
        if parts == [""]:
            self._root()
        elif parts[0] == "collections" and parts[-1] == "exists":
            self._reply({"exists": parts[1] in self.collections})
        else:
            self.send_error(404)

    def _root(self) -> None:
        body = json.dumps({"title": "qdrant - vector search engine", "version": "1.20.0"})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_PUT(self) -> None:
        parts, body = self._parts(), self._body()
        if len(parts) == 2:  # PUT /collections/{name}: create
            self.collections[parts[1]] = body
            self._reply(True)
        elif parts[-1] == "points":  # upsert
            for point in body["points"]:
                self.points.setdefault(parts[1], {})[point["id"]] = point
            self._reply({"operation_id": 1, "status": "completed"})
        else:  # payload indexes
            self._reply({"operation_id": 1, "status": "completed"})

    def do_POST(self) -> None:
        parts, body = self._parts(), self._body()
        if parts[-1] == "points":  # retrieve by id
            stored = self.points.get(parts[1], {})
            found = [
                {"id": i, "payload": stored[i]["payload"], "vector": None}
                for i in body["ids"]
                if i in stored
            ]
            self._reply(found)
        else:
            self.send_error(404)


@pytest.fixture
def server() -> Iterator[type[FakeQdrant]]:
    FakeQdrant.collections, FakeQdrant.points = {}, {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeQdrant)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    FakeQdrant.port = httpd.server_address[1]  # type: ignore[attr-defined]
    try:
        yield FakeQdrant
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_url_sets_shards_replicas_and_on_disk_vectors(server: type[FakeQdrant]) -> None:
    from vrag_compress.store.qdrant.store import QdrantStore

    port = server.port  # type: ignore[attr-defined]
    url = f"qdrant://127.0.0.1:{port}/pages?shards=4&replicas=2&on_disk=true"
    store = QdrantStore.create(url, CONFIG, candidate="binary")
    store.close()
    pages = server.collections["pages"]
    assert pages["shard_number"] == 4 and pages["replication_factor"] == 2
    assert pages["vectors"]["pages"]["on_disk"] is True
    assert pages["vectors"]["binary"]["on_disk"] is True
    assert pages["on_disk_payload"] is True
    sidecar = server.collections["pages__vrag"]  # the config and document rows: copied as often
    assert sidecar["replication_factor"] == 2 and "shard_number" not in sidecar


def test_keyword_arguments_win_over_the_url_and_defaults_send_nothing(
    server: type[FakeQdrant],
) -> None:
    from vrag_compress.store.qdrant.store import QdrantStore

    port = server.port  # type: ignore[attr-defined]
    QdrantStore.create(f"qdrant://127.0.0.1:{port}/a?shards=4", CONFIG, shards=2).close()
    assert server.collections["a"]["shard_number"] == 2
    QdrantStore.create(f"qdrant://127.0.0.1:{port}/b", CONFIG).close()
    sent = server.collections["b"]
    assert {"shard_number", "replication_factor", "on_disk_payload"}.isdisjoint(sent)
    assert sent["vectors"]["pages"].get("on_disk") in (None, False)


@pytest.mark.parametrize(
    "query, problem",
    [
        ("shards=0", "shards must be a whole number >= 1, got '0'"),
        ("replicas=two", "replicas must be a whole number >= 1, got 'two'"),
        ("on_disk=yes", "on_disk must be true or false, got 'yes'"),
    ],
)
def test_bad_collection_options_are_one_line_errors(query: str, problem: str) -> None:
    from vrag_compress.store.qdrant.store import url_options

    url = f"qdrant://db:6333/pages?{query}"
    with pytest.raises(StoreInputError) as caught:
        url_options(url)
    assert str(caught.value) == f"{url}: {problem}"
