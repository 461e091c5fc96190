"""The multimodal QA chain against fake chat models: images sent, answers cited."""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import GenericFakeChatModel, ParrotFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from PIL import Image
from vrag_compress import VisualIndex

from langchain_vrag_compress import (
    CompressedColPaliRetriever,
    citations,
    create_visual_qa_chain,
    pages_to_message,
)


class RecordMessages(BaseCallbackHandler):
    """Keeps the messages every chat model call received."""

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kw: Any):
        self.calls.extend(messages)


def _images(message: BaseMessage) -> list[Image.Image]:
    """Decoded image blocks (callbacks see them in the OpenAI data-URL form used for tracing)."""
    out = []
    for block in message.content:
        if isinstance(block, dict) and block.get("type") == "image":
            out.append(block["base64"])
        elif isinstance(block, dict) and block.get("type") == "image_url":
            out.append(block["image_url"]["url"].split("base64,", 1)[1])
    return [Image.open(io.BytesIO(base64.b64decode(data))) for data in out]


def _fake(*answers: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(a) for a in answers]))


@pytest.fixture()
def retriever(page_index: VisualIndex) -> CompressedColPaliRetriever:
    return CompressedColPaliRetriever(index=page_index, k=3, image_format="png")


def test_chain_sends_the_retrieved_page_images(retriever) -> None:
    chain = create_visual_qa_chain(retriever, ParrotFakeChatModel(), image_format="png")
    result = chain.invoke("firearm background checks")
    docs = result["documents"]
    assert len(docs) == 3 and docs[0].metadata["page"] == 2
    recorder = RecordMessages()
    chain.invoke("firearm background checks", config={"callbacks": [recorder]})
    system, human = recorder.calls[0]
    assert isinstance(system, SystemMessage) and "[1]" in system.content
    images = _images(human)
    assert len(images) == 3
    for image, doc in zip(images, docs, strict=True):
        with Image.open(doc.metadata["image_path"]) as stored:
            assert image.tobytes() == stored.convert("RGB").tobytes()
    labels = [b["text"] for b in human.content if b.get("type") == "text"]
    assert labels[0] == "[1] a.pdf, page 2" and labels[-1] == "Question: firearm background checks"
    assert "Question: firearm background checks" in result["answer"]  # the parrot echoes it


def test_chain_returns_answer_with_right_citations(retriever) -> None:
    answer = "Checks rose in November [1], see also [3, 9]."
    chain = create_visual_qa_chain(retriever, _fake(answer))
    result = chain.invoke({"question": "firearm background checks"})
    assert result["answer"].startswith("Checks rose")
    cited = result["citations"]
    assert [c["ref"] for c in cited] == [1, 3]  # [9] does not exist and is dropped
    first = (cited[0]["page_id"], cited[0]["source"], cited[0]["page"])
    assert first == ("a:2", "/corpus/a.pdf", 2)
    assert cited[1]["page_id"] == result["documents"][2].id


def test_chatbot_with_message_history(retriever) -> None:
    chain = create_visual_qa_chain(retriever, _fake("About checks [1].", "In 2015 [2]."))
    recorder = RecordMessages()
    history: list[BaseMessage] = []
    for question in ["firearm background checks", "which year for the layoffs"]:
        result = chain.invoke(
            {"question": question, "history": history}, config={"callbacks": [recorder]}
        )
        history += [HumanMessage(question), AIMessage(result["answer"])]
    assert result["answer"] == "In 2015 [2]."
    messages = recorder.calls[1]
    assert [type(m).__name__ for m in messages] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "HumanMessage",
    ]
    assert messages[1].content == "firearm background checks"
    assert messages[2].content == "About checks [1]."
    assert len(_images(messages[3])) == 3  # only the new question carries page images


async def test_chain_async(retriever) -> None:
    chain = create_visual_qa_chain(retriever, _fake("Warn notices [1]."))
    result = await chain.ainvoke("warn layoffs california")
    assert result["citations"][0]["page_id"] == "a:3"


