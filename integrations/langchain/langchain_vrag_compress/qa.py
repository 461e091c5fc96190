"""Multimodal question answering over retrieved pages: prompt builder, citations, LCEL chain.

The chain is ``question -> retrieve pages -> [system, *history, HumanMessage(page images +
question)] -> chat model -> {"answer", "citations", ...}``. Pages are numbered [1]..[k] in the
prompt; the model is asked to cite those numbers and `citations` maps them back to pages.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Literal

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableGenerator,
    RunnableLambda,
    RunnablePassthrough,
)
from langchain_core.runnables.utils import AddableDict

from langchain_vrag_compress._documents import page_image_base64, region_crop_base64

DEFAULT_SYSTEM_PROMPT = (
    "You answer questions about document pages, shown to you as numbered page images. "
    "Use only what the pages show. Cite every page you use by its number in square brackets, "
    "e.g. [1] or [2][3]. If the pages do not contain the answer, say so."
)

BlockStyle = Literal["standard", "openai"]
_CITATION = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


def page_label(document: Document) -> str:
    """A short human-readable name for a retrieved page: ``report.pdf, page 3``."""
    meta = document.metadata
    name = meta.get("filename") or meta.get("source") or meta.get("doc_id") or document.id
    page = meta.get("page_no", meta.get("page"))
    return f"{name}, page {page}" if page is not None else str(name)


def _image_block(data: str, mime: str, style: BlockStyle) -> dict[str, Any]:
    if style == "openai":
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
    return {"type": "image", "base64": data, "mime_type": mime}


def pages_to_message(
    question: str,
    documents: Sequence[Document],
    *,
    include_text: bool = False,
    block_style: BlockStyle = "standard",
    image_format: str = "jpeg",
    image_max_side: int | None = 1024,
    crop_regions: bool = False,
) -> HumanMessage:
    """One `HumanMessage`: per page a ``[n] label`` text block and its image, then the question.

    Images come from `image_base64` in the metadata (retriever with `include_image_base64`) or are
    read from `image_path`. Entries without an image (plain texts) contribute their text.
    ``block_style="standard"`` emits LangChain v1 image blocks; ``"openai"`` emits ``image_url``
    data URLs for providers that only take those. ``include_text`` adds each page's text
    (its text layer, or OCR text for scans). ``crop_regions`` adds, after each page image, a crop
    of the page's top matched region (``regions`` in the metadata, see `Hit.regions`).
    """
    if block_style not in ("standard", "openai"):
        raise ValueError(f"block_style must be 'standard' or 'openai', got {block_style!r}")
    blocks: list[str | dict[str, Any]] = []
    for number, document in enumerate(documents, start=1):
        blocks.append({"type": "text", "text": f"[{number}] {page_label(document)}"})
        image = page_image_base64(document, image_format, image_max_side)
        if image is not None:
            blocks.append(_image_block(*image, block_style))
        crop = region_crop_base64(document, image_format, image_max_side) if crop_regions else None
        if crop is not None:
            blocks.append({"type": "text", "text": f"[{number}] {region_label(document)}"})
            blocks.append(_image_block(*crop, block_style))
        if image is None or (include_text and document.page_content):
            blocks.append({"type": "text", "text": document.page_content})
    blocks.append({"type": "text", "text": f"Question: {question}"})
    return HumanMessage(content=blocks)


def region_label(document: Document) -> str:
    """Where the top matched region lies on its page, in percent of width and height."""
    box = document.metadata["regions"][0]
    return (
        f"matched region of that page (x {box['x0']:.0%}-{box['x1']:.0%}, "
        f"y {box['y0']:.0%}-{box['y1']:.0%})"
    )


def cited_numbers(answer: str) -> list[int]:
    """Page numbers cited as ``[n]`` or ``[n, m]`` in an answer, in first-mention order."""
    numbers: dict[int, None] = {}
    for match in _CITATION.finditer(answer):
        for part in match.group(1).split(","):
            numbers[int(part)] = None
    return list(numbers)


def page_reference(number: int, document: Document) -> dict[str, Any]:
    """How page ``[number]`` of a prompt is reported back: label, source, page, ids, score."""
    meta = document.metadata
    return {
        "ref": number,
        "label": page_label(document),
        "source": meta.get("source"),
        "page_no": meta.get("page_no", meta.get("page")),
        "page": meta.get("page_no", meta.get("page")),
        "doc_id": meta.get("doc_id"),
        "page_id": document.id,
        "score": meta.get("score"),
        "regions": meta.get("regions") or [],
    }


def citations(answer: str, documents: Sequence[Document]) -> list[dict[str, Any]]:
    """The pages an answer cites; numbers outside 1..len(documents) are ignored."""
    return [
        page_reference(number, documents[number - 1])
        for number in cited_numbers(answer)
        if 1 <= number <= len(documents)
    ]


class NoChatModelError(RuntimeError):
    """The chat model named cannot be loaded; the message says what to install or set."""


def load_chat_model(spec: str) -> BaseChatModel:
    """``provider:model`` (e.g. ``openai:gpt-4o-mini``) through LangChain's `init_chat_model`."""
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as error:
        provider = spec.split(":")[0]
        raise NoChatModelError(
            f"chat model {spec!r} needs LangChain: pip install langchain langchain-{provider}"
        ) from error
    try:
        return init_chat_model(spec)
    except Exception as error:  # provider packages raise many kinds of errors here
        raise NoChatModelError(f"could not load chat model {spec!r}: {error}") from error


