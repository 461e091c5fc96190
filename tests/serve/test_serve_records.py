"""Hostile or broken upload records (``uploads/<job>/.job.json``) against `vrag serve` (issue 49,
findings 4 and 5): a record the server cannot use is left as it is, answers ``failed`` with the
reason, and neither stops the server from starting nor the writer from indexing later uploads;
``GET /api/jobs/{job}`` never answers 500."""

from __future__ import annotations

import io
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from vrag_compress import VisualIndex
from vrag_compress.cli import app as cli
from vrag_compress.serve import ServeConfig, create_app
from vrag_compress.serve.jobs import RECORD, Job
from vrag_compress.testing import WordEncoder

KEY = "records-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
BASE = "http://127.0.0.1"
DEEP = 200_000


def png(encoder: WordEncoder, text: str) -> bytes:
    buffer = io.BytesIO()
    encoder.page_image(text).save(buffer, "PNG")
    return buffer.getvalue()


def drop_record(index_dir: Path, job_id: str, text: str, page: bytes = b"") -> Path:
    """An upload folder as a crash, an older version or a hand edit could leave it."""
    folder = index_dir / "uploads" / job_id
    folder.mkdir(parents=True, exist_ok=True)
    if page:
        (folder / "page.png").write_bytes(page)
    (folder / RECORD).write_text(text)
    return folder


def record(**fields: Any) -> str:
    """A queued record as the server writes one, with ``fields`` changed (NaN is kept)."""
    base = {
        "job": "x",
        "filename": "page.png",
        "doc_id": "some-doc",
        "n_pages": 1,
        "metadata": {},
        "options": {"ocr": "never"},
        "state": "queued",
        "pages_done": 0,
        "failures": [],
        "error": None,
    }
    return json.dumps({**base, **fields})


def deep_record() -> str:
    return '{"job": "x", "metadata": {"a": ' + "[" * DEEP + "]" * DEEP + "}}"


def wait_for(client: TestClient, job: str, timeout: float = 30) -> dict:
    status: dict = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = client.get(f"/api/jobs/{job}")
        assert answer.status_code == 200, answer.text[:300]
        status = answer.json()
        if status["state"] in ("done", "failed"):
            return status
        time.sleep(0.1)
    raise AssertionError(f"job {job} did not finish: {status}")


def upload(client: TestClient, encoder: WordEncoder, text: str) -> str:
    files = {"file": ("page.png", png(encoder, text), "image/png")}
    posted = client.post("/api/documents", files=files, headers=AUTH)
    assert posted.status_code == 202, posted.text
    return posted.json()["job"]


@pytest.fixture()
def word_index(tmp_path: Path) -> tuple[Path, WordEncoder]:
    encoder = WordEncoder()
    path = tmp_path / "words.vrag"
    VisualIndex.create(path, encoder=encoder, compressor="identity").close()
    return path, encoder


def serve(index_dir: Path, encoder: WordEncoder, workers: int = 1) -> TestClient:
    config = ServeConfig(index_dir, api_key=KEY, ocr="never", workers=workers)
    return TestClient(create_app(config, encoder=encoder), base_url=BASE)


def test_one_worker_survives_a_queued_record_with_nan_metadata(word_index):
    """Before: the NaN job failed, recording its end raised ValueError and the writer thread
    died, so every later upload stayed "queued" while the server answered 202."""
    index_dir, encoder = word_index
    page = png(encoder, "nan page")
    drop_record(index_dir, "0123456789ab", record(metadata={"x": float("nan")}), page)
    with serve(index_dir, encoder) as client:
        bad = wait_for(client, "0123456789ab")
        assert bad["state"] == "failed" and "finite" in bad["error"], bad
        assert wait_for(client, upload(client, encoder, "later court"))["state"] == "done"
    on_disk = (index_dir / "uploads" / "0123456789ab" / RECORD).read_text()
    assert "NaN" in on_disk  # left as it was