def test_pages_to_message_openai_style_and_text_entries() -> None:
    from langchain_core.documents import Document

    page = Document(
        page_content="layer",
        metadata={
            "image_base64": "QUJD",
            "image_mime_type": "image/png",
            "filename": "r.pdf",
            "page": 4,
        },
    )
    note = Document(page_content="a plain note", metadata={})
    message = pages_to_message("q?", [page, note], block_style="openai", include_text=True)
    blocks = message.content
    assert blocks[0] == {"type": "text", "text": "[1] r.pdf, page 4"}
    assert blocks[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}
    assert blocks[2]["text"] == "layer" and blocks[4]["text"] == "a plain note"
    with pytest.raises(ValueError, match="block_style"):
        pages_to_message("q", [page], block_style="nope")  # type: ignore[arg-type]
    assert citations("no refs here", [page]) == []


def test_create_retrieval_chain_from_langchain_classic(retriever) -> None:
    classic = pytest.importorskip("langchain_classic.chains")
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain
    from langchain_core.prompts import ChatPromptTemplate

    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer from these pages:\n{context}"), ("human", "{input}")]
    )
    chain = classic.create_retrieval_chain(
        retriever, create_stuff_documents_chain(_fake("From the handbook."), prompt)
    )
    recorder = RecordMessages()
    result = chain.invoke({"input": "aviation handbook"}, config={"callbacks": [recorder]})
    assert result["answer"] == "From the handbook."
    assert result["context"][0].metadata["page_id"] == "b:1"
    assert "aviation maintenance handbook aircraft" in recorder.calls[0][0].content


def test_citations_carry_regions_and_the_message_can_send_a_crop() -> None:
    from langchain_core.documents import Document

    page = Image.new("RGB", (200, 100), "white")
    page.paste((255, 0, 0), (100, 50, 200, 100))  # the matched quarter is red
    buffer = io.BytesIO()
    page.save(buffer, "PNG")
    region = {"x0": 0.5, "y0": 0.5, "x1": 1.0, "y1": 1.0, "score": 1.2, "patches": 4}
    document = Document(
        page_content="",
        metadata={
            "image_base64": base64.b64encode(buffer.getvalue()).decode(),
            "image_mime_type": "image/png",
            "filename": "r.pdf",
            "page": 2,
            "regions": [region],
        },
    )
    message = pages_to_message("q?", [document], image_format="png", crop_regions=True)
    crop_label = message.content[2]["text"]
    assert crop_label == "[1] matched region of that page (x 50%-100%, y 50%-100%)"
    full, crop = _images(message)
    assert full.size == (200, 100) and crop.size == (100, 50)
    assert set(crop.convert("RGB").getdata()) == {(255, 0, 0)}
    assert len(_images(pages_to_message("q?", [document], image_format="png"))) == 1
    assert citations("see [1]", [document])[0]["regions"] == [region]


def test_stream_yields_documents_then_answer_tokens_then_citations(retriever) -> None:
    answer = "Checks rose in November [1] and fell in December [2]."
    chunks = list(create_visual_qa_chain(retriever, _fake(answer)).stream("firearm checks"))
    keys = [next(iter(c)) if len(c) == 1 else "input" for c in chunks]
    pieces = [c["answer"] for c in chunks if "answer" in c]
    assert len(pieces) > 5, "the answer must arrive token by token"
    assert "".join(pieces) == answer
    assert keys.index("documents") < keys.index("answer")
    assert keys[-1] == "citations" and "citations" not in keys[:-1]
    assert [c["ref"] for c in chunks[-1]["citations"]] == [1, 2]


async def test_astream_ends_with_citations(retriever) -> None:
    chain = create_visual_qa_chain(retriever, _fake("Yes [1]."))
    chunks = [c async for c in chain.astream("firearm checks")]
    assert "".join(c.get("answer", "") for c in chunks) == "Yes [1]."
    assert [c["ref"] for c in chunks[-1]["citations"]] == [1]
