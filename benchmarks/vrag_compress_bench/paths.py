"""The benchmarks' command-line view of their inputs: the shared data folder checked (a missing
one is a usage error naming ``--data``), BEIR datasets named by an option, and scratch folders.
Finding the shared data is `vrag_compress.shared_data`'s job, which tests and examples use too."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from vrag_compress.shared_data import DATA_ENV, data_dir


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
    """`vrag_compress.beir.load_dataset` for a command-line option: a folder that is
    missing or not BEIR is a usage error naming the option (exit 2), not a traceback."""
    import typer

    from vrag_compress.beir import DatasetError, load_dataset

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
