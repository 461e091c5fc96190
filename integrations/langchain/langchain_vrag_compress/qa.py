"""Multimodal question answering over retrieved pages: prompt builder, citations, LCEL chain.

The chain is ``question -> retrieve pages -> [system, *history, HumanMessage(page images +
question)] -> chat model -> {"answer", "citations", ...}``. Pages are numbered [1]..[k] in the
prompt; the model is asked to cite those numbers and `citations` maps them back to pages. The
prompt, the page blocks and the citations are vrag_compress's own (`vrag ask` and `vrag serve`
answer the same way); this module adapts them to LangChain documents and messages, and
`LangChainChatModel` adapts a LangChain chat model to vrag_compress's `ChatModel` protocol.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Literal

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableGenerator,
    RunnableLambda,
    RunnablePassthrough,
)
from langchain_core.runnables.utils import AddableDict
from vrag_compress import DEFAULT_SYSTEM_PROMPT, AnswerPage, NoChatModelError, cited_numbers
from vrag_compress import citations as _citations
from vrag_compress import page_blocks as _page_blocks
from vrag_compress import page_label as _page_label
from vrag_compress import page_reference as _page_reference
from vrag_compress import region_label as _region_label

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "LangChainChatModel",
    "NoChatModelError",
    "answer_pages",
    "cited_numbers",
    "citations",
    "create_visual_qa_chain",
    "load_chat_model",
    "load_vrag_chat_model",
    "page_label",
    "page_reference",
    "pages_to_message",
    "qa_messages",
    "region_label",
]

BlockStyle = Literal["standard", "openai"]


def _page(document: Document) -> AnswerPage:
    return AnswerPage(document.id, document.page_content, document.metadata)


def page_label(document: Document) -> str:
    """A short human-readable name for a retrieved page: ``report.pdf, page 3``."""
    return _page_label(_page(document))


def region_label(document: Document) -> str:
    """Where the top matched region lies on its page, in percent of width and height."""
    return _region_label(_page(document))


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
    blocks = _page_blocks(
        question,
        [_page(d) for d in documents],
        include_text=include_text,
        block_style=block_style,
        image_format=image_format,
        image_max_side=image_max_side,
        crop_regions=crop_regions,
    )
    return HumanMessage(content=blocks)  # type: ignore[arg-type]


def page_reference(number: int, document: Document) -> dict[str, Any]:
    """How page ``[number]`` of a prompt is reported back: label, source, page, ids, score."""
    return _page_reference(number, _page(document))


def citations(answer: str, documents: Sequence[Document]) -> list[dict[str, Any]]:
    """The pages an answer cites; numbers outside 1..len(documents) are ignored."""
    return _citations(answer, [_page(d) for d in documents])


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


def _langchain_message(message: dict[str, Any]) -> BaseMessage:
    kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
    return kinds[message["role"]](content=message["content"])


class LangChainChatModel:
    """A LangChain chat model as vrag_compress's `ChatModel` (what `vrag ask` and `vrag serve`
    call): vrag_compress's messages in, the answer's text pieces out."""

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model

    def stream(self, messages: Sequence[dict[str, Any]]) -> Iterator[str]:
        """The answer's text pieces as the LangChain model streams them."""
        for chunk in self.model.stream([_langchain_message(m) for m in messages]):
            text = chunk.content if isinstance(chunk.content, str) else str(chunk.content)
            if text:
                yield text


def load_vrag_chat_model(spec: str) -> LangChainChatModel:
    """The ``vrag_compress.chat_models`` plugin: ``provider:model`` as a `ChatModel`."""
    return LangChainChatModel(load_chat_model(spec))


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
