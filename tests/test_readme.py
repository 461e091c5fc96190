"""Every code block of the README runs as written (the integration READMEs have their own tests).

Substitutions are only what an offline test machine needs: the tiny offline ColQwen2 for the hub
model (a line without --model runs with the default, `auto`, as a user's would), a local Qdrant
for the server URL, and a `reports/` folder holding a real 5-page PDF as `report.pdf`. Lines
that need a chat model, a running server or a calibration set are named in `ELSEWHERE` with the
test that covers them.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vrag_compress.cli import app

pytestmark = pytest.mark.slow  # indexes with real models

README = Path(__file__).resolve().parents[1] / "README.md"
USAGE = README.parent / "docs" / "usage.md"  # the README's full tour: its blocks run here too
ELSEWHERE = {
    "ask": "tests/cli/test_cli_index.py (a fake chat model)",
    "serve": "tests/test_serve_*.py (a real server process)",
    "calibrate": "tests/index/test_calibrate.py (a calibration set)",
}
SETUP_BLOCKS = ("make demo", "pip install")  # the set-up itself (`make test` is the CI command)


def blocks(language: str) -> list[str]:
    """The README's fenced blocks, then those of docs/usage.md, in the order a reader meets them."""
    return [
        block
        for page in (README, USAGE)
        for block in re.findall(rf"```{language}\n(.*?)```", page.read_text(), re.S)
    ]


@pytest.fixture
def reports(tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").mkdir()
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", "reports/report.pdf")
    return tmp_path


def commands(block: str, workdir: Path) -> list[list[str]]:
    """The block's `vrag` commands as argument lists (`;` separates commands on one line)."""
    found: list[list[str]] = []
    for line in block.splitlines():
        line = line.replace("vidore/colqwen2-v1.0", "tiny-colqwen2")
        line = line.replace(
            "qdrant://localhost:6333/reports", f"qdrant+local://{workdir}/qdrant?collection=reports"
        )
        words = shlex.split(line, comments=True)
        while words:
            command = words[: words.index(";")] if ";" in words else words
            words = words[len(command) + 1 :]
            assert command[0] == "vrag", line
            args = command[1:]
            found.append(args)
    return found


def test_the_bash_blocks_are_set_up_or_vrag_commands() -> None:
    bash = blocks("bash")
    assert len(bash) >= 3
    assert all(any(s in b for s in SETUP_BLOCKS) or "vrag index" in b for b in bash)


def test_every_vrag_command_runs(reports: Path) -> None:
    pytest.importorskip("qdrant_client")
    ran = []
    for block in [b for b in blocks("bash") if "vrag index" in b]:  # the tour, then all of it
        for args in commands(block, reports):
            if args and args[0] in ELSEWHERE:
                continue
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 0, f"vrag {shlex.join(args)}: {result.output}"
            ran.append(args[0] if args else "")
    assert {"index", "search", "show", "info", "verify", "delete", "optimize", "migrate"} <= set(
        ran
    )
    assert (reports / "why.png").is_file() and (reports / "page3.png").is_file()


def test_every_python_block_runs(reports: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = blocks("python")
    assert python
    namespace: dict = {"__name__": "readme"}
    for number, block in enumerate(python, start=1):
        code = block.replace('"vidore/colqwen2-v1.0"', '"tiny-colqwen2"')
        try:
            exec(compile(code, f"README.md python block {number}", "exec"), namespace)
        except Exception as error:  # noqa: BLE001 (re-raised with the block that failed)
            pytest.fail(f"README python block {number} failed: {type(error).__name__}: {error}")
    assert namespace["report"].pages_indexed == 5
    assert namespace["why"].tokens and "report.pdf" in capsys.readouterr().out
