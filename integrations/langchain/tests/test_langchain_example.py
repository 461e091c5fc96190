"""The README's example runs offline as written: PDF -> index -> chain -> cited answer, and the
`--chat` mode reads follow-up questions from stdin until the input ends."""

from __future__ import annotations

import io
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_qa.py"


@pytest.mark.slow
def test_example_answers_then_chats_until_the_input_ends(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    """The script runs as ``python examples/langchain_qa.py ...`` runs it (as ``__main__``), in
    this process: the interpreter and its imports are not paid twice more."""
    monkeypatch.setenv("VRAG_DATA_DIR", str(shared_data))
    command = [str(EXAMPLE), "--index", str(tmp_path / "lc.vrag")]
    monkeypatch.setattr(sys, "argv", command)
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    first = capsys.readouterr().out
    assert "A: (offline placeholder model" in first
    assert "[1] nics-background-checks-2015-11.pdf" in first
    monkeypatch.setattr(sys, "argv", [*command, "--chat"])
    # no empty line: the end of the input ends the chat
    monkeypatch.setattr(sys, "stdin", io.StringIO("And in Texas?\n"))
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    again = capsys.readouterr().out
    assert again.count("\nQ: ") == 2 and "Q: And in Texas?" in again
