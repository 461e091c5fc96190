"""Every Python block of this integration's README runs as written.

Substitutions are only what an offline test machine needs: the tiny offline ColQwen2 for the hub
model, a fake streaming chat model for `init_chat_model(...)`, fake embeddings for
`OpenAIEmbeddings()`, and a small copy of the gov PDFs. Blocks run in order in one namespace.
"""

from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
IMPORTS_OF_FAKED = (
    "from langchain.chat_models import init_chat_model",
    "from langchain_openai import OpenAIEmbeddings",
)


def fake_chat_model(spec: str) -> GenericFakeChatModel:
    answers = itertools.repeat(AIMessage("There were 1,234 checks in Texas [1]."))
    return GenericFakeChatModel(messages=answers)


def test_every_python_block_runs(tmp_path: Path, shared_data: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    gov = tmp_path / "gov"
    gov.mkdir()
    for name in ("nics-background-checks-2015-11.pdf", "scotus-transcript-p1.pdf"):
        shutil.copy(shared_data / "pdfs" / "gov" / name, gov / name)
    namespace: dict = {
        "__name__": "readme",
        "init_chat_model": fake_chat_model,
        "OpenAIEmbeddings": lambda: DeterministicFakeEmbedding(size=32),
    }
    blocks = BLOCK.findall(README.read_text())
    assert len(blocks) >= 5
    for number, block in enumerate(blocks, start=1):
        code = block.replace('"vidore/colqwen2-v1.0"', '"tiny-colqwen2"')
        code = code.replace('"../shared/data/pdfs/gov"', repr(str(gov)))
        code = code.replace("../shared/data", str(shared_data))
        for line in IMPORTS_OF_FAKED:
            code = code.replace(line, "pass")
        try:
            exec(compile(code, f"README.md python block {number}", "exec"), namespace)
        except Exception as error:  # noqa: BLE001 (re-raised with the block that failed)
            pytest.fail(f"README python block {number} failed: {type(error).__name__}: {error}")
    assert [c["ref"] for c in namespace["result"]["citations"]] == [1]
    assert "There were 1,234 checks in Texas [1]." in capsys.readouterr().out  # the stream
    assert namespace["chunk"]["citations"][0]["ref"] == 1
    assert namespace["minilm_store"].index.model_id == "minilm"
