"""The seven distributions (the core, its benchmarks, the LangChain and four LlamaIndex
integrations) build as wheels and sdists, pass `twine check`, and work installed.

The wheels go into a fresh virtual environment (not editable). Their dependencies are already
installed in the test environment, so the fresh environment reads them from there through a
path file (no download, and the editable installs of this checkout stay invisible: path files
inside an added folder are not processed). Everything then runs from the installed wheels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = [
    ROOT,
    ROOT / "benchmarks",
    ROOT / "integrations" / "langchain",
    *sorted((ROOT / "integrations" / "llama-index").glob("llama-index-*-vrag-compress")),
]
NOT_SOURCE = shutil.ignore_patterns(
    ".venv",
    ".git",
    "build",
    "dist",
    "out",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    "integrations",
    "benchmarks",
)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # wheels built and installed


CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _run(*args: object, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command without this checkout on its path (the fresh environment must not see it)."""
    env = env or CLEAN_ENV
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels and sdists of every distribution, built from copies of the sources by `build`
    (``python -m build --no-isolation``) in one process whose backend hooks run in processes
    forked from it, not in fresh interpreters that import setuptools again (wheel_builds.py)."""
    out = tmp_path_factory.mktemp("dist")
    sources = tmp_path_factory.mktemp("src")
    copies = [sources / project.name for project in PROJECTS]
    for project, copy in zip(PROJECTS, copies, strict=True):
        shutil.copytree(project, copy, ignore=NOT_SOURCE)
    _run(sys.executable, Path(__file__).with_name("wheel_builds.py"), out, *copies)
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the seven wheels installed (no editable install)."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)  # this pip installs into it (no ensurepip)
    python = env_dir / "bin" / "python"
    wheels = sorted(dist.glob("*.whl"))
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-index",
        *wheels,
    )
    # only now the dependencies: pip must not see (and never touch) this checkout's installs
    site = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    (Path(site) / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env_dir


def test_every_distribution_builds_and_passes_twine_check(dist: Path) -> None:
    names = sorted(p.name for p in dist.iterdir())
    assert len([n for n in names if n.endswith(".whl")]) == len(PROJECTS) == 7
    assert len([n for n in names if n.endswith(".tar.gz")]) == len(PROJECTS)
    _run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()))


def test_the_core_wheel_carries_what_an_index_expects(dist: Path) -> None:
    from zipfile import ZipFile

    (wheel,) = dist.glob("vrag_compress-*.whl")
    files = ZipFile(wheel).namelist()
    assert "vrag_compress/py.typed" in files
    assert "vrag_compress/serve/static/index.html" in files
    metadata = ZipFile(wheel).read(next(f for f in files if f.endswith("METADATA"))).decode()
    for field in ("License-Expression: Apache-2.0", "Classifier: Typing :: Typed", "Project-URL"):
        assert field in metadata
    assert not any(f.startswith(("tests/", "integrations/", "benchmarks/")) for f in files)
    assert not any(f.startswith("vrag_compress_bench") for f in files)  # a wheel of its own


INSTALLED_CHECKS = """
import contextlib, io, json, runpy, sys
import vrag_compress, vrag_compress_bench, langchain_vrag_compress
import llama_index.readers.vrag_compress as r
import llama_index.vector_stores.vrag_compress as v
import llama_index.retrievers.vrag_compress as t
import llama_index.postprocessor.vrag_compress as p
files = [m.__file__ for m in (vrag_compress, vrag_compress_bench, langchain_vrag_compress,
         r, v, t, p)]
vrag, outputs = sys.argv[1], []
for command in json.loads(sys.argv[2]):  # each through the installed `vrag` script
    sys.argv = [vrag, *command]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(vrag, run_name="__main__")
        except SystemExit as stop:
            assert not stop.code, (command, stop.code, out.getvalue())
    outputs.append(out.getvalue())
print(json.dumps({"files": files, "outputs": outputs}))
"""
"""Imports the installed modules, then runs ``vrag`` commands (a JSON list of argument lists)
through the installed script: one process for what would be several starts. Prints the modules'
files and each command's output as JSON."""


def test_installed_wheels_index_search_and_import(
    installed: Path, shared_data: Path, tmp_path: Path
) -> None:
    env = {**CLEAN_ENV, "HF_HUB_OFFLINE": "1"}
    vrag = installed / "bin" / "vrag"
    python = installed / "bin" / "python"
    assert _run(vrag, "--version", env=env).strip()  # a process of its own: no numpy loads
    pdf = shared_data / "pdfs" / "gov" / "senate-expenditures.pdf"
    index = tmp_path / "wheel.vrag"
    commands = [
        ["bench", "--help"],
        ["index", pdf, "--index", index, "--model", "tiny-colpali"],
        ["search", index, "expenditures", "-k", "2", "--json"],
    ]
    argument = json.dumps([list(map(str, command)) for command in commands])
    out = _run(python, "-c", INSTALLED_CHECKS, vrag, argument, cwd=tmp_path, env=env)
    done = json.loads(out.strip().splitlines()[-1])
    assert all(str(installed) in path for path in done["files"]), done["files"]
    bench_help, _, found = done["outputs"]
    assert "  store " in bench_help  # the bench commands, through the entry point
    assert pdf.name in found
