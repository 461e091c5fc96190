"""Where the shared real data lives (tests, benchmarks and demos read it, never copy it)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

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


def require_data_dir(explicit: Path | str | None = None) -> Path:
    """:func:`data_dir`, checked: a missing folder is a usage error that says how to point at it."""
    import typer

    folder = data_dir(explicit)
    if not folder.is_dir():
        raise typer.BadParameter(
            f"shared data folder {folder} does not exist; pass --data DIR or set {DATA_ENV}",
            param_hint="--data",
        )
    return folder


def load_dataset_option(dataset: str | Path, option: str = "--dataset") -> Any:
    """`vrag_compress.bench.beir.load_dataset` for a command-line option: a folder that is
    missing or not BEIR is a usage error naming the option (exit 2), not a traceback."""
    import typer

    from vrag_compress.bench.beir import DatasetError, load_dataset

    try:
        return load_dataset(dataset)
    except DatasetError as error:
        raise typer.BadParameter(str(error), param_hint=option) from error


def scratch_dir(prefix: str, workdir: Path | None) -> Path:
    """A new folder for a benchmark's stores inside ``workdir`` (a ``--dir`` option, created
    when missing) or the system's temporary folder."""
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))
