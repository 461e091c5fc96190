"""`vrag serve` REST API through FastAPI's TestClient, on a real tiny-colqwen2 index.

Covers the contract paths and JSON keys, background uploads, errors as JSON, and the security
rules: keys on writes, path escapes, sanitised names, size and page limits, CORS, headers.
"""

from __future__ import annotations

import json
import shutil
import time
import unicodedata
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image
from typer.testing import CliRunner

from vrag_compress import VisualIndex
from vrag_compress.cli import app as cli
from vrag_compress.serve import ServeConfig, create_app, is_loopback
from vrag_compress.serve.guards import public_hit
from vrag_compress.serve.jobs import safe_filename

KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def pdfs(shared_data: Path) -> dict[str, Path]:
    return {
        "scotus": shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf",
        "multi": shared_data / "pdfs" / "edge" / "multi_page.pdf",
        "big": shared_data / "pdfs" / "edge" / "base64image.pdf",
        "small": shared_data / "pdfs" / "gov" / "senate-expenditures.pdf",
    }


@pytest.fixture(scope="module")
def built(law_index: Path) -> Path:
    """A SAP index of the court transcript (team=law): the session's `law_index`, the very
    index this module used to build for itself; each test serves a fresh copy of it."""
    return law_index


@pytest.fixture()
def index_dir(built, tmp_path) -> Path:
    path = tmp_path / "served.vrag"
    shutil.copytree(built, path)
    return path


BASE = "http://127.0.0.1:8000"  # the server answers only to its own host names


def serve(index_dir: Path, **options) -> TestClient:
    options.setdefault("api_key", KEY)
    options.setdefault("ocr", "never")
    return TestClient(create_app(ServeConfig(index_dir, **options)), base_url=BASE)


