"""Shared fixtures: the real data folder (fail loudly when missing, never skip)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from vrag_compress.bench.paths import data_dir  # noqa: E402


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = data_dir()
    if not (path / "pdfs").is_dir():
        pytest.fail(f"shared data not found at {path}; set VRAG_DATA_DIR", pytrace=False)
    return path
