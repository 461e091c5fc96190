"""An Office file through every way in: a `vrag serve` upload, the LangChain loader, the
LlamaIndex reader and `VisualIndex.add(ray=...)`. One deck, converted once into a module cache."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ingest.test_office import FILLER, SLIDES, needs_soffice, write_pptx
from vrag_compress import VisualIndex
from vrag_compress.ingest import office

pytestmark = [pytest.mark.slow, needs_soffice]


@pytest.fixture(scope="module")
def deck(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cache = tmp_path_factory.mktemp("office-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(office.CACHE_ENV, str(cache))
        yield write_pptx(tmp_path_factory.mktemp("deck") / "deck.pptx", SLIDES)


def test_langchain_loader_reads_slides_as_pages(deck: Path) -> None:
    from langchain_vrag_compress import PDFPageLoader

    documents = list(PDFPageLoader(deck, dpi=30).lazy_load())
    assert [d.metadata["page_no"] for d in documents] == [1, 2, 3]
    assert all(d.metadata["filename"] == "deck.pptx" for d in documents)
    assert "ocelot" in documents[1].page_content and FILLER in documents[0].page_content


def test_llamaindex_reader_reads_a_deck(deck: Path) -> None:
    from llama_index.readers.vrag_compress import PDFPageReader

    [document] = PDFPageReader().load_data(deck)
    assert document.metadata["file_name"] == "deck.pptx" and document.metadata["n_pages"] == 3


def test_a_served_upload_of_a_deck_is_searchable(deck: Path, tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from vrag_compress.serve import ServeConfig, create_app

    index = tmp_path / "served.vrag"
    VisualIndex.create(index, model="minilm").close()
    config = ServeConfig(index, api_key="k", ocr="never")
    with TestClient(create_app(config), base_url="http://127.0.0.1:8000") as client:
        posted = client.post(
            "/api/documents",
            files={"file": ("deck.pptx", deck.read_bytes())},
            headers={"Authorization": "Bearer k"},
        )
        assert posted.status_code == 202, posted.text
        job = posted.json()["job"]
        deadline = time.monotonic() + 300
        while (status := client.get(f"/api/jobs/{job}").json())["state"] not in ("done", "failed"):
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        assert status["state"] == "done" and status["pages_total"] == 3, status
        hits = client.get("/api/search", params={"q": "ocelot rhubarb", "k": 1}).json()["hits"]
        assert hits[0]["page_no"] == 2 and hits[0]["source"].endswith("deck.pptx"), hits


RAY_DECK = """
import json, sys
from pathlib import Path
from vrag_compress import VisualIndex
from vrag_compress.distributed import RayOptions, connect

folder = Path(sys.argv[1])
index = VisualIndex.create(folder / "idx", model="minilm")
connect("local")  # the local Ray that `add(ray=RayOptions(address="local"))` would start
line = sys.stdin.readline().strip()  # the deck, sent once the test runs
if not line:  # the test did not run: stop (and the local Ray with this process)
    raise SystemExit(0)
deck = Path(line)
with index:
    ray = RayOptions(address="local", actors=1)  # one actor process is enough for 3 pages
    report = index.add([deck], progress=False, ray=ray, ocr="never")
    hit = index.search("ocelot rhubarb", k=1)[0]
print(json.dumps({"report": report.to_dict(), "page": hit.page_no, "source": hit.source}))
"""


@dataclass
class RayDriver:
    """The running driver script and the files its output goes to."""

    process: subprocess.Popen[str]
    stdout: Path
    stderr: Path


@pytest.fixture(scope="module", autouse=True)
def ray_driver(
    request: pytest.FixtureRequest, deck: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RayDriver | None]:
    """The driver of `test_ray_workers_render_a_deck`, started as the module begins when that
    test is selected: its model load and local Ray start run while the other tests do, and it
    waits on stdin for the deck. In a process of its own: a local Ray started there inherits
    no cluster settings (the token authentication) that another test module left in this
    interpreter's Ray."""
    selected = any(
        i.path == request.node.path and i.name == "test_ray_workers_render_a_deck"
        for i in request.session.items
    )
    if not selected or importlib.util.find_spec("ray") is None:
        yield None
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    folder = tmp_path_factory.mktemp("ray-deck")
    with (folder / "out").open("w+") as out, (folder / "err").open("w+") as err:
        driver = subprocess.Popen(  # (files, not pipes: nothing reads them until the test)
            [sys.executable, "-c", RAY_DECK, str(folder)],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            text=True,
            env={**env, "HF_HUB_OFFLINE": "1"},  # (the office cache of `deck` included)
        )
        try:
            yield RayDriver(driver, folder / "out", folder / "err")
        finally:
            if driver.poll() is None:  # the test did not run: an empty line stops it
                try:
                    driver.communicate("\n", timeout=60)
                except subprocess.TimeoutExpired:
                    driver.kill()
                    driver.wait()


def test_ray_workers_render_a_deck(deck: Path, ray_driver: RayDriver | None) -> None:
    pytest.importorskip("ray")
    assert ray_driver is not None
    ray_driver.process.communicate(f"{deck}\n", timeout=600)
    stderr = ray_driver.stderr.read_text()
    assert ray_driver.process.returncode == 0, stderr[-3000:]
    found = json.loads(ray_driver.stdout.read_text().strip().splitlines()[-1])
    assert found["report"]["pages_indexed"] == 3 and not found["report"]["failures"], found
    assert found["page"] == 2 and Path(found["source"]).name == "deck.pptx"