def wait_for(client: TestClient, job: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get(f"/api/jobs/{job}").json()
        assert status["state"] in ("queued", "running", "done", "failed")
        if status["state"] in ("done", "failed"):
            return status
        time.sleep(0.2)
    raise AssertionError(f"job {job} did not finish: {status}")


def test_search_returns_the_cli_hit_json(index_dir):
    with serve(index_dir) as client:
        body = client.get("/api/search", params={"q": "oral argument", "k": 3}).json()
        cli_run = CliRunner().invoke(cli, ["search", str(index_dir), "oral argument", "--json"])
    cli_hits = json.loads(cli_run.stdout[cli_run.stdout.index("{") :])["hits"]
    assert body["query"] == "oral argument"
    root = index_dir.resolve()
    # same keys, values and order; only the server's absolute paths are left out
    assert body["hits"] == [public_hit(h, root) for h in cli_hits]
    (hit,) = body["hits"]
    assert hit["page_no"] == 1 and hit["metadata"]["team"] == "law" and hit["regions"]
    assert hit["source"] == hit["metadata"]["source"] == "scotus-transcript-p1.pdf"
    assert hit["image_path"].startswith("images/") and str(root) not in json.dumps(body)


def test_search_filter_mode_and_errors_are_json(index_dir):
    with serve(index_dir) as client:
        found = client.get("/api/search", params={"q": "court", "filter": "team=law"}).json()
        none = client.get("/api/search", params={"q": "court", "filter": '{"team": "x"}'}).json()
        assert len(found["hits"]) == 1 and none["hits"] == []
        exact = client.get("/api/search", params={"q": "court", "mode": "exact"})
        assert exact.status_code == 200
        hybrid = client.get("/api/search", params={"q": "court", "mode": "hybrid", "alpha": 0.5})
        assert set(hybrid.json()["hits"][0]["components"]) <= {"visual", "text"}
        assert client.get("/api/search", params={"q": "court", "alpha": 0.5}).status_code == 400
        bad_mode = client.get("/api/search", params={"q": "court", "mode": "fast"})
        assert bad_mode.status_code == 400 and "mode must be one of" in bad_mode.json()["error"]
        bad_filter = client.get("/api/search", params={"q": "court", "filter": "{oops"})
        assert bad_filter.status_code == 400
        assert bad_filter.json()["error"].startswith("invalid JSON filter")
        missing = client.get("/api/search")
        assert missing.status_code == 422 and "q" in missing.json()["error"]
        too_many = client.get("/api/search", params={"q": "court", "k": 1000})
        assert too_many.status_code == 400 and "limit of 100" in too_many.json()["error"]


def test_page_image_thumbnail_and_explanation(index_dir):
    with serve(index_dir) as client:
        (hit,) = client.get("/api/search", params={"q": "court"}).json()["hits"]
        page = f"/api/pages/{hit['page_id']}"
        image = client.get(f"{page}/image")
        assert image.status_code == 200 and image.headers["content-type"] == "image/webp"
        assert image.content == (index_dir / hit["image_path"]).read_bytes()
        thumb = client.get(f"{page}/image", params={"max_side": 64})
        assert max(Image.open(__import__("io").BytesIO(thumb.content)).size) == 64
        why = client.get(f"{page}/explain", params={"q": "court"}).json()
        assert why["score"] == pytest.approx(hit["score"], abs=1e-3)
        assert why["layout"] == "kept" and why["overlay"]["kept"] and why["regions"]
        assert len(why["heat"]) == why["grid"][0] and len(why["heat"][0]) == why["grid"][1]
        assert sum(t["contribution"] for t in why["tokens"]) == pytest.approx(why["score"], 1e-4)
        png = client.get(f"{page}/explain", params={"q": "court", "format": "png"})
        assert png.headers["content-type"] == "image/png" and png.content[:4] == b"\x89PNG"
        gone = client.get("/api/pages/nope:1/image")
        assert gone.status_code == 404 and gone.json()["error"].startswith("no page 'nope:1'")


def test_info_documents_verify(index_dir):
    with serve(index_dir) as client:
        info = client.get("/api/info").json()
        assert info["pages"] == 1 and info["model_id"] == "tiny-colqwen2"
        assert info["server"] == {
            "llm": False,
            "writes_enabled": True,
            "reads_need_key": False,
            "max_upload_mb": 50.0,
            "max_pages": 300,
            "max_k": 100,
            "workers": 1,
            "indexes_uploads": True,
        }
        (doc,) = client.get("/api/documents").json()["documents"]
        assert doc["filename"] == "scotus-transcript-p1.pdf" and doc["complete"]
        assert client.get("/api/verify").json() == {"ok": True, "pages": 1, "problems": []}


def test_upload_indexes_in_the_background_and_delete_removes_it(index_dir, pdfs):
    with serve(index_dir) as client:
        with open(pdfs["multi"], "rb") as f:
            posted = client.post(
                "/api/documents",
                files={"file": ("multi page.pdf", f, "application/pdf")},
                data={"metadata": '{"team": "ops"}'},
                headers=AUTH,
            )
        assert posted.status_code == 202
        job = posted.json()["job"]
        status = wait_for(client, job)
        assert status["state"] == "done" and status["failures"] == []
        assert status["pages_done"] == status["pages_total"] == 5
        hits = client.get("/api/search", params={"q": "x", "k": 10, "filter": "team=ops"})
        assert sorted(h["page_no"] for h in hits.json()["hits"]) == [1, 2, 3, 4, 5]
        doc_id = status["doc_id"]
        upload = index_dir / "uploads" / job / "multi page.pdf"
        assert upload.is_file()
        again = client.post(
            "/api/documents", files={"file": ("copy.pdf", upload.read_bytes())}, headers=AUTH
        )
        assert wait_for(client, again.json()["job"])["pages_done"] == 5  # unchanged: skipped
        copy = index_dir / "uploads" / again.json()["job"]
        assert [p.name for p in copy.iterdir()] == [".job.json"]  # the copy is not kept
        deleted = client.delete(f"/api/documents/{doc_id}", headers=AUTH)
        assert deleted.json() == {"doc_id": doc_id, "pages_deleted": 5}
        assert not upload.parent.exists()
        missing = client.delete(f"/api/documents/{doc_id}", headers=AUTH)
        assert missing.status_code == 404
        assert missing.json()["error"] == f"no document {doc_id!r} in {index_dir.name}"
        assert client.get("/api/jobs/unknown").status_code == 404
        assert client.get("/api/verify").json()["ok"]


def test_writes_need_the_key(index_dir, pdfs):
    payload = {"file": ("a.pdf", pdfs["scotus"].read_bytes())}
    with serve(index_dir) as client:
        assert client.post("/api/documents", files=payload).status_code == 401
        wrong = client.post("/api/documents", files=payload, headers={"Authorization": "Bearer x"})
        assert wrong.status_code == 401 and "API key" in wrong.json()["error"]
        assert client.delete("/api/documents/c63508c7b195e6b6").status_code == 401
    with serve(index_dir, api_key=None) as client:  # no key configured: writes are off
        refused = client.post("/api/documents", files=payload, headers=AUTH)
        assert refused.status_code == 403 and "--api-key" in refused.json()["error"]
        assert client.get("/api/search", params={"q": "court"}).status_code == 200
    with serve(index_dir, reads_need_key=True) as client:  # non-loopback binds
        assert client.get("/api/search", params={"q": "court"}).status_code == 401
        assert client.get("/api/info", headers=AUTH).status_code == 200
        assert client.get("/").status_code == 200  # the page itself holds no data


def test_uploads_are_limited_and_names_sanitised(index_dir, pdfs, tmp_path):
    with serve(index_dir, max_upload_mb=0.5, max_pages=3) as client:
        big = client.post(
            "/api/documents", files={"file": ("big.pdf", pdfs["big"].read_bytes())}, headers=AUTH
        )
        assert big.status_code == 413 and "--max-upload-mb" in big.json()["error"]
        long = client.post(
            "/api/documents", files={"file": ("m.pdf", pdfs["multi"].read_bytes())}, headers=AUTH
        )
        assert long.status_code == 413
        assert (
            long.json()["error"]
            == "m.pdf has 5 pages; this server takes at most 3 per upload (--max-pages)"
        )
        exe = client.post("/api/documents", files={"file": ("run.sh", b"#!/bin/sh")}, headers=AUTH)
        assert exe.status_code == 415 and "unsupported file type" in exe.json()["error"]
        broken = client.post(
            "/api/documents", files={"file": ("b.pdf", b"%PDF-1.4 junk")}, headers=AUTH
        )
        assert broken.status_code == 422 and broken.json()["error"].startswith("b.pdf: ")
        assert str(index_dir) not in broken.json()["error"]  # no server paths in errors
        escape = client.post(
            "/api/documents",
            files={
                "file": (
                    "../../../etc/<img src=x onerror=alert(1)>.pdf",
                    pdfs["small"].read_bytes(),
                )
            },
            headers=AUTH,
        )
        assert escape.status_code == 202
        name = escape.json()["filename"]
        assert name == "_img src=x onerror=alert(1)_.pdf"
        assert (index_dir / "uploads" / escape.json()["job"] / name).is_file()
        assert wait_for(client, escape.json()["job"])["state"] == "done"
    leftovers = [p for p in (index_dir / "uploads").iterdir()]
    assert len(leftovers) == 1  # refused uploads leave nothing behind


def test_no_path_escape_or_directory_listing(index_dir):
    with serve(index_dir) as client:
        for url in (
            "/static/..%2F..%2Fpyproject.toml",
            "/static/index.html",  # served at / only
            "/static/",
            "/uploads/",
            "/images/",
            "/catalog.sqlite",
            "/api/pages/..%2F..%2Fcatalog.sqlite/image",
            "/api/pages/%2Fetc%2Fpasswd/image",
            "/docs-assets/..%2F__init__.py",
        ):
            response = client.get(url)
            assert response.status_code == 404, url
            assert response.headers["content-type"].startswith("application/json"), url


def test_page_headers_cors_and_docs(index_dir):
    with serve(index_dir) as client:
        page = client.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert 'src="http' not in page.text and "cdn" not in page.text.lower()
        script = client.get("/static/app.js")
        assert script.status_code == 200 and "innerHTML" not in script.text
        cross = client.get("/api/info", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in cross.headers
        docs = client.get("/docs")
        assert docs.status_code == 200 and "/docs-assets/swagger-ui-bundle.js" in docs.text
        assert client.get("/docs-assets/swagger-ui-bundle.js").status_code == 200
        schema = client.get("/openapi.json").json()
        assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
        paths = schema["paths"]
        for path in (
            "/api/search",
            "/api/pages/{page_id}/image",
            "/api/pages/{page_id}/explain",
            "/api/documents",
            "/api/documents/{doc_id}",
            "/api/jobs/{job_id}",
            "/api/info",
            "/api/verify",
            "/api/ask",
        ):
            assert path in paths, path
    with serve(index_dir, cors_origins=["http://app.example"]) as client:
        allowed = client.get("/api/info", headers={"Origin": "http://app.example"})
        assert allowed.headers["access-control-allow-origin"] == "http://app.example"


def test_ask_streams_the_answer_with_citations(index_dir):
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_vrag_compress import LangChainChatModel

    with serve(index_dir) as client:
        refused = client.post("/api/ask", json={"question": "who argued?"})
        assert refused.status_code == 400 and "no LLM configured" in refused.json()["error"]
    model = GenericFakeChatModel(messages=iter([AIMessage("Mercer argued [1].")]))
    app = create_app(ServeConfig(index_dir, ocr="never"), chat_model=LangChainChatModel(model))
    with TestClient(app, base_url=BASE) as client:
        assert client.get("/api/info").json()["server"]["llm"] is True
        with client.stream("POST", "/api/ask", json={"question": "who argued?", "k": 1}) as r:
            assert r.headers["content-type"] == "application/x-ndjson"
            events = [json.loads(line) for line in r.iter_lines() if line]
        assert events[0]["type"] == "citations"
        (cited,) = events[0]["citations"]
        assert cited["page_no"] == 1 and cited["regions"] and cited["page_id"]
        tokens = [e["text"] for e in events if e["type"] == "token"]
        assert len(tokens) > 1 and "".join(tokens) == "Mercer argued [1]."
        assert events[-1] == {"type": "done", "answer": "Mercer argued [1]."}
        bad = client.post("/api/ask", json={"question": ""})
        assert bad.status_code == 422 and "question" in bad.json()["error"]


def test_non_loopback_binds_need_a_key(index_dir, monkeypatch):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.20")
    monkeypatch.delenv("VRAG_API_KEY", raising=False)
    result = CliRunner().invoke(cli, ["serve", str(index_dir), "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "--api-key" in result.output


def test_the_offline_default_encoder_serves_a_new_index(tmp_path, pdfs):
    """`vrag serve DIR` on a new folder: `auto` falls back to the offline MiniLM page-text
    encoder here (no Col* weights); create, upload, search, explain."""
    index_dir = tmp_path / "minilm.vrag"
    with serve(index_dir) as client:
        info = client.get("/api/info").json()
        assert info["pages"] == 0 and info["model_id"] == "minilm"
        with open(pdfs["scotus"], "rb") as f:
            job = client.post("/api/documents", files={"file": ("t.pdf", f)}, headers=AUTH)
        assert wait_for(client, job.json()["job"])["state"] == "done"
        (hit,) = client.get("/api/search", params={"q": "supreme court argument"}).json()["hits"]
        assert hit["metadata"]["filename"] == "t.pdf" and hit["regions"] == []
        why = client.get(f"/api/pages/{hit['page_id']}/explain", params={"q": "court"}).json()
        assert why["layout"] is None and why["heat"] is None and why["tokens"]
        assert any(t["label"] and "court" in t["label"] for t in why["tokens"])
        png = client.get(f"/api/pages/{hit['page_id']}/explain", params={"q": "c", "format": "png"})
        assert png.status_code == 404 and "no patch layout" in png.json()["error"]


def test_unicode_upload_names_are_kept(index_dir, pdfs):
    """Issue 32.10: `ünï 文档 😀.pdf` came back as `_n_ _ _.pdf`."""
    decomposed = unicodedata.normalize("NFD", "ünï 文档 😀.pdf")
    with serve(index_dir) as client:
        posted = client.post(
            "/api/documents",
            files={"file": (decomposed, pdfs["small"].read_bytes())},
            headers=AUTH,
        )
        assert posted.status_code == 202, posted.text
        assert posted.json()["filename"] == "ünï 文档 😀.pdf"  # NFC
        assert wait_for(client, posted.json()["job"])["state"] == "done"
        names = {d["filename"] for d in client.get("/api/documents").json()["documents"]}
        assert "ünï 文档 😀.pdf" in names
    assert (index_dir / "uploads" / posted.json()["job"] / "ünï 文档 😀.pdf").is_file()


def test_safe_filename_strips_folders_and_controls_only():
    assert safe_filename("../..\\etc/Ärger\x00\x1b[31m\u202e.PDF") == "Ärger[31m.pdf"
    assert safe_filename("..") == "upload" and safe_filename(".hidden.pdf") == "hidden.pdf"
    long = safe_filename("文" * 300 + ".pdf")
    assert long.endswith("文.pdf") and len(long.encode()) <= 200


def test_upload_metadata_is_checked_before_anything_is_kept(index_dir, pdfs):
    """Issue 32.1: an upload with a NaN in its metadata was accepted (202), failed, and was
    indexed without metadata after a restart. It is refused at once, and nothing is kept."""
    with serve(index_dir) as client:
        for text in ('{"score": NaN}', '{"x": Infinity}'):
            refused = client.post(
                "/api/documents",
                files={"file": ("n.pdf", pdfs["small"].read_bytes())},
                data={"metadata": text},
                headers=AUTH,
            )
            assert refused.status_code == 422, refused.text
            assert "finite number" in refused.json()["error"]
    assert not list((index_dir / "uploads").glob("*/*"))


def test_foreign_host_names_are_refused(index_dir):
    """Issue 32.4, DNS rebinding: a page on attacker.example whose name resolves to 127.0.0.1
    read /api/documents (with absolute source paths) because any Host was accepted."""
    with serve(index_dir) as client:
        for host in ("attacker.example:8765", "attacker.example", "localhost.attacker.example"):
            for path in ("/api/documents", "/", "/api/search?q=court"):
                refused = client.get(path, headers={"Host": host})
                assert refused.status_code == 400, (host, path)
                assert "--allowed-host" in refused.json()["error"]
        bad_post = client.post("/api/documents", headers={"Host": "attacker.example", **AUTH})
        assert bad_post.status_code == 400
        for host in ("localhost:8765", "127.0.0.1", "[::1]:8000", "LOCALHOST.", "10.1.2.3:80"):
            assert client.get("/api/documents", headers={"Host": host}).status_code == 200, host
        (doc,) = client.get("/api/documents").json()["documents"]
        assert doc["source"] == "scotus-transcript-p1.pdf"  # never the server's absolute path
        assert not Path(client.get("/api/info").json()["path"]).is_absolute()
    with serve(index_dir, host="vrag.lan", allowed_hosts=["search.example.com"]) as client:
        for host in ("vrag.lan:8000", "search.example.com"):
            assert client.get("/api/documents", headers={"Host": host}).status_code == 200
        assert client.get("/api/documents", headers={"Host": "x.example"}).status_code == 400


def test_uploaded_documents_show_paths_inside_the_index(index_dir, pdfs):
    with serve(index_dir) as client:
        posted = client.post(
            "/api/documents", files={"file": ("s.pdf", pdfs["small"].read_bytes())}, headers=AUTH
        )
        job = posted.json()["job"]
        assert wait_for(client, job)["state"] == "done"
        sources = {d["source"] for d in client.get("/api/documents").json()["documents"]}
        assert f"uploads/{job}/s.pdf" in sources
        hits = client.get("/api/search", params={"q": "x", "k": 5}).json()["hits"]
        assert {h["source"] for h in hits} <= sources
        assert str(index_dir.resolve()) not in json.dumps(hits)


def test_unauthenticated_and_oversized_bodies_are_refused_before_reading(index_dir):
    """Issue 32.3 in process: the key and the declared size are checked before the body."""
    with serve(index_dir, max_upload_mb=1) as client:
        payload = {"file": ("a.pdf", b"%PDF" + b"0" * 2**20 * 2)}
        assert client.post("/api/documents", files=payload).status_code == 401
        too_big = client.post("/api/documents", files=payload, headers=AUTH)
        assert too_big.status_code == 413 and "--max-upload-mb" in too_big.json()["error"]
        declared = client.post(
            "/api/documents", content=b"x", headers={**AUTH, "Content-Length": "99999999"}
        )
        assert declared.status_code == 413


def test_restart_answers_finished_jobs_and_resumes_with_the_metadata(index_dir, pdfs):
    """Issues 32.10 and 32.1 without a real kill: a finished job's id answered 404 after a
    restart, and a resumed upload lost its metadata. The unfinished upload is made by putting
    its record back to "queued" and deleting its pages, as a kill before the commit leaves it."""
    with serve(index_dir) as client:
        jobs = []
        for name, team in (("multi", "ops"), ("small", "finance")):
            posted = client.post(
                "/api/documents",
                files={"file": (f"{name}.pdf", pdfs[name].read_bytes())},
                data={"metadata": json.dumps({"team": team})},
                headers=AUTH,
            )
            jobs.append(posted.json())
            assert wait_for(client, jobs[-1]["job"])["state"] == "done"
    record = index_dir / "uploads" / jobs[1]["job"] / ".job.json"
    record.write_text(record.read_text().replace('"state": "done"', '"state": "queued"'))
    with VisualIndex.open(index_dir) as index:
        assert index.delete(jobs[1]["doc_id"]) == 1
    with serve(index_dir) as client:
        finished = client.get(f"/api/jobs/{jobs[0]['job']}").json()
        assert finished["state"] == "done" and finished["pages_done"] == 5
        assert not finished["resumed"]
        resumed = wait_for(client, jobs[1]["job"])
        assert resumed["state"] == "done" and resumed["resumed"] and resumed["pages_done"] == 1
        hits = client.get("/api/search", params={"q": "x", "filter": "team=finance"}).json()
        assert [h["doc_id"] for h in hits["hits"]] == [jobs[1]["doc_id"]]


def test_cli_passes_the_bound_and_allowed_host_names(index_dir, monkeypatch):
    import uvicorn

    import vrag_compress.serve as serve_module

    seen: dict = {}
    monkeypatch.setattr(serve_module, "create_app", lambda config: seen.setdefault("c", config))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: seen.setdefault("run", kwargs))
    args = ["serve", str(index_dir), "--host", "localhost", "--port", "8765"]
    result = CliRunner().invoke(cli, [*args, "--allowed-host", "a.example", "--allowed-host", "b"])
    assert result.exit_code == 0, result.output
    assert seen["c"].host == "localhost" and seen["c"].allowed_hosts == ["a.example", "b"]
    assert seen["run"]["port"] == 8765
