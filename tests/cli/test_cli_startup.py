"""The commands that encode nothing start like a CLI: no torch, transformers or framework import
(`python -X importtime` lists every module a real `vrag` process imports)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrag_compress.cli import app

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # builds an index, then runs `vrag` processes

HEAVY = {"torch", "transformers", "colpali_engine", "fastapi", "llama_index", "langchain_core"}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def index_dir(law_index: Path) -> Path:
    """The session's tiny-model index of the court transcript (read here, never written: the
    delete runs on a copy)."""
    return law_index


def imports_of(*args: str | Path) -> tuple[frozenset[str], str]:
    """Every module one `python -m vrag_compress ARGS` process imports, and its stdout. Queries
    are encoded with torch even where an ONNX export of the model sits in the user's cache.
    Run once per argument list (``--version`` and ``--help`` are checked by several tests)."""
    return _imports_of(tuple(map(str, args)))


@functools.cache
def _imports_of(args: tuple[str, ...]) -> tuple[frozenset[str], str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
        "VRAG_QUERY_BACKEND": "torch",
    }
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vrag_compress", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = frozenset(
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    )
    return imported, done.stdout


def heavy_imports(*args: str | Path) -> set[str]:
    """The heavy top-level packages one `python -m vrag_compress ARGS` process imports."""
    packages = {name.split(".")[0] for name in imports_of(*args)[0]}
    return packages & HEAVY | {name for name in packages if name.startswith("langchain")}


def test_version_answers_before_loading_the_commands():
    from vrag_compress.version import __version__

    imported, stdout = imports_of("--version")
    assert stdout == f"vrag {__version__}\n"
    assert "numpy" not in imported and "vrag_compress.cli" not in imported


@pytest.mark.parametrize(
    "command",
    [
        ["--version"],
        ["--help"],
        ["info", "INDEX"],
        ["verify", "INDEX"],
        ["search", "INDEX", "the court heard argument", "--mode", "text", "--json"],
        ["delete", "COPY", "scotus-transcript-p1.pdf", "--json"],
    ],
    ids=lambda c: " ".join(c[:1] + c[3:4] + c[4:5]),
)
def test_commands_that_encode_nothing_import_no_model_or_framework(
    command: list[str], index_dir: Path, tmp_path: Path
):
    copy = tmp_path / "copy"
    shutil.copytree(index_dir, copy)
    args = [{"INDEX": index_dir, "COPY": copy}.get(a, a) for a in command]
    assert heavy_imports(*args) == set()


def test_a_visual_search_does_import_the_model(index_dir: Path):
    """The check above can fail: a query that must be encoded loads torch and transformers."""
    assert {"torch", "transformers"} <= heavy_imports(
        "search", index_dir, "argument", "--mode", "exact", "--json"
    )


def benchmark_modules(imported: frozenset[str]) -> set[str]:
    """The benchmark modules among ``imported`` (their distribution's package, or the package
    they lived in inside the library before they became one)."""
    return {
        name for name in imported if name.startswith(("vrag_compress_bench", "vrag_compress.bench"))
    }


@pytest.mark.parametrize("command", [["search", "--help"], ["--help"]], ids=" ".join)
def test_everyday_commands_import_no_benchmark_module(command: list[str]):
    imported, stdout = imports_of(*command)
    assert stdout.startswith("Usage: ")
    assert benchmark_modules(imported) == set()


def test_vrag_help_lists_the_benchmarks_by_name():
    stdout = imports_of("--help")[1]
    assert "  bench " in stdout and "Benchmarks that print numbers" in stdout


def test_vrag_bench_imports_the_benchmarks_when_it_runs():
    """The checks above can fail: `vrag bench --help` loads the group from its entry point
    (importlib imports that module itself, which importtime does not list; the command modules
    it imports are listed)."""
    imported, stdout = imports_of("bench", "--help")
    assert {"vrag_compress_bench.store", "vrag_compress_bench.retention"} <= benchmark_modules(
        imported
    )
    assert "  store " in stdout and "  retention " in stdout


def test_without_the_benchmarks_vrag_bench_says_what_to_install(monkeypatch):
    from vrag_compress.cli import plugins

    monkeypatch.setattr(plugins, "command_entry_points", dict)  # vrag-compress-bench missing
    for args in (["bench"], ["bench", "store", "--pages", "10"], "bench --help".split()):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert result.output.splitlines() == [
            "error: `vrag bench` needs the vrag-compress-bench package: pip install -e "
            "./benchmarks in a checkout of vrag-compress (from a release: pip install "
            "'vrag-compress[bench]')"
        ]
    listing = CliRunner().invoke(app, ["--help"]).output.splitlines()
    assert "  bench        Benchmarks; not installed (vrag-compress-bench)." in listing
