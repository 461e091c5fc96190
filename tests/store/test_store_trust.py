"""An index folder from someone else must not choose where credentials go or what gets created.

Regression tests for attacks on the Qdrant pointer (store.json) and the API key.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from vrag_compress.store.base import StoreNotFoundError
from vrag_compress.store.open import (
    StorePointer,
    open_store,
    read_store_pointer,
    write_store_pointer,
)
from vrag_compress.store.qdrant.access import api_key_for, parse_qdrant_url
from vrag_compress.store.validate import StoreInputError

# find_spec, not importorskip: collecting this module (in every pytest-xdist worker) then costs
# no qdrant-client import; the tests import the Qdrant store where they use it
if importlib.util.find_spec("qdrant_client") is None:
    pytest.skip("could not import 'qdrant_client'", allow_module_level=True)

SECRET = "s3cr3t-key-value"


@pytest.fixture
def sent(monkeypatch) -> list[dict]:
    """Every QdrantClient the store would construct, with its arguments (nothing connects)."""
    calls: list[dict] = []

    class Recorder:
        def __init__(self, **kwargs) -> None:
            calls.append(kwargs)
            raise ConnectionRefusedError("test: no server")

    monkeypatch.setattr("qdrant_client.QdrantClient", Recorder)
    return calls


def _foreign_folder(tmp_path, url: str):
    folder = tmp_path / "downloaded-index"
    folder.mkdir(parents=True)
    (folder / "store.json").write_text(json.dumps({"url": url}))
    return folder


def test_a_foreign_pointer_does_not_receive_the_api_key(tmp_path, monkeypatch, sent):
    monkeypatch.setenv("QDRANT_API_KEY", SECRET)
    monkeypatch.delenv("QDRANT_API_KEY_HOSTS", raising=False)
    monkeypatch.delenv("VRAG_QDRANT_URL", raising=False)
    for url in ("qdrants://collector.example:6333/stolen", "qdrant://127.0.0.1:16333/x"):
        pointer = read_store_pointer(_foreign_folder(tmp_path / url.split("/")[2], url))
        assert isinstance(pointer, StorePointer)
        assert api_key_for(pointer) is None  # loopback is no exception: anyone may listen there
        with pytest.raises(ConnectionRefusedError):
            open_store(pointer)
    assert [c["api_key"] for c in sent] == [None, None]  # connected without the key


def test_a_server_the_user_named_gets_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("QDRANT_API_KEY", SECRET)
    monkeypatch.delenv("QDRANT_API_KEY_HOSTS", raising=False)
    pointer = read_store_pointer(_foreign_folder(tmp_path, "qdrants://mine.example:6333/docs"))
    monkeypatch.setenv("VRAG_QDRANT_URL", "qdrants://MINE.example:6333")
    assert api_key_for(pointer) == SECRET
    monkeypatch.setenv("VRAG_QDRANT_URL", "qdrants://mine.example:7000")  # another port
    assert api_key_for(pointer) is None
    monkeypatch.delenv("VRAG_QDRANT_URL")
    monkeypatch.setenv("QDRANT_API_KEY_HOSTS", "other.example, MINE.example")
    assert api_key_for(pointer) == SECRET
    monkeypatch.delenv("QDRANT_API_KEY_HOSTS")
    assert api_key_for("qdrants://mine.example:6333/docs") == SECRET  # typed by the user


def test_the_key_is_never_sent_over_plain_http_to_another_machine(sent):
    plain = parse_qdrant_url("qdrant://10.20.30.40:6333/docs", api_key=SECRET)
    with pytest.raises(StoreInputError, match="plain HTTP to 10.20.30.40.*qdrants://"):
        plain.client()
    assert sent == []
    for url in ("qdrants://10.20.30.40:6333/docs", "qdrant://127.0.0.1:6333/docs"):
        with pytest.raises(ConnectionRefusedError):
            parse_qdrant_url(url, api_key=SECRET).client()
    assert [c["api_key"] for c in sent] == [SECRET, SECRET]
    assert sent[0]["https"] is True
    no_key = parse_qdrant_url("qdrant://10.20.30.40:6333/docs")
    with pytest.raises(ConnectionRefusedError):
        no_key.client()  # without a key, plain HTTP is the user's choice


@pytest.mark.parametrize("param", ["api_key", "API_KEY", "apikey", "token", "password"])
def test_a_key_in_the_url_is_refused_and_never_persisted(tmp_path, param):
    url = f"qdrants://host.example:6333/docs?{param}={SECRET}"
    with pytest.raises(StoreInputError, match="QDRANT_API_KEY") as caught:
        parse_qdrant_url(url)
    assert SECRET not in str(caught.value)
    with pytest.raises(StoreInputError):
        write_store_pointer(tmp_path, url)
    assert not (tmp_path / "store.json").exists()


def test_a_local_mode_pointer_never_creates_folders(tmp_path):
    victim = tmp_path / "elsewhere" / "created-by-attacker"
    folder = _foreign_folder(tmp_path, f"qdrant+local://{victim}")
    with pytest.raises(StoreNotFoundError, match="no Qdrant local-mode folder"):
        open_store(read_store_pointer(folder))
    assert not victim.exists() and not victim.parent.exists()
