"""Answering a question from retrieved pages, without a framework: the prompt, the page messages,
the citations of pages and regions, and a small chat-model protocol.

`vrag ask` and `vrag serve` answer through this module; chat models come from plugins (the
``vrag_compress.chat_models`` entry-point group; `langchain-vrag-compress` registers one that
loads LangChain's `init_chat_model`), so the core never imports a framework or an integration.
The integrations build their own message types from the same blocks and citations.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from PIL import Image

from vrag_compress.ingest.page_assets import image_base64

if TYPE_CHECKING:
    from vrag_compress.index import Hit

DEFAULT_SYSTEM_PROMPT = (
    "You answer questions about document pages, shown to you as numbered page images. "
    "Use only what the pages show. Cite every page you use by its number in square brackets, "
    "e.g. [1] or [2][3]. If the pages do not contain the answer, say so."
)
CHAT_MODEL_PLUGINS = "vrag_compress.chat_models"  # entry point: callable(spec) -> ChatModel

BlockStyle = Literal["standard", "openai"]
ChatMessage = dict[str, Any]  # {"role": "system" | "user" | "assistant", "content": str | blocks}
_CITATION = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


@runtime_checkable
class ChatModel(Protocol):
    """What answering needs of a chat model: the answer to some messages, as text pieces."""

    def stream(self, messages: Sequence[ChatMessage]) -> Iterable[str]:
        """The answer to ``messages`` (system, history, user), piece by piece."""
        ...


class NoChatModelError(RuntimeError):
    """The chat model named cannot be loaded; the message says what to install or set."""


@dataclass(frozen=True)
class AnswerPage:
    """A retrieved page as answering sees it: id, text and metadata (``page_no``, ``source``,
    ``image_base64`` or ``image_path``, ``regions``, ``score``...), as a framework's document
    carries them."""

    id: str | None
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_hit(
        cls,
        hit: Hit,
        *,
        with_score: bool = True,
        image_base64: bool = False,
        image_format: str = "jpeg",
        image_max_side: int | None = 1024,
    ) -> AnswerPage:
        """The page of a search hit, with its provenance, matched regions and (optionally)
        its image inline as base64."""
        metadata = dict(hit.metadata)
        if hit.components is not None:  # text / hybrid search: each side's rank and score
            metadata["search_components"] = hit.components
        path = hit.image_path
        metadata.update(
            doc_id=hit.doc_id,
            page_no=hit.page_no,
            page=hit.page_no,  # the frameworks' usual key; the same number as page_no
            page_id=hit.page_id,
            source=hit.source,
            image_path=str(path) if path else None,
        )
        if hit.query_ocr is not None:  # an image query whose words OCR read and searched
            metadata["query_ocr"] = hit.query_ocr
        if hit.regions:  # where on the page the query matched (fractions of width and height)
            metadata["regions"] = [r.to_dict() for r in hit.regions]
        if with_score:
            metadata["score"] = hit.score
        if image_base64:
            data, mime = _encode(hit.image, image_format, image_max_side)
            metadata.update(image_base64=data, image_mime_type=mime)
        return cls(hit.page_id, hit.text or "", metadata)


def hit_pages(hits: Sequence[Hit], **from_hit: Any) -> list[AnswerPage]:
    """The pages to answer from: each hit, with the neighbouring pages of its `context`
    (``search(..., neighbours=N)``) around it in page order, every page once. A neighbour's
    metadata names the hit it came with (``neighbour_of``) and has no score, so an answer
    that runs over a page break can cite the page it came from. ``from_hit`` goes to
    `AnswerPage.from_hit`."""
    pages: list[AnswerPage] = []
    seen: set[str] = set()
    for hit in hits:
        for page in hit.pages:
            if page.page_id in seen:
                continue
            seen.add(page.page_id)
            if page is hit:
                pages.append(AnswerPage.from_hit(page, **from_hit))
                continue
            near = AnswerPage.from_hit(page, **{**from_hit, "with_score": False})
            pages.append(replace(near, metadata={**near.metadata, "neighbour_of": hit.page_id}))
    return pages


def page_label(page: AnswerPage) -> str:
    """A short human-readable name for a retrieved page: ``report.pdf, page 3``."""
    meta = page.metadata
    name = meta.get("filename") or meta.get("source") or meta.get("doc_id") or page.id
    number = meta.get("page_no", meta.get("page"))
    return f"{name}, page {number}" if number is not None else str(name)


def region_label(page: AnswerPage) -> str:
    """Where the top matched region lies on its page, in percent of width and height."""
    box = page.metadata["regions"][0]
    return (
        f"matched region of that page (x {box['x0']:.0%}-{box['x1']:.0%}, "
        f"y {box['y0']:.0%}-{box['y1']:.0%})"
    )


def _encode(image: Image.Image, image_format: str, max_side: int | None) -> tuple[str, str]:
    return image_base64(image, image_format, max_side)


def page_image(
    page: AnswerPage, image_format: str = "jpeg", max_side: int | None = 1024
) -> tuple[str, str] | None:
    """``(base64, mime type)`` of the page image, or None for entries without one (texts)."""
    meta = page.metadata
    if meta.get("image_base64"):
        return meta["image_base64"], meta.get("image_mime_type", "image/jpeg")
    if not meta.get("image_path"):
        return None
    with Image.open(meta["image_path"]) as image:
        return _encode(image, image_format, max_side)


def region_crop(
    page: AnswerPage, image_format: str = "jpeg", max_side: int | None = 1024
) -> tuple[str, str] | None:
    """The page's top matched region (``regions[0]``) cropped from its image, as base64."""
    meta = page.metadata
    regions = meta.get("regions") or []
    if not regions:
        return None
    if meta.get("image_base64"):
        image = Image.open(io.BytesIO(base64.b64decode(meta["image_base64"])))
    elif meta.get("image_path"):
        image = Image.open(meta["image_path"])
    else:
        return None
    with image:
        width, height = image.size
        box = regions[0]
        x0, y0 = int(box["x0"] * width), int(box["y0"] * height)
        x1 = max(x0 + 1, round(box["x1"] * width))
        y1 = max(y0 + 1, round(box["y1"] * height))
        crop = image.crop((x0, y0, x1, y1))
    return _encode(crop, image_format, max_side)


