"""A Qdrant local-mode folder from someone else must not run code: qdrant-client unpickles
every stored point on open, so each point is vetted first and a folder holding anything but
plain points is refused, on `vrag info`, `vrag verify`, `vrag migrate` and the Python API."""

from __future__ import annotations

import importlib.util
import os
import pickle
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vrag_compress import VisualIndex
from vrag_compress.cli import app
from vrag_compress.store import PageRecord
from vrag_compress.store.qdrant.local_mode import (
    UntrustedStoreError,
    storage_files,
    vet_local_folder,
)
from vrag_compress.testing import WordEncoder

# find_spec, not importorskip: collecting this module (in every pytest-xdist worker) then costs
# no qdrant-client import; the tests import the Qdrant store where they use it
if importlib.util.find_spec("qdrant_client") is None:
    pytest.skip("could not import 'qdrant_client'", allow_module_level=True)


class Touch:
    """A pickle that creates ``marker`` when loaded, as an attacker's would."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (os.system, (f"touch {self.marker}",))


def tamper(folder: Path, payload: object) -> Path:
    """Replace one stored point of every collection with ``payload``, pickled."""
    files = storage_files(folder)
    assert files
    for file in files:
        with sqlite3.connect(file) as conn:
            rowid = conn.execute("SELECT min(rowid) FROM points").fetchone()[0]
            conn.execute(
                "UPDATE points SET point = ? WHERE rowid = ?", (pickle.dumps(payload), rowid)
            )
    return files[0]


@pytest.fixture
def index_dir(tmp_path) -> Path:
    """An index folder whose store.json points at a local-mode Qdrant folder."""
    encoder = WordEncoder()
    path = tmp_path / "given.vrag"
    with VisualIndex.create(
        path, encoder=encoder, compressor="identity", store=f"qdrant+local://{tmp_path / 'q'}"
    ) as index:
        from vrag_compress.ingest import Page

        index.upsert_pages(
            [
                Page(f"d{i}", 1, encoder.page_image(t), t, Path(f"d{i}.pdf"))
                for i, t in enumerate(["budget court", "storm engine"])
            ]
        )
    return path


def test_a_clean_folder_opens_and_is_vetted(index_dir, tmp_path):
    assert vet_local_folder(tmp_path / "q") >= 2
    result = CliRunner().invoke(app, ["verify", str(index_dir)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", ["info", "verify", "migrate"])
def test_a_pickle_that_runs_code_is_refused_and_never_runs(index_dir, tmp_path, command):
    marker = tmp_path / "MARKER"
    file = tamper(tmp_path / "q", Touch(marker))
    args = {
        "info": ["info", str(index_dir)],
        "verify": ["verify", str(index_dir)],
        "migrate": ["migrate", f"qdrant+local://{tmp_path / 'q'}", str(tmp_path / "copy.vrag")],
    }[command]
    result = CliRunner().invoke(app, args)
    assert not marker.exists()
    assert result.exit_code == 1, result.output
    assert "refusing to open the Qdrant local-mode folder" in result.output
    assert str(file) in result.output and "posix.system" in result.output


def test_the_python_api_refuses_too(index_dir, tmp_path):
    from vrag_compress.store.qdrant.store import QdrantStore

    marker = tmp_path / "MARKER"
    tamper(tmp_path / "q", Touch(marker))
    with pytest.raises(UntrustedStoreError, match="not a Qdrant point model"):
        VisualIndex.open(index_dir, encoder=WordEncoder())
    with pytest.raises(UntrustedStoreError):
        QdrantStore.open(f"qdrant+local://{tmp_path / 'q'}")
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload, says",
    [
        ({"not": "a point"}, "holds dict"),
        (np.arange(3), "numpy"),  # even numpy's reconstructors are refused: points hold lists
        (PageRecord("x", "d", 1, np.ones((1, 4), np.float32)), "PageRecord"),
    ],
)
def test_anything_but_a_point_is_refused(tmp_path, payload, says):
    from vrag_compress.store.qdrant.store import QdrantStore

    with QdrantStore.create(f"qdrant+local://{tmp_path / 'q'}", {"dim": 4, "model_id": "m"}) as s:
        s.add([PageRecord("a", "d", 1, np.ones((2, 4), np.float32))])
    tamper(tmp_path / "q", payload)
    with pytest.raises(UntrustedStoreError, match=says):
        vet_local_folder(tmp_path / "q")


def test_a_damaged_point_file_is_refused_with_its_name(tmp_path):
    from vrag_compress.store.qdrant.store import QdrantStore

    with QdrantStore.create(f"qdrant+local://{tmp_path / 'q'}", {"dim": 4, "model_id": "m"}) as s:
        s.add([PageRecord("a", "d", 1, np.ones((2, 4), np.float32))])
    file = storage_files(tmp_path / "q")[0]
    file.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(UntrustedStoreError, match="cannot be read") as caught:
        vet_local_folder(tmp_path / "q")
    assert caught.value.file == file