def qa_messages(
    question: str,
    documents: Sequence[Document],
    *,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    history: Sequence[BaseMessage] = (),
    **message_options: Any,
) -> list[BaseMessage]:
    """``[system, *history, HumanMessage(page images + question)]``, as the chain sends them."""
    human = pages_to_message(question, documents, **message_options)
    return [SystemMessage(content=system_prompt), *history, human]


def answer_pages(
    question: str,
    documents: Sequence[Document],
    llm: BaseChatModel,
    *,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    **message_options: Any,
) -> dict[str, Any]:
    """Ask ``llm`` about already retrieved pages: ``{"question", "answer", "citations"}``.

    The chain without its retriever, for callers that searched themselves (the `vrag ask` command).
    """
    messages = qa_messages(question, documents, system_prompt=system_prompt, **message_options)
    answer = (llm | StrOutputParser()).invoke(messages)
    return {"question": question, "answer": answer, "citations": citations(answer, documents)}


def _as_input(value: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, str):
        return {"question": value}
    if "question" not in value:
        raise ValueError(f"the chain input needs a 'question' key, got keys {sorted(value)}")
    return value


def create_visual_qa_chain(
    retriever: BaseRetriever,
    llm: BaseChatModel,
    *,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    history_key: str = "history",
    **message_options: Any,
) -> Runnable:
    """LCEL chain: a question (str, or dict with ``question`` and optional ``history``) in,
    ``{"question", "answer", "citations", "documents"}`` out.

    ``stream()`` yields the question and the retrieved documents first, then the answer token by
    token (``{"answer": "..."}`` pieces, as the chat model streams), then ``{"citations": [...]}``
    once the answer is complete.

    ``history`` is a list of earlier messages placed between the system prompt and the new
    multimodal question (see `RunnableWithMessageHistory` in the README for a chatbot).
    ``message_options`` go to `pages_to_message`.
    """

    def build_messages(state: dict[str, Any]) -> list[BaseMessage]:
        return qa_messages(
            state["question"],
            state["documents"],
            system_prompt=system_prompt,
            history=list(state.get(history_key) or []),
            **message_options,
        )

    retrieve = RunnableLambda(lambda state: state["question"]) | retriever
    answer = RunnableLambda(build_messages) | llm | StrOutputParser()
    return (
        RunnableLambda(_as_input)
        | RunnablePassthrough.assign(documents=retrieve)
        | RunnablePassthrough.assign(answer=answer)
        | RunnableGenerator(_pass_then_cite, _apass_then_cite)
    ).with_config(run_name="VisualQAChain")


def _pass_then_cite(chunks: Iterator[dict[str, Any]]) -> Iterator[AddableDict]:
    """Forward the streamed pieces as they come, then the citations of the whole answer."""
    state = AddableDict()
    for chunk in chunks:
        state = state + AddableDict(chunk)
        yield AddableDict(chunk)
    yield AddableDict(citations=citations(state.get("answer", ""), state.get("documents", [])))


async def _apass_then_cite(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[AddableDict]:
    state = AddableDict()
    async for chunk in chunks:
        state = state + AddableDict(chunk)
        yield AddableDict(chunk)
    yield AddableDict(citations=citations(state.get("answer", ""), state.get("documents", [])))
