"""`kill -9` of a real `vrag serve` process during an upload: the index verifies, and the next
start resumes the upload under the same job id at its first uncommitted page, without duplicates;
uploads queued behind it keep their metadata and job ids.

Both tests read one scenario (`crashed`): a server is started, sent uploads, killed with
SIGKILL while one of them runs and the rest wait, then started again and left to finish. Each
start of `vrag serve` is a process that imports torch and loads the model, so one kill and one
restart serve both tests instead of two of each.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from vrag_compress import VisualIndex, get_compressor
from vrag_compress.serve.process import free_port, start_server

pytestmark = [pytest.mark.e2e, pytest.mark.crash]  # a real server, killed mid-upload

KEY = "crash-test-key"
FINANCE = '{"team": "finance"}'
RUNNING = "us-017"  # 7 pages, one per batch: killed after its second page is committed
QUEUED = ("us-003", "us-009", "us-012")  # a page each: they wait behind it
PAGES = {"us-032": 1, RUNNING: 7} | dict.fromkeys(QUEUED, 1)
TLS = ssl.create_default_context()
"""One SSL context for the many polls (`httpx.get` builds one per call otherwise: 40 ms of CPU)."""


def empty_index(path: Path) -> Path:
    """A new tiny-model index the server indexes uploads into, one page per batch."""
    compressor = get_compressor("sap", ratio=0.25, layers=[0, 1])
    VisualIndex.create(path, model="tiny-colqwen2", compressor=compressor, batch_size=1).close()
    return path


def start(index_dir: Path, port: int, log: Path) -> subprocess.Popen:
    return start_server(index_dir, port, log, "--api-key", KEY, "--ocr", "never", timeout=180)


def post(base: str, pdf: Path, metadata: str) -> httpx.Response:
    return httpx.post(
        f"{base}/api/documents",
        verify=TLS,
        files={"file": (pdf.name, pdf.read_bytes(), "application/pdf")},
        data={"metadata": metadata},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )


def job_states(base: str, jobs: list[str]) -> list[dict]:
    return [httpx.get(f"{base}/api/jobs/{job}", timeout=10, verify=TLS).json() for job in jobs]


@pytest.fixture(scope="module")
def crashed(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What a kill -9 and a restart leave: a one-page upload done first, an upload refused for
    a NaN in its metadata, the 7-page upload killed while it runs (after two pages) and three
    one-page uploads queued behind it, all with metadata; what the index holds after the kill
    (read with the server dead); the jobs, searches and verification of the restarted server
    once every job finished; and the index after it stopped."""
    pdfs = shared_data / "pdfs" / "icdar2013"
    index_dir = empty_index(tmp_path_factory.mktemp("crash") / "crash.vrag")
    port, log = free_port(), index_dir.parent / "server.log"
    base = f"http://127.0.0.1:{port}"
    seen: dict[str, Any] = {}
    server = start(index_dir, port, log)
    try:
        first = post(base, pdfs / "us-032.pdf", FINANCE).json()["job"]  # 1 page, done before
        deadline = time.monotonic() + 300
        while job_states(base, [first])[0]["state"] != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
        seen["nan"] = post(base, pdfs / "us-005.pdf", '{"team": "finance", "score": NaN}')
        running = post(base, pdfs / f"{RUNNING}.pdf", FINANCE)
        assert running.status_code == 202, running.text
        jobs = [running.json()["job"]]
        jobs += [post(base, pdfs / f"{name}.pdf", FINANCE).json()["job"] for name in QUEUED]
        states: list[dict] = []
        while time.monotonic() < deadline:
            states = job_states(base, jobs)
            if states[0]["pages_done"] >= 2 or states[0]["state"] in ("done", "failed"):
                break
            time.sleep(0.05)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()
    seen |= {"first": first, "jobs": jobs, "killed": states}

    with VisualIndex.open(index_dir, readonly=True) as index:
        seen["verify"] = index.verify()
        seen["after_kill"] = {
            Path(d.source or "").name: (d.complete, len(index.store.page_ids(d.doc_id)))
            for d in index.documents()
        }

    server = start(index_dir, port, log)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            states = job_states(base, [first, *jobs])
            if all(s["state"] in ("done", "failed") for s in states):
                break
            time.sleep(0.2)
        seen["resumed"] = states
        seen["api_verify"] = httpx.get(f"{base}/api/verify", timeout=60, verify=TLS).json()
        seen["found"] = httpx.get(
            f"{base}/api/search",
            params={"q": "table", "k": 50, "filter": "team=finance"},
            verify=TLS,
        ).json()["hits"]
        listed = httpx.get(f"{base}/api/documents", verify=TLS).json()["documents"]
        seen["names"] = {d["filename"] for d in listed}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    with VisualIndex.open(index_dir, readonly=True) as index:
        seen["page_ids"] = index.store.page_ids()
        seen["complete"] = {Path(d.source or "").name: d.complete for d in index.documents()}
    return seen


@pytest.mark.slow
def test_kill_9_during_upload_verifies_and_resumes(crashed: dict[str, Any]) -> None:
    killed = crashed["killed"][0]
    assert killed["state"] == "running" and 2 <= killed["pages_done"] < 7, killed
    report = crashed["verify"]
    assert report.ok, report.problems
    complete, committed = crashed["after_kill"][f"{RUNNING}.pdf"]
    assert not complete and 2 <= committed < 7

    status = crashed["resumed"][1]  # the same job id, answered by the restarted server
    assert status["job"] == crashed["jobs"][0]
    assert status["state"] == "done" and status["resumed"] is True, status
    assert status["pages_done"] == status["pages_total"] == 7
    assert crashed["api_verify"]["ok"]
    ids = crashed["page_ids"]
    assert len(ids) == len(set(ids)) == sum(PAGES.values())  # no page indexed twice
    assert crashed["complete"][f"{RUNNING}.pdf"]


@pytest.mark.slow
def test_kill_9_with_queued_uploads_keeps_their_metadata_and_job_ids(
    crashed: dict[str, Any],
) -> None:
    """Issue 32.1 and 32.10: uploads with metadata, kill -9 while one runs and the rest
    wait; after the restart the resumed uploads carried no metadata (of six uploads, a filter
    found 6 of 18 pages), the finished job's id answered 404, and an upload refused for a NaN
    in its metadata was indexed. Now every page carries its metadata and every job id answers."""
    nan = crashed["nan"]
    assert nan.status_code == 422, nan.text
    states = crashed["killed"]
    assert [s["state"] for s in states[1:]] == ["queued"] * len(QUEUED), states  # they waited

    states = crashed["resumed"]
    assert [s["job"] for s in states] == [crashed["first"], *crashed["jobs"]]  # ids answer
    assert [s["state"] for s in states] == ["done"] * (2 + len(QUEUED)), states
    assert states[0]["resumed"] is False and states[0]["pages_done"] == 1
    assert all(s["resumed"] for s in states[1:]), states
    assert [s["pages_done"] for s in states] == list(PAGES.values()), states
    # every page with the metadata it was sent with, the resumed upload's pages included
    assert len(crashed["found"]) == sum(PAGES.values())
    names = crashed["names"]
    assert "us-005.pdf" not in names and len(names) == len(PAGES)  # the refused upload: never
