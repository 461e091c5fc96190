"""Fixtures: shared data, a deterministic word-hashing encoder, and a guard against OpenAI defaults.

Tiny random Col* models give meaningless scores, so retrieval-quality tests use
`vrag_compress.testing.WordEncoder`: each test page image is registered with the words "printed"
on it, and every word maps to a fixed unit vector, so MaxSim ranks pages by shared words.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("OPENAI_API_KEY", None)

from llama_index.core import Settings  # noqa: E402
from vrag_compress import Page  # noqa: E402
from vrag_compress.testing import WordEncoder, shared_data  # noqa: E402, F401


@pytest.fixture(autouse=True)
def no_default_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any test in which LlamaIndex would fall back to its default (OpenAI) LLM or embedder."""

    def refuse(kind: str):
        def getter(self):
            raise AssertionError(f"LlamaIndex fell back to Settings.{kind} (the OpenAI default)")

        return getter

    settings_type = type(Settings)
    for kind in ("llm", "embed_model"):
        original = getattr(settings_type, kind)
        monkeypatch.setattr(settings_type, kind, property(refuse(kind), original.fset))


# doc_id -> (metadata, pages' words); page n of a document is entry n-1
CORPUS: dict[str, tuple[dict, list[list[str]]]] = {
    "apollo": (
        {"year": 1969, "topic": "space"},
        [["apollo", "moon", "landing"], ["saturn", "rocket", "engine"]],
    ),
    "budget": (
        {"year": 2015, "topic": "finance"},
        [["budget", "deficit", "revenue"], ["tax", "expenditure", "senate"]],
    ),
    "weather": (
        {"year": 2021, "topic": "science"},
        [["storm", "rainfall", "forecast"], ["drought", "temperature", "record"]],
    ),
}


def corpus_pages(encoder: WordEncoder, doc_id: str) -> list[Page]:
    _, pages = CORPUS[doc_id]
    seed = sorted(CORPUS).index(doc_id) * 100
    return [
        Page(
            doc_id=doc_id,
            page_no=n,
            image=encoder.page_image(words, seed + n),
            text="This page mentions " + " ".join(words),
            source=Path(f"/corpus/{doc_id}.pdf"),
        )
        for n, words in enumerate(pages, start=1)
    ]


@pytest.fixture(scope="module")
def encoder() -> WordEncoder:
    return WordEncoder()


@pytest.fixture(scope="module")
def visual_index(tmp_path_factory: pytest.TempPathFactory, encoder: WordEncoder):
    """A VisualIndex over CORPUS, shared read-only by a module's tests (identity compression:
    these tests are about the integration, not the compressor)."""
    from vrag_compress import VisualIndex

    path = tmp_path_factory.mktemp("visual") / "index"
    index = VisualIndex.create(path, compressor="identity", encoder=encoder)
    for doc_id, (metadata, _) in CORPUS.items():
        report = index.add(corpus_pages(encoder, doc_id), metadata=metadata, progress=False)
        assert report.ok, report.failures
    yield index
    index.close()


@pytest.fixture
def corpus() -> dict[str, tuple[dict, list[list[str]]]]:
    return CORPUS


@pytest.fixture
def corpus_nodes(encoder: WordEncoder):
    """CORPUS as page ImageNodes (inline images), with each document's metadata."""
    from llama_index.readers.vrag_compress.nodes import page_to_node

    return [
        page_to_node(page, ref_doc_id=doc_id, metadata=metadata)
        for doc_id, (metadata, _) in CORPUS.items()
        for page in corpus_pages(encoder, doc_id)
    ]


@pytest.fixture
def mock_llm():
    """LlamaIndex's chat mock, also keeping every call (compact-and-refine calls it per chunk)."""
    from llama_index.core.bridge.pydantic import Field
    from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall

    class RecordingLLM(MockLLMWithChatMemoryOfLastCall):
        calls: list = Field(default_factory=list, exclude=True)

        def chat(self, messages, **kwargs):  # achat ends here too
            self.calls.append(list(messages))
            return super().chat(messages, **kwargs)

    return RecordingLLM(is_chat_model=True)
