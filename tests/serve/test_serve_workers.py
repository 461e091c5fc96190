"""`vrag serve --workers 2`: two real server processes on one loopback port over one index.
One indexes uploads, both answer reads from the same memory-mapped files, and an upload (or a
delete) made through either is visible through both."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import httpx
import pytest

from vrag_compress.serve.process import free_port, start_server

pytestmark = pytest.mark.e2e  # two real server processes

KEY = "workers-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TLS = ssl.create_default_context()
"""One SSL context for every client `by_role` opens (each client would build its own: 40 ms of
CPU, and `by_role` may open dozens before the kernel hands a connection to the other worker)."""


def by_role(base: str, path: str, **params: str) -> dict[bool, dict]:
    """The answer of ``GET path`` from the writer (True) and from a reader (False): each
    request opens a new connection, so the kernel hands it to either process."""
    seen: dict[bool, dict] = {}
    deadline = time.monotonic() + 120
    while len(seen) < 2 and time.monotonic() < deadline:
        with httpx.Client(base_url=base, timeout=60, verify=TLS) as http:  # one connection
            role = http.get("/api/info").json()["server"]["indexes_uploads"]
            if role not in seen:
                answer = http.get(path, params=params)
                assert answer.status_code == 200, answer.text
                seen[role] = answer.json()
    assert set(seen) == {True, False}, "both worker processes should have answered"
    return seen


@pytest.mark.slow
def test_two_workers_share_one_index_and_see_each_others_writes(shared_data, tmp_path):
    pdf = shared_data / "pdfs" / "icdar2013" / "eu-005.pdf"  # 2 pages: a search returns both
    index_dir = tmp_path / "workers.vrag"
    port, log = free_port(), tmp_path / "server.log"
    base = f"http://127.0.0.1:{port}"
    options = ["--model", "tiny-colqwen2", "--workers", "2", "--api-key", KEY, "--ocr", "never"]
    server = start_server(index_dir, port, log, *options, timeout=900)
    http = httpx.Client(base_url=base, verify=TLS)  # the job polls reuse one connection
    try:
        empty = by_role(base, "/api/documents")
        assert empty[True] == empty[False] == {"documents": []}
        posted = http.post(
            "/api/documents",
            files={"file": (pdf.name, pdf.read_bytes(), "application/pdf")},
            headers=AUTH,
            timeout=60,
        )
        assert posted.status_code == 202, posted.text
        job, doc_id = posted.json()["job"], posted.json()["doc_id"]
        status: dict = {}
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # any worker answers the job from its record
            status = http.get(f"/api/jobs/{job}", timeout=30).json()
            if status["state"] in ("done", "failed"):
                break
            time.sleep(0.2)
        assert status["state"] == "done" and status["pages_done"] > 1, status
        jobs = by_role(base, f"/api/jobs/{job}")
        assert jobs[True]["state"] == jobs[False]["state"] == "done"
        docs = by_role(base, "/api/documents")
        for answer in docs.values():
            assert [d["doc_id"] for d in answer["documents"]] == [doc_id]
        hits = by_role(base, "/api/search", q="page", k="2")
        for answer in hits.values():
            assert [h["doc_id"] for h in answer["hits"]] == [doc_id, doc_id]
        deleted = http.delete(f"/api/documents/{doc_id}", headers=AUTH, timeout=60)
        assert deleted.status_code == 200 and deleted.json()["pages_deleted"] > 1
        after = by_role(base, "/api/documents")
        assert after[True] == after[False] == {"documents": []}
        unknown = http.get("/api/jobs/..etc", timeout=30)  # never read as a path
        assert unknown.status_code == 404 and unknown.json()["error"].startswith("no job")
    finally:
        http.close()
        server.terminate()
        server.wait(60)
    uploads = [p for p in Path(index_dir, "uploads").iterdir() if p.is_dir()]
    assert uploads == []  # the delete removed the upload
