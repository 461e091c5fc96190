"""Shared by the encoder tests: private model caches that reuse the tiny checkpoints already built.

The ONNX tests give each module (or test) its own model cache (``VRAG_CACHE_DIR``), so that the
exports they write and check stay private. The tiny checkpoints in such a cache are the same
seed-0 builds as the shared cache's, so its ``tiny/`` folder links to the shared one instead of
building every model again (`tiny_model_path` builds into a staging folder and renames it into
place, so two workers building the same model at once stay safe).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vrag_compress.encoders.tiny import cache_root

SHARED_TINY = cache_root()
"""The tiny-checkpoint cache as the environment names it when the tests are collected (before
any test points ``VRAG_CACHE_DIR`` at a private cache)."""


@pytest.fixture(scope="session")
def private_cache() -> Callable[[Path], Path]:
    """``private_cache(root)`` makes ``root`` a model cache of its own (ONNX exports are written
    under ``root/onnx``) whose ``tiny/`` folder is the shared tiny-checkpoint cache."""

    def make(root: Path) -> Path:
        SHARED_TINY.mkdir(parents=True, exist_ok=True)
        root.mkdir(parents=True, exist_ok=True)
        (root / "tiny").symlink_to(SHARED_TINY, target_is_directory=True)
        return root

    return make


@pytest.fixture(scope="session")
def run_in_process() -> Callable[..., Any]:
    """A stand-in for `subprocess.run` of ``[python, -m, vrag_compress, ...]`` or
    ``[python, -c, CODE]``: the same command run in this process, under ``env`` (restored after),
    answering as `subprocess.run` with ``check=True`` does. For a benchmark test whose fresh
    processes (each loading torch and the model again) another test already runs for real."""
    return _run_in_process


def _run_in_process(argv: list[str], env: dict[str, str] | None = None, **_: Any) -> Any:
    from typer.testing import CliRunner

    from vrag_compress.cli import app

    assert argv[0] == sys.executable, argv
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            if os.environ.get(name) != value:
                patch.setenv(name, value)
        if argv[1:3] == ["-m", "vrag_compress"]:
            result = CliRunner().invoke(app, argv[3:])
            if result.exit_code != 0:
                raise subprocess.CalledProcessError(result.exit_code, argv, result.output)
            return subprocess.CompletedProcess(argv, 0, result.stdout, "")
        assert argv[1] == "-c", argv
        exec(compile(argv[2], "<-c>", "exec"), {"__name__": "__main__"})  # noqa: S102
        return subprocess.CompletedProcess(argv, 0, "", "")
