"""Every Python block of this integration's README runs as written.

The only substitutions are what an offline test machine needs: the tiny offline ColQwen2 for the
hub model, LlamaIndex's mock chat model for `my_vision_llm` / `llm`, and a `pdfs/` folder with a
real PDF. Blocks run in order in one namespace (later blocks use earlier names); indexes earlier
blocks left open are closed before a block that opens one itself, as a new script would start.
The bash block with the example is run by test_vrag_llamaindex_example.py.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def python_blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def _close_open_indexes(namespace: dict) -> None:
    from vrag_compress import VisualIndex

    from llama_index.vector_stores.vrag_compress import VragVectorStore

    for value in list(namespace.values()):
        if isinstance(value, (VisualIndex, VragVectorStore)):
            value.close()


def test_the_readme_has_the_blocks_users_copy() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 4
    assert any("VectorStoreIndex.from_documents" in b for b in blocks)


def test_every_python_block_runs(tmp_path: Path, shared_data: Path, mock_llm, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pdfs").mkdir()
    shutil.copy(shared_data / "pdfs" / "edge" / "multi_page.pdf", tmp_path / "pdfs" / "a.pdf")
    namespace: dict = {"my_vision_llm": mock_llm, "llm": mock_llm, "__name__": "readme"}
    for number, block in enumerate(python_blocks(), start=1):
        code = block.replace('"vidore/colqwen2-v1.0"', '"tiny-colqwen2"')
        if "from_path(" in code or "VisualIndex.create(" in code:
            _close_open_indexes(namespace)
        try:
            exec(compile(code, f"README.md python block {number}", "exec"), namespace)
        except Exception as error:  # noqa: BLE001 (re-raised with the block that failed)
            pytest.fail(f"README python block {number} failed: {type(error).__name__}: {error}")
    assert namespace["response"].source_nodes, "the query engine block cited no pages"
