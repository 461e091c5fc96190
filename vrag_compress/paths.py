"""Where the shared real data lives (tests, benchmarks and demos read it, never copy it)."""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "VRAG_DATA_DIR"


def data_dir() -> Path:
    """The shared data folder: ``$VRAG_DATA_DIR`` or ``../shared/data`` beside the repository."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "data"