def test_shared_writer_survives_deep_and_empty_id_records(word_index):
    """Before, with ``--workers 2``: a 200,000-deep record or one with ``"doc_id": ""`` dropped
    into uploads/ killed the writer, and its job's status answered 500."""
    index_dir, encoder = word_index
    page = png(encoder, "bad page")
    with serve(index_dir, encoder, workers=2) as writer, serve(index_dir, encoder, 2) as reader:
        assert writer.get("/api/info").json()["server"]["indexes_uploads"]
        assert not reader.get("/api/info").json()["server"]["indexes_uploads"]
        drop_record(index_dir, "aaaaaaaaaaaa", deep_record())
        drop_record(index_dir, "bbbbbbbbbbbb", record(doc_id=""), page)
        time.sleep(1)  # the writer looks for new records every 0.3 s
        job = upload(reader, encoder, "after the bad records")
        assert wait_for(reader, job)["state"] == "done"
        for client in (writer, reader):
            deep = wait_for(client, "aaaaaaaaaaaa")
            assert deep["state"] == "failed" and "deep" in deep["error"], deep
            empty = wait_for(client, "bbbbbbbbbbbb")
            assert empty["state"] == "failed" and "doc_id" in empty["error"], empty
            assert str(index_dir.resolve()) not in json.dumps([deep, empty])


@pytest.fixture()
def law_copy(law_index: Path, tmp_path: Path) -> Path:
    path = tmp_path / "served.vrag"
    shutil.copytree(law_index, path)
    return path


def test_serve_starts_past_unreadable_records(law_copy, shared_data, monkeypatch, caplog):
    """Before: an empty, NUL-holding or 5,000-character doc_id stopped `vrag serve` with
    "Invalid value for --host: doc_id must be a non-empty str", and a 200,000-deep record with
    "error: RecursionError". Now each is left alone, logged on one line, and the server starts."""
    import uvicorn

    page = (shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf").read_bytes()
    bad = {
        "000000000001": record(doc_id="", filename="a.pdf"),
        "000000000002": record(doc_id="a\u0000b", filename="a.pdf"),
        "000000000003": record(doc_id="d" * 5000, filename="a.pdf"),
        "000000000004": deep_record(),
    }
    for job_id, text in bad.items():
        folder = drop_record(law_copy, job_id, text)
        (folder / "a.pdf").write_bytes(page)
    before = {job_id: (law_copy / "uploads" / job_id / RECORD).read_text() for job_id in bad}
    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: seen.setdefault("app", app))
    with caplog.at_level(logging.WARNING, logger="vrag_compress.serve.jobs"):
        result = CliRunner().invoke(cli, ["serve", str(law_copy), "--ocr", "never"])
    assert result.exit_code == 0, result.output
    lines = [r.getMessage() for r in caplog.records if RECORD in r.getMessage()]
    assert len(lines) == len(bad), lines
    assert all("\n" not in line and len(line) < 1000 for line in lines), lines
    with TestClient(seen["app"], base_url=BASE) as client:
        for job_id in bad:
            answer = client.get(f"/api/jobs/{job_id}")
            assert answer.status_code == 200 and answer.json()["state"] == "failed", answer.text
        assert len(client.get("/api/documents").json()["documents"]) == 1  # nothing indexed
    after = {job_id: (law_copy / "uploads" / job_id / RECORD).read_text() for job_id in bad}
    assert after == before


def test_a_job_shows_it_ended_only_after_its_record_says_so(word_index, monkeypatch):
    """Before, the writer set "done" and then wrote the record: a client that saw "done" could
    find the old record, or list the upload folder with the record's temporary beside it (a CI
    run found ``..job.json.<pid>.tmp``). Each end record is written slowly here, so the old
    order is seen every time."""
    index_dir, encoder = word_index
    write = Job.save

    def slow_save(job: Job) -> None:
        if job.finished:
            time.sleep(0.5)
        write(job)

    monkeypatch.setattr(Job, "save", slow_save)
    with serve(index_dir, encoder) as client:
        job = upload(client, encoder, "slow record")
        assert wait_for(client, job)["state"] == "done"
        folder = index_dir / "uploads" / job
        assert json.loads((folder / RECORD).read_text())["state"] == "done"
        assert sorted(p.name for p in folder.iterdir()) == [RECORD, "page.png"]