def _image_block(data: str, mime: str, style: BlockStyle) -> dict[str, Any]:
    if style == "openai":
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
    return {"type": "image", "base64": data, "mime_type": mime}


def page_blocks(
    question: str,
    pages: Sequence[AnswerPage],
    *,
    include_text: bool = False,
    block_style: BlockStyle = "standard",
    image_format: str = "jpeg",
    image_max_side: int | None = 1024,
    crop_regions: bool = False,
) -> list[dict[str, Any]]:
    """The user message's content: per page a ``[n] label`` text block and its image, then the
    question.

    ``block_style="standard"`` emits ``{"type": "image", "base64", "mime_type"}`` blocks (LangChain
    v1's); ``"openai"`` emits ``image_url`` data URLs. Entries without an image contribute their
    text; ``include_text`` adds every page's text. ``crop_regions`` adds, after each page image,
    a crop of its top matched region.
    """
    if block_style not in ("standard", "openai"):
        raise ValueError(f"block_style must be 'standard' or 'openai', got {block_style!r}")
    blocks: list[dict[str, Any]] = []
    for number, page in enumerate(pages, start=1):
        blocks.append({"type": "text", "text": f"[{number}] {page_label(page)}"})
        image = page_image(page, image_format, image_max_side)
        if image is not None:
            blocks.append(_image_block(*image, block_style))
        crop = region_crop(page, image_format, image_max_side) if crop_regions else None
        if crop is not None:
            blocks.append({"type": "text", "text": f"[{number}] {region_label(page)}"})
            blocks.append(_image_block(*crop, block_style))
        if image is None or (include_text and page.text):
            blocks.append({"type": "text", "text": page.text})
    blocks.append({"type": "text", "text": f"Question: {question}"})
    return blocks


def answer_messages(
    question: str,
    pages: Sequence[AnswerPage],
    *,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    history: Sequence[ChatMessage] = (),
    **block_options: Any,
) -> list[ChatMessage]:
    """``[system, *history, user(page images + question)]``."""
    user = {"role": "user", "content": page_blocks(question, pages, **block_options)}
    return [{"role": "system", "content": system_prompt}, *history, user]


def cited_numbers(answer: str) -> list[int]:
    """Page numbers cited as ``[n]`` or ``[n, m]`` in an answer, in first-mention order."""
    numbers: dict[int, None] = {}
    for match in _CITATION.finditer(answer):
        for part in match.group(1).split(","):
            numbers[int(part)] = None
    return list(numbers)


def page_reference(number: int, page: AnswerPage) -> dict[str, Any]:
    """How page ``[number]`` of a prompt is reported back: label, source, page, ids, score,
    matched regions, and for a neighbouring page the id of the hit it came with."""
    meta = page.metadata
    return {
        "ref": number,
        "label": page_label(page),
        "source": meta.get("source"),
        "page_no": meta.get("page_no", meta.get("page")),
        "page": meta.get("page_no", meta.get("page")),
        "doc_id": meta.get("doc_id"),
        "page_id": page.id,
        "score": meta.get("score"),
        "regions": meta.get("regions") or [],
        "neighbour_of": meta.get("neighbour_of"),
    }


def citations(answer: str, pages: Sequence[AnswerPage]) -> list[dict[str, Any]]:
    """The pages an answer cites; numbers outside 1..len(pages) are ignored."""
    return [
        page_reference(number, pages[number - 1])
        for number in cited_numbers(answer)
        if 1 <= number <= len(pages)
    ]


def answer_pages(
    question: str,
    pages: Sequence[AnswerPage],
    chat_model: ChatModel,
    *,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    **block_options: Any,
) -> dict[str, Any]:
    """Ask ``chat_model`` about already retrieved pages: ``{"question", "answer", "citations"}``."""
    messages = answer_messages(question, pages, system_prompt=system_prompt, **block_options)
    answer = "".join(chat_model.stream(messages))
    return {"question": question, "answer": answer, "citations": citations(answer, pages)}


def load_chat_model(spec: str) -> ChatModel:
    """``provider:model`` (e.g. ``openai:gpt-4o-mini``) through the first installed chat-model
    plugin that loads; `NoChatModelError` says what to install when none is."""
    for plugin in entry_points(group=CHAT_MODEL_PLUGINS):
        try:
            loader = plugin.load()
        except ImportError:  # declared by a package whose framework is not installed
            continue
        return loader(spec)
    raise NoChatModelError(
        f"answering with {spec!r} needs a chat-model plugin: pip install 'vrag-compress[ask]' "
        "(langchain-vrag-compress, langchain) and langchain-<provider> for your chat model"
    )
