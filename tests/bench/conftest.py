"""Fixtures of the benchmark tests: one Cranfield slice and one cache of its encodings for the
whole session (per xdist worker), so that the `vrag bench retention` / `vrag bench estimate`
runs on it encode it with MiniLM once between them rather than once each."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cranfield_slice(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The BEIR folder of `_cranfield_slice` (defaults), made once: tests only read it."""
    from tests.bench.test_eval_runner import _cranfield_slice

    return _cranfield_slice(shared_data, tmp_path_factory.mktemp("cranfield") / "cran")


@pytest.fixture(scope="session")
def encodings_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``--cache-dir`` shared by the runs on `cranfield_slice`: the first one encodes it, the
    others read the encodings back (the cache's key is the folder, its sizes and the encoder)."""
    return tmp_path_factory.mktemp("encodings")
