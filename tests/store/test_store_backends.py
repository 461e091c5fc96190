"""Store backends are one table (`store.open.BACKENDS`): a new one is its module plus one row,
and reading a Qdrant URL or pointer loads no client library."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vrag_compress import VisualIndex
from vrag_compress.store.open import BACKENDS, is_store_url, open_store, write_store_pointer
from vrag_compress.store.validate import StoreInputError

TOY_BACKEND = '''
"""A backend for the test: embedded stores in folders named by ``toy://NAME`` URLs."""
from pathlib import Path

from vrag_compress.store.local.store import LocalStore

ROOT = Path(__file__).parent / "toy-stores"


def _folder(url):
    return ROOT / url.removeprefix("toy://")


def create_store(url, config, **options):
    return LocalStore.create(_folder(url), config, **options)


def open_store(url, *, readonly, expect, **options):
    return LocalStore.open(_folder(url), readonly=readonly, expect=expect, **options)


def pointer_url(url):
    return url
'''


class NamedOnly:
    """An encoder as far as `create` needs one (no pages are added)."""

    model_id, dim, n_layers = "some/model", 8, 2


def test_a_new_backend_is_its_module_and_one_table_row(tmp_path, monkeypatch):
    (tmp_path / "toy_backend.py").write_text(TOY_BACKEND)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(BACKENDS, "toy", "toy_backend")
    assert is_store_url("toy://one")

    path = tmp_path / "index"
    with VisualIndex.create(path, encoder=NamedOnly(), compressor="random", store="toy://one"):
        pass
    assert json.loads((path / "store.json").read_text()) == {"url": "toy://one"}
    assert (tmp_path / "toy-stores" / "one").is_dir()
    with VisualIndex.open(path) as index:  # through the pointer, i.e. the table again
        assert index.model_id == "some/model"
        assert index.info()["staged_vectors"] == 0
    with open_store("toy://one", readonly=True) as store:
        assert store.config["model_id"] == "some/model"


def test_a_url_of_no_backend_is_refused_by_name(tmp_path):
    with pytest.raises(StoreInputError, match=r"'nope://x' is not a store URL \(one of qdrant://"):
        write_store_pointer(tmp_path, "nope://x")


def test_qdrant_urls_and_pointers_load_no_client_library(tmp_path):
    """`vrag index --store`, `vrag migrate` and opening a folder parse URLs and decide where the
    API key goes before any connection: none of that may import qdrant-client."""
    script = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        os.environ["QDRANT_API_KEY"] = "k"
        from vrag_compress.store.open import is_store_url, read_store_pointer
        from vrag_compress.store.qdrant.access import (
            api_key_for, key_withheld, parse_qdrant_url, pointer_url, url_options,
        )
        folder = Path({str(tmp_path)!r})
        (folder / "store.json").write_text('{{"url": "qdrant://db.example:6333/docs"}}')
        pointer = read_store_pointer(folder)
        assert is_store_url(pointer) and api_key_for(pointer) is None and key_withheld(pointer)
        assert parse_qdrant_url("qdrants://db.example:6333/docs").https
        assert url_options("qdrant://h:6333/c?shards=2") == {{"shards": 2}}
        assert pointer_url("qdrant+local://q").startswith("qdrant+local:///")
        loaded = sorted(m for m in sys.modules if m.startswith(("qdrant_client", "grpc")))
        assert not loaded and "vrag_compress.store.qdrant.store" not in sys.modules, loaded
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_store_url_is_written_without_its_secrets(tmp_path: Path):
    with pytest.raises(StoreInputError, match="do not put an API key in the store URL"):
        write_store_pointer(tmp_path, "qdrant://h:6333/c?api_key=x")
    assert not (tmp_path / "store.json").exists()
