"""Every command, with each optional extra missing: one `error:` line naming the extra, exit 1.

Each extra is removed in a fresh interpreter by a meta path hook that refuses its modules, as if
it had never been installed; the commands run through the `vrag` entry point (`cli.main`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrag_compress.cli import app
from vrag_compress.extras import EXTRA_OF_MODULE

DRIVER = """
import contextlib, importlib.abc, io, json, sys

blocked = set(sys.argv[1].split(","))


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Refuse())
from vrag_compress.cli import main

results = []
for argv in json.loads(sys.argv[2]):
    sys.argv = ["vrag", *argv]
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            main()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException as error:  # what a user would see as a traceback
            code, stderr = -1, io.StringIO(f"Traceback: {type(error).__name__}: {error}")
    results.append({"argv": argv, "code": code, "stderr": stderr.getvalue()})
print(json.dumps(results))
"""


def _commands(index: Path, pdf: Path, work: Path) -> list[tuple[list[str], str | None]]:
    """(argv, the extra it needs or None): every `vrag` command, with the options that use an
    extra. Commands that would keep running (serve) or need a network (ask) run only where
    their extra is missing, which stops them first. The `vrag bench` commands are left out: they
    run minutes on the shared data sets (and `bench serve` starts a server process of its own)."""
    new = str(work / "new")
    tiny = ["--model", "tiny-colqwen2"]
    return [
        (["info", str(index)], None),
        (["verify", str(index)], None),
        (["search", str(index), "oral argument", "--json"], None),
        (["search", str(index), "oral argument", "--mode", "text"], None),
        (["estimate", str(index), "--sample", "2"], None),
        (["index", str(pdf), "--index", new + "1", *tiny], None),
        (["index", str(pdf), "--index", new + "2", *tiny, "--ocr", "always"], "ocr"),
        (["index", str(pdf), "--index", new + "3", *tiny, "--renderer", "pdf2image"], "pdf2image"),
        (
            ["index", str(pdf), "--index", new + "4", *tiny, "--store", f"qdrant+local://{new}q4"],
            "qdrant",
        ),
        (["migrate", str(index), f"qdrant+local://{work}/q?collection=c"], "qdrant"),
        (["serve", str(index), "--port", "1"], "serve"),
        (["ask", str(index), "what is argued?", "--llm", "openai:gpt-4o-mini"], "ask"),
    ]


@pytest.fixture(scope="module")
def tiny_index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("docs")
    pdf = folder / "report.pdf"
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", pdf)  # 5 pages
    index = tmp_path_factory.mktemp("idx") / "idx"
    result = CliRunner().invoke(
        app, ["index", str(pdf), "--index", str(index), "--model", "tiny-colqwen2"]
    )
    assert result.exit_code == 0, result.output
    return index, pdf


@pytest.mark.slow  # a tiny model, one interpreter per extra
@pytest.mark.parametrize("extra", sorted(set(EXTRA_OF_MODULE.values())))
def test_every_command_with_an_extra_missing(
    extra: str, tiny_index: tuple[Path, Path], tmp_path: Path
) -> None:
    index, pdf = tiny_index
    modules = sorted(m for m, e in EXTRA_OF_MODULE.items() if e == extra)
    table = [
        (argv, needs)
        for argv, needs in _commands(index, pdf, tmp_path)
        if needs is None or needs == extra
    ]
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, ",".join(modules), json.dumps([a for a, _ in table])],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for (argv, needs), result in zip(table, json.loads(run.stdout.splitlines()[-1]), strict=True):
        where = f"vrag {' '.join(argv)} without [{extra}]: {result}"
        assert "Traceback" not in result["stderr"], where
        if needs is None:
            assert result["code"] == 0, where
            continue
        lines = [line for line in result["stderr"].splitlines() if line.strip()]
        assert result["code"] == 1 and len(lines) == 1, where
        assert lines[0].startswith("error:") and f"[{extra}]" in lines[0], where


def test_every_extra_named_for_a_module_exists() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    assert set(EXTRA_OF_MODULE.values()) <= set(extras)
