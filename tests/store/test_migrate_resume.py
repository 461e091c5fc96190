"""`vrag migrate` killed with SIGKILL mid-copy, then run again with the same command: the copy
resumes and ends with every page of the source exactly once (ids, metadata, vectors), into an
embedded store and into Qdrant's local mode. Existing stores a migration did not leave
unfinished are refused, so a migration never writes into someone else's store."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from vrag_compress.store import DocumentRecord, LocalStore, PageRecord
from vrag_compress.store.local.catalog import CATALOG_NAME
from vrag_compress.store.open import open_store

# find_spec, not importorskip: collecting this module (in every pytest-xdist worker) then costs
# no qdrant-client import; the tests import the Qdrant store where they use it
if importlib.util.find_spec("qdrant_client") is None:
    pytest.skip("could not import 'qdrant_client'", allow_module_level=True)

pytestmark = [pytest.mark.e2e, pytest.mark.crash]  # `vrag migrate` processes, one killed mid-copy

PAGES = 120
CONFIG = {"dim": 16, "model_id": "tiny/col"}
ROOT = Path(__file__).resolve().parents[2]


def _source(folder: Path) -> Path:
    """An embedded store of PAGES pages in 12 documents, with metadata and text."""
    rng = np.random.default_rng(7)
    pages = []
    for i in range(PAGES):
        vectors = rng.normal(size=(6 + i % 5, 16)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        meta = {"n": i % 7, "lang": ["en", "de"][i % 2], "title": f"page {i}"}
        pages.append(PageRecord(f"p{i:04d}", f"d{i // 10}", i % 10 + 1, vectors, meta))
    documents = [
        DocumentRecord(f"d{d}", source=f"/docs/{d}.pdf", n_pages=10, complete=True)
        for d in range(PAGES // 10)
    ]
    with LocalStore.create(folder, CONFIG) as store:
        store.add(pages, documents=documents)
    return folder


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}


def _migrate(src: Path, dst: str, report: Path, batch: int = 1) -> list[str]:
    """The command; one page a batch (many commits) where a run is killed or resumed."""
    args = ["migrate", str(src), dst, "--batch", str(batch), "--verify-queries", "5"]
    return [*args, "--json", str(report)]


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """A `vrag` command that is not killed, run in this process (the killed ones are real
    processes): its exit status and what it wrote to stderr."""
    from typer.testing import CliRunner

    from vrag_compress.cli import app

    done = CliRunner().invoke(app, args)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return subprocess.CompletedProcess(args, done.exit_code, done.stdout, done.stderr)


def _committed(store: Path) -> int:
    """Pages the migration committed so far, read from the catalog while it writes."""
    if not (store / CATALOG_NAME).is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{store / CATALOG_NAME}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT count(*) FROM pages").fetchone()[0])
    except sqlite3.Error:
        return 0


def _same_pages(src: Path, dst: str) -> None:
    """Every page of the source once in the destination, with its metadata and vectors, and
    the same document rows."""
    with open_store(str(src), readonly=True) as a, open_store(dst, readonly=True) as b:
        ids = a.page_ids()
        assert sorted(b.page_ids()) == sorted(ids) and b.count() == PAGES
        for mine, theirs in zip(a.get(ids), b.get(ids), strict=True):
            assert (theirs.page_id, theirs.doc_id, theirs.page_no) == (
                mine.page_id,
                mine.doc_id,
                mine.page_no,
            )
            assert theirs.metadata == mine.metadata
            np.testing.assert_array_equal(theirs.vectors, mine.vectors)
        assert b.documents() == a.documents()
        assert b.config["migration"] == {"from": str(src.resolve()), "complete": True}


def test_a_killed_migration_into_an_embedded_store_resumes_exactly_once(tmp_path: Path) -> None:
    src, dst = _source(tmp_path / "src"), tmp_path / "dst"
    command = [sys.executable, "-m", "vrag_compress", *_migrate(src, str(dst), tmp_path / "a")]
    process = subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _committed(dst) < 5:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no page was copied"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)  # no cleanup of any kind, whatever it was doing
    process.communicate()
    at_kill = _committed(dst)
    assert 5 <= at_kill < PAGES and not (tmp_path / "a").exists()

    again = _run(_migrate(src, str(dst), tmp_path / "b"))  # the same command
    assert again.returncode == 0, again.stderr
    report = json.loads((tmp_path / "b").read_text())
    assert report["ok"] and report["pages_resumed"] == at_kill
    assert report["pages_copied"] == PAGES - at_kill
    assert f"resuming: {at_kill} of {PAGES} pages are already in {dst}" in again.stderr
    assert "copying pages" in again.stderr  # the progress bar
    _same_pages(src, str(dst))
    with LocalStore.open(dst, readonly=True) as copy:
        assert copy.verify().ok


DIE_IN_THIRD_BATCH = """
import os, signal, sys
from vrag_compress.store.qdrant.store import QdrantStore

real, calls = QdrantStore.upsert, []

def dying(self, pages, documents=()):
    calls.append(1)
    if len(calls) == 3:  # half of this batch reaches Qdrant, then the process is killed
        real(self, pages[: len(pages) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, pages, documents)

QdrantStore.upsert = dying
from vrag_compress.cli import main
sys.argv = ["vrag", *sys.argv[1:]]
main()
"""


def test_a_migration_killed_mid_batch_into_qdrant_resumes_exactly_once(tmp_path: Path) -> None:
    src = _source(tmp_path / "src")
    url = f"qdrant+local://{tmp_path / 'q'}?collection=pages"
    args = _migrate(src, url, tmp_path / "a")
    args[args.index("--batch") + 1] = "8"
    script = [sys.executable, "-c", textwrap.dedent(DIE_IN_THIRD_BATCH), *args]
    killed = subprocess.run(script, env=_env(), capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with open_store(url, readonly=True) as partial:
        assert partial.count() == 2 * 8 + 4  # two whole batches and half of the third
        # the source's document rows go last: until then no document is marked complete
        assert not any(doc.complete for doc in partial.documents())

    again = _run(args)  # the same command
    assert again.returncode == 0, again.stderr
    report = json.loads((tmp_path / "a").read_text())
    assert report["ok"] and report["pages_resumed"] == 20 and report["pages_copied"] == PAGES - 20
    _same_pages(src, url)


def test_a_store_the_migration_did_not_leave_unfinished_is_refused(tmp_path: Path) -> None:
    src = _source(tmp_path / "src")
    other = tmp_path / "other"
    with LocalStore.create(other, CONFIG) as store:
        store.add([PageRecord("x", "dx", 1, np.ones((2, 16), np.float32))])
    refused = _run(_migrate(src, str(other), tmp_path / "r", batch=64))
    assert refused.returncode == 1
    assert "already exists and is not an empty directory" in " ".join(refused.stderr.split())
    with LocalStore.open(other, readonly=True) as store:
        assert store.page_ids() == ["x"]  # untouched

    dst = str(tmp_path / "dst")
    assert _run(_migrate(src, dst, tmp_path / "r", batch=64)).returncode == 0
    finished = _run(_migrate(src, dst, tmp_path / "r", batch=64))
    assert finished.returncode == 1
    assert "already holds a finished migration" in " ".join(finished.stderr.split())

    elsewhere = _source(tmp_path / "elsewhere")
    crossed = _run(_migrate(elsewhere, dst, tmp_path / "r", batch=64))
    assert crossed.returncode == 1
    assert f"a migration from {src.resolve()}" in " ".join(crossed.stderr.split())
