"""Where the shared real data lives: tests, benchmarks, examples and tools read it in place and
never copy it. Dependency-free, so the test helpers and the benchmarks distribution share one
rule for finding it."""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "VRAG_DATA_DIR"


def data_dir(explicit: Path | str | None = None) -> Path:
    """The shared data folder: ``explicit`` (a ``--data`` option), else ``$VRAG_DATA_DIR``, else
    the first ``shared/data`` found from the current directory upwards (so ``../shared/data``
    from a checkout beside ``shared/``), else ``../shared/data`` relative to the current directory.

    The installed package's location is never used: data belongs to the checkout, not the library.
    """
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    cwd = Path.cwd().resolve()
    for folder in (cwd, *cwd.parents):
        candidate = folder / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return cwd.parent / "shared" / "data"
