"""The README's example runs offline as written: PDF -> index -> chain -> cited answer, and the
`--chat` mode reads follow-up questions from stdin until the input ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_qa.py"


@pytest.mark.slow
def test_example_answers_then_chats_until_the_input_ends(shared_data: Path, tmp_path: Path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VRAG_DATA_DIR": str(shared_data)}
    command = [sys.executable, str(EXAMPLE), "--index", str(tmp_path / "lc.vrag")]
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "A: (offline placeholder model" in first.stdout
    assert "[1] nics-background-checks-2015-11.pdf" in first.stdout
    again = subprocess.run(
        [*command, "--chat"],
        input="And in Texas?\n",  # no empty line: the end of the input ends the chat
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("\nQ: ") == 2 and "Q: And in Texas?" in again.stdout
