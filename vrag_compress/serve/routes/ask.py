"""``POST /api/ask``: an answer from the retrieved page images, streamed as NDJSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from vrag_compress.answering import (
    AnswerPage,
    ChatModel,
    answer_messages,
    hit_pages,
    page_reference,
)
from vrag_compress.encoders.errors import EncoderLoadError
from vrag_compress.index import VisualIndexError
from vrag_compress.ingest import IngestError
from vrag_compress.serve.deps import READS, ApiError, check_query, server_of
from vrag_compress.serve.guards import public_hit
from vrag_compress.serve.routes.search import MAX_NEIGHBOURS
from vrag_compress.serve.server import Server
from vrag_compress.store import StoreError
from vrag_compress.store.filters import parse_user_filter

router = APIRouter(dependencies=READS, tags=["search"])


class AskRequest(BaseModel):
    """The body of ``POST /api/ask``."""

    question: str = Field(min_length=1, description="The question to answer from the pages.")
    k: int = Field(3, ge=1, description="Pages to retrieve and send to the chat model.")
    filter: dict[str, Any] | None = Field(None, description="Metadata filter (JSON object).")
    neighbours: int = Field(
        0,
        ge=0,
        le=MAX_NEIGHBOURS,
        description="Also send the N pages before and after each retrieved page (an answer "
        "that runs over a page break); the answer cites whichever page it came from.",
    )


@router.post("/api/ask")
def ask(body: AskRequest, server: Server = Depends(server_of)) -> StreamingResponse:
    """Answer a question from the retrieved page images with the chat model given by
    ``--llm``; with ``neighbours`` each page comes with the pages around it. Streams NDJSON:
    ``{"type": "citations"}`` (every page sent, with its regions), then
    ``{"type": "token", "text"}`` pieces, then ``{"type": "done", "answer"}``."""
    if server.chat_model is None:
        raise ApiError(400, no_llm_message())
    question, k, where = body.question, body.k, body.filter
    check_query("question", question, k, server.config.max_k)
    try:
        hits = server.reader.search(
            question, k=k, filter=parse_user_filter(where), neighbours=body.neighbours
        )
    except (ValueError, EncoderLoadError, StoreError) as error:
        raise ApiError(400, str(error)) from error
    if not hits:
        raise ApiError(404, f"{server.root.name}: the index has no pages to answer from")
    try:  # the images are read before the stream starts, so a missing one is a 404
        pages = hit_pages(hits, image_base64=True)
    except (IngestError, OSError, ValueError, VisualIndexError) as error:
        reason = f"its source file {error.reason}" if isinstance(error, IngestError) else error
        raise ApiError(404, f"a retrieved page has no image to answer from: {reason}") from error
    return StreamingResponse(
        _answer_stream(server.chat_model, question, pages, server.root),
        media_type="application/x-ndjson",
    )


def no_llm_message() -> str:
    return "no LLM configured: start the server with --llm PROVIDER:MODEL (or VRAG_LLM)"


def _answer_stream(
    chat_model: ChatModel, question: str, pages: list[AnswerPage], root: Path
) -> Iterator[bytes]:
    cited = [
        public_hit(
            {
                **page_reference(n, page),
                "page_no": page.metadata.get("page_no"),
                "filename": page.metadata.get("filename"),
            },
            root,
        )
        for n, page in enumerate(pages, start=1)
    ]
    yield _line({"type": "citations", "citations": cited})
    parts: list[str] = []
    try:
        for text in chat_model.stream(answer_messages(question, pages)):
            if text:
                parts.append(text)
                yield _line({"type": "token", "text": text})
    except Exception as error:  # provider errors: missing key, network, refused images
        yield _line(
            {"type": "error", "error": f"the chat model failed: {type(error).__name__}: {error}"}
        )
        return
    yield _line({"type": "done", "answer": "".join(parts)})


def _line(payload: dict[str, Any]) -> bytes:
    return (json.dumps(payload, default=str) + "\n").encode()
