"""Answering without a framework: messages, citations and the chat-model plugins."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from PIL import Image

from vrag_compress import answering
from vrag_compress.answering import AnswerPage, ChatMessage, ChatModel, NoChatModelError


class EchoChat:
    """A chat model in plain Python: answers by citing the second page, in two pieces."""

    def __init__(self) -> None:
        self.seen: list[Sequence[ChatMessage]] = []

    def stream(self, messages: Sequence[ChatMessage]) -> Iterator[str]:
        self.seen.append(messages)
        yield from ("It says so ", "[2][9].")


def test_a_plain_python_chat_model_answers_with_page_images_and_citations(tmp_path: Path):
    image = tmp_path / "p.png"
    Image.new("RGB", (40, 20), "red").save(image)
    pages = [
        AnswerPage("d:1", "first", {"filename": "a.pdf", "page_no": 1, "image_path": str(image)}),
        AnswerPage("d:2", "second", {"source": "/b.pdf", "page_no": 2, "score": 1.5}),
    ]
    chat = EchoChat()
    assert isinstance(chat, ChatModel)
    result = answering.answer_pages("why?", pages, chat)
    assert result["answer"] == "It says so [2][9]."
    (cited,) = result["citations"]  # [9] is not a page shown: ignored
    assert cited["ref"] == 2 and cited["label"] == "/b.pdf, page 2" and cited["score"] == 1.5
    system, user = chat.seen[0]
    assert system == {"role": "system", "content": answering.DEFAULT_SYSTEM_PROMPT}
    types = [block["type"] for block in user["content"]]
    assert types == ["text", "image", "text", "text", "text"]  # page 2 has no image: its text
    assert user["content"][0]["text"] == "[1] a.pdf, page 1"
    assert user["content"][1]["mime_type"] == "image/jpeg" and user["content"][1]["base64"]
    assert user["content"][-1]["text"] == "Question: why?"


def test_without_a_chat_model_plugin_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
):
    broken = EntryPoint("broken", "no_such_module_here:load", answering.CHAT_MODEL_PLUGINS)
    monkeypatch.setattr(answering, "entry_points", lambda group: [broken])
    with pytest.raises(NoChatModelError, match=r"pip install 'vrag-compress\[ask\]'"):
        answering.load_chat_model("openai:gpt-4o-mini")


def test_the_first_plugin_that_loads_makes_the_chat_model(monkeypatch: pytest.MonkeyPatch):
    plugin = EntryPoint("echo", f"{__name__}:EchoChat", answering.CHAT_MODEL_PLUGINS)
    monkeypatch.setattr(answering, "entry_points", lambda group: [plugin])
    monkeypatch.setattr(EchoChat, "__init__", lambda self, spec=None: setattr(self, "seen", []))
    assert isinstance(answering.load_chat_model("echo:model"), EchoChat)
