"""`kill -9` of a real `vrag serve` process during an upload: the index verifies, and the next
start resumes the upload under the same job id at its first uncommitted page, without duplicates.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from vrag_compress import VisualIndex, get_compressor
from vrag_compress.serve.process import free_port, start_server

pytestmark = [pytest.mark.e2e, pytest.mark.crash]  # a real server, killed mid-upload

KEY = "crash-test-key"


def empty_index(path: Path) -> Path:
    """A new tiny-model index the server indexes uploads into, one page per batch."""
    compressor = get_compressor("sap", ratio=0.25, layers=[0, 1])
    VisualIndex.create(path, model="tiny-colqwen2", compressor=compressor, batch_size=1).close()
    return path


def start(index_dir: Path, port: int, log: Path) -> subprocess.Popen:
    return start_server(index_dir, port, log, "--api-key", KEY, "--ocr", "never", timeout=180)


@pytest.mark.slow
def test_kill_9_during_upload_verifies_and_resumes(shared_data, tmp_path):
    pdf = shared_data / "pdfs" / "icdar2013" / "us-017.pdf"  # 7 pages, one per batch
    index_dir = empty_index(tmp_path / "crash.vrag")
    port, log = free_port(), tmp_path / "server.log"
    base = f"http://127.0.0.1:{port}"
    server = start(index_dir, port, log)
    try:
        posted = httpx.post(
            f"{base}/api/documents",
            files={"file": ("eu-004.pdf", pdf.read_bytes(), "application/pdf")},
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=60,
        )
        assert posted.status_code == 202, posted.text
        job = posted.json()["job"]
        deadline = time.monotonic() + 300
        status = {}
        while time.monotonic() < deadline:
            status = httpx.get(f"{base}/api/jobs/{job}", timeout=10).json()
            if status["pages_done"] >= 2 or status["state"] in ("done", "failed"):
                break
            time.sleep(0.05)
        assert status["state"] == "running" and 2 <= status["pages_done"] < 7, status
        os.kill(server.pid, signal.SIGKILL)
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()

    with VisualIndex.open(index_dir, readonly=True) as index:
        report = index.verify()
        assert report.ok, report.problems
        (document,) = index.documents()
        committed = len(index.store.page_ids(document.doc_id))
        assert not document.complete and 2 <= committed < 7

    server = start(index_dir, port, log)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            status = httpx.get(f"{base}/api/jobs/{job}", timeout=10).json()
            if status["state"] in ("done", "failed"):
                break
            time.sleep(0.3)
        assert status["state"] == "done" and status["resumed"] is True, status
        assert status["pages_done"] == status["pages_total"] == 7
        assert httpx.get(f"{base}/api/verify", timeout=60).json()["ok"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    with VisualIndex.open(index_dir, readonly=True) as index:
        ids = index.store.page_ids()
        assert len(ids) == len(set(ids)) == 7
        assert index.documents()[0].complete


FINANCE = '{"team": "finance"}'
THREE_PAGE_PDFS = ("us-039", "us-038", "eu-006", "us-016", "us-040")  # one runs, four wait


def post(base: str, pdf: Path, metadata: str) -> httpx.Response:
    return httpx.post(
        f"{base}/api/documents",
        files={"file": (pdf.name, pdf.read_bytes(), "application/pdf")},
        data={"metadata": metadata},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )


def job_states(base: str, jobs: list[str]) -> list[dict]:
    return [httpx.get(f"{base}/api/jobs/{job}", timeout=10).json() for job in jobs]


@pytest.mark.slow
def test_kill_9_with_queued_uploads_keeps_their_metadata_and_job_ids(shared_data, tmp_path):
    """Issue 32.1 and 32.10: uploads with metadata, kill -9 while one runs and the rest
    wait; after the restart the resumed uploads carried no metadata (of six uploads, a filter
    found 6 of 18 pages), the finished job's id answered 404, and an upload refused for a NaN
    in its metadata was indexed. Now every page carries its metadata and every job id answers."""
    pdfs = shared_data / "pdfs" / "icdar2013"
    index_dir = empty_index(tmp_path / "queued.vrag")
    port, log = free_port(), tmp_path / "server.log"
    base = f"http://127.0.0.1:{port}"
    server = start(index_dir, port, log)
    try:
        first = post(base, pdfs / "us-032.pdf", FINANCE).json()["job"]  # 1 page, done before
        deadline = time.monotonic() + 300
        while job_states(base, [first])[0]["state"] != "done" and time.monotonic() < deadline:
            time.sleep(0.2)
        nan = post(base, pdfs / "us-005.pdf", '{"team": "finance", "score": NaN}')
        assert nan.status_code == 422, nan.text
        jobs = [post(base, pdfs / f"{name}.pdf", FINANCE).json()["job"] for name in THREE_PAGE_PDFS]
        while time.monotonic() < deadline:
            states = job_states(base, jobs)
            if states[0]["pages_done"] >= 1 or states[0]["state"] != "queued":
                break
            time.sleep(0.05)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()
    assert [s["state"] for s in states[-4:]] == ["queued"] * 4, states  # they had to wait

    server = start(index_dir, port, log)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            states = job_states(base, [first, *jobs])
            if all(s["state"] in ("done", "failed") for s in states):
                break
            time.sleep(0.3)
        assert [s["state"] for s in states] == ["done"] * 6, states
        assert states[0]["resumed"] is False and states[0]["pages_done"] == 1
        assert all(s["resumed"] and s["pages_done"] == 3 for s in states[1:]), states
        found = httpx.get(
            f"{base}/api/search", params={"q": "table", "k": 50, "filter": "team=finance"}
        ).json()["hits"]
        assert len(found) == 16  # 1 + 5 x 3: every page with the metadata it was sent with
        names = {d["filename"] for d in httpx.get(f"{base}/api/documents").json()["documents"]}
        assert "us-005.pdf" not in names and len(names) == 6  # the refused upload never indexed
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
