"""Answer a question from retrieved page images with a multimodal chat model, citing pages.

LangChain is optional: it is imported only here, only when `ask` runs. Images travel as base64
``image_url`` content blocks, which LangChain's multimodal chat models accept.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Any

from vrag_compress.index import Hit

SYSTEM_PROMPT = (
    "You answer questions about documents using only the page images provided. "
    "Each page is labelled [n]. Cite the pages you used as [n]. "
    "If the pages do not contain the answer, say so."
)


class NoLLMConfigured(RuntimeError):
    """`ask` needs a chat model and none was given or could be loaded."""


@dataclass
class Answer:
    question: str
    answer: str
    citations: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "answer": self.answer, "citations": self.citations}


def load_chat_model(spec: str | None) -> Any:
    """``provider:model`` (e.g. ``openai:gpt-4o-mini``) through LangChain's `init_chat_model`."""
    if not spec:
        raise NoLLMConfigured(
            "no LLM configured: pass --llm PROVIDER:MODEL (e.g. openai:gpt-4o-mini) "
            "or set VRAG_LLM; "
            "needs `pip install langchain langchain-<provider>` and the provider's API key"
        )
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as error:
        raise NoLLMConfigured(
            f"--llm {spec} needs LangChain: pip install langchain langchain-{spec.split(':')[0]}"
        ) from error
    try:
        return init_chat_model(spec)
    except Exception as error:  # provider packages raise many kinds of errors here
        raise NoLLMConfigured(f"could not load chat model {spec!r}: {error}") from error


def image_block(hit: Hit, max_side: int = 1280) -> dict[str, Any]:
    """The page image of a hit as a base64 data-URL content block."""
    image = hit.image.copy()
    image.thumbnail((max_side, max_side))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


def citation(number: int, hit: Hit) -> dict[str, Any]:
    return {
        "ref": number,
        "doc_id": hit.doc_id,
        "page_no": hit.page_no,
        "source": hit.source,
        "score": hit.score,
        "regions": [r.to_dict() for r in hit.regions],
    }


def build_messages(question: str, hits: list[Hit]) -> list[Any]:
    """System prompt + one human message: each page's label and image, then the question."""
    from langchain_core.messages import HumanMessage, SystemMessage

    content: list[dict[str, Any]] = []
    for number, hit in enumerate(hits, start=1):
        label = f"[{number}] {hit.metadata.get('filename', hit.doc_id)}, page {hit.page_no}"
        content.append({"type": "text", "text": label})
        content.append(image_block(hit))
    content.append({"type": "text", "text": f"Question: {question}"})
    return [SystemMessage(content=SYSTEM_PROMPT), HumanMessage(content=content)]


def answer_question(question: str, hits: list[Hit], chat_model: Any) -> Answer:
    """Send the retrieved pages to the chat model and attach the page citations."""
    reply = chat_model.invoke(build_messages(question, hits))
    text = reply.content if isinstance(reply.content, str) else str(reply.content)
    return Answer(question, text, [citation(n, h) for n, h in enumerate(hits, start=1)])
