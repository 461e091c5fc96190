"""Shared fixtures: the real data folder (fail loudly when missing, never skip)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from vrag_compress.testing import shared_data  # noqa: E402, F401


@pytest.fixture
def make_old() -> Callable[[Path], None]:
    """Turns a store folder into one written before text indexes (schema 1: no FTS table, no
    text change log, no triggers), as an index made by an older vrag_compress is."""
    from vrag_compress.store.local import catalog as cat

    def downgrade(path: Path) -> None:
        conn = sqlite3.connect(path / cat.CATALOG_NAME, isolation_level=None)
        for kind in ("fts", "log"):
            for event in ("insert", "delete", "update"):
                conn.execute(f"DROP TRIGGER pages_{kind}_{event}")
        conn.execute("DROP TABLE pages_fts")
        conn.execute("DROP TABLE text_log")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        cat.seal_meta(conn)
        conn.close()

    return downgrade


@pytest.fixture(scope="module")
def law_index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """A tiny-model index of one real page (a court transcript) with metadata team=law: the
    server's hostile-input and fuzz tests copy it rather than build their own."""
    from vrag_compress import VisualIndex, get_compressor

    path = tmp_path_factory.mktemp("law") / "base.vrag"
    compressor = get_compressor("sap", ratio=0.25, layers=[0, 1])
    with VisualIndex.create(path, model="tiny-colqwen2", compressor=compressor) as index:
        pdf = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
        index.add([pdf], metadata={"team": "law"}, progress=False, ocr="never")
    return path
