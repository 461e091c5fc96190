"""An Office file through every way in: a `vrag serve` upload, the LangChain loader, the
LlamaIndex reader and `VisualIndex.add(ray=...)`. One deck, converted once into a module cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
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
from vrag_compress.distributed import RayOptions

deck, folder = Path(sys.argv[1]), Path(sys.argv[2])
with VisualIndex.create(folder / "idx", model="minilm") as index:
    ray = RayOptions(address="local", actors=1)  # one actor process is enough for 3 pages
    report = index.add([deck], progress=False, ray=ray, ocr="never")
    hit = index.search("ocelot rhubarb", k=1)[0]
print(json.dumps({"report": report.to_dict(), "page": hit.page_no, "source": hit.source}))
"""


def test_ray_workers_render_a_deck(deck: Path, tmp_path: Path) -> None:
    """In a process of its own: a local Ray started here inherits no cluster settings (the
    token authentication) that another test module left in this interpreter's Ray."""
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run(
        [sys.executable, "-c", RAY_DECK, str(deck), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**env, "HF_HUB_OFFLINE": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["report"]["pages_indexed"] == 3 and not found["report"]["failures"], found
    assert found["page"] == 2 and Path(found["source"]).name == "deck.pptx"
