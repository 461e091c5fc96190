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

from vrag_compress.extras import EXTRA_OF_MODULE

DRIVER = """
import contextlib, importlib.abc, importlib.util, io, json, os, sys
from pathlib import Path

jobs = json.loads(sys.argv[1])  # extra -> {"modules": [...], "argvs": [...], "out": file}
package = Path(importlib.util.find_spec("vrag_compress").origin).parent  # not imported
compat = importlib.util.spec_from_file_location("preload_compat", package / "compat.py")
compat.loader.exec_module(importlib.util.module_from_spec(compat))  # before transformers
for heavy in ("torch", "transformers", "colpali_engine"):  # what every child would import again
    __import__(heavy)
preloaded = sorted(m for m in sys.modules if m.split(".")[0] in
                   {b for job in jobs.values() for b in job["modules"]} | {"vrag_compress"})
assert not preloaded, f"preloaded before an extra is refused: {preloaded}"


class Refuse(importlib.abc.MetaPathFinder):
    def __init__(self, blocked):
        self.blocked = blocked

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def run(job):
    sys.meta_path.insert(0, Refuse(set(job["modules"])))
    from vrag_compress.cli import main

    results = []
    for argv in job["argvs"]:
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
    with open(job["out"], "w") as out:
        json.dump(results, out)


for job in jobs.values():  # one child per extra, forked before vrag_compress is imported
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            run(job)
        except BaseException:  # shown in the test's failure (no results file is written)
            import traceback

            traceback.print_exc()
            status = 1
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os._exit(status)
    os.waitpid(pid, 0)
"""
"""Refuses the modules of an extra, then runs `vrag` commands through `cli.main` and writes
their exit codes and stderr. One child process per job (an extra, or none refused), each
forked from a parent that
imported torch and transformers once (none of the refused modules, nor vrag_compress: each
child imports the CLI itself behind the refusing hook, as a fresh interpreter would)."""

EXTRAS = sorted(set(EXTRA_OF_MODULE.values()))


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
        # one method at one ratio: the command's path is the same for each (the default
        # three methods at three ratios tripled the slowest command of every child)
        (["estimate", str(index), "--sample", "2", "--methods", "sap", "--ratios", "0.25"], None),
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
    """Where an index of a 5-page PDF goes (``estimate --sample 2`` samples two of its pages;
    the driver's first child builds it, so this process never loads torch), and a one-page PDF
    for the `index` commands."""
    folder = tmp_path_factory.mktemp("docs")
    pdf = folder / "report.pdf"
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", pdf)  # 5 pages
    page = folder / "page.pdf"
    shutil.copy(shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf", page)
    return tmp_path_factory.mktemp("idx") / "idx", page


@pytest.fixture(scope="module")
def every_extra_missing(
    tiny_index: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[list[tuple[list[str], str | None]], list[dict] | str]]:
    """extra -> (the commands run without it, their results), or the driver's stderr where a
    child wrote no results: one `DRIVER` run for all extras, whose first child (nothing
    refused) indexes the 5-page PDF the others read."""
    index, pdf = tiny_index
    setup = tmp_path_factory.mktemp("setup") / "results.json"
    build = ["index", str(pdf.with_name("report.pdf")), "--index", str(index)]
    tables, jobs = {}, {"": {"modules": [], "argvs": [[*build, "--model", "tiny-colqwen2"]]}}
    jobs[""]["out"] = str(setup)
    for extra in EXTRAS:
        work = tmp_path_factory.mktemp(f"without-{extra}")
        tables[extra] = [
            (argv, needs)
            for argv, needs in _commands(index, pdf, work)
            if needs is None or needs == extra
        ]
        jobs[extra] = {
            "modules": sorted(m for m, e in EXTRA_OF_MODULE.items() if e == extra),
            "argvs": [a for a, _ in tables[extra]],
            "out": str(work / "results.json"),
        }
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    built = json.loads(setup.read_text()) if setup.exists() else run.stderr[-3000:]
    assert isinstance(built, list) and built[0]["code"] == 0, built  # what every child reads
    found: dict[str, tuple[list[tuple[list[str], str | None]], list[dict] | str]] = {}
    for extra, job in list(jobs.items())[1:]:
        out = Path(job["out"])
        failed = f"exit {run.returncode}: {run.stderr[-3000:]}"
        found[extra] = (tables[extra], json.loads(out.read_text()) if out.exists() else failed)
    return found


@pytest.mark.slow  # a tiny model, one process per extra
@pytest.mark.parametrize("extra", EXTRAS)
def test_every_command_with_an_extra_missing(
    extra: str,
    every_extra_missing: dict[str, tuple[list[tuple[list[str], str | None]], list[dict] | str]],
) -> None:
    table, results = every_extra_missing[extra]
    assert isinstance(results, list), results
    for (argv, needs), result in zip(table, results, strict=True):
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
