"""A scanned PDF -> visual index with OCR'd page text -> a *text-only* LangChain chat model.

Scans have no text layer. `VisualIndex.add` (and `vrag index`) OCRs such pages by default
(`ocr="auto"`, needs `pip install 'vrag-compress[ocr]'`), so every retrieved page's
`Document.page_content` holds its text and a text-only model can answer from it, while
retrieval still runs on the page images.

Runs offline by default: the tiny random `tiny-colqwen2` model (with one page, retrieval is
trivially right) and a stand-in model that answers with the context it was sent. For a real
model pass any LangChain chat model, e.g. a small local one:

    python examples/ocr_text_only_qa.py ../shared/data/pdfs/edge/ocr_test.pdf \\
        --model vidore/colqwen2-v1.0 --llm ollama:llama3.2 \\
        --question "What does Docling convert PDFs to?"
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnablePassthrough  # noqa: E402
from langchain_vrag_compress import CompressedColPaliRetriever  # noqa: E402

from vrag_compress import VisualIndex  # noqa: E402
from vrag_compress.shared_data import data_dir  # noqa: E402

PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer from these document pages only; cite them as [n].\n\n{context}"),
        ("human", "{question}"),
    ]
)


class ContextEchoModel(BaseChatModel):
    """Offline stand-in for a text-only LLM: refuses images, answers with the text it got."""

    @property
    def _llm_type(self) -> str:
        return "context-echo"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if any(not isinstance(m.content, str) for m in messages):
            raise ValueError("a text-only model cannot read image blocks")
        context = str(messages[0].content).split("\n\n", 1)[-1]
        answer = f"(offline stand-in; pass --llm provider:model) The pages say:\n{context}"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(answer))])


def load_llm(spec: str | None) -> BaseChatModel:
    if not spec:
        return ContextEchoModel()
    from langchain.chat_models import init_chat_model  # pip install langchain + a provider

    return init_chat_model(spec)


def format_pages(documents: list[Document]) -> str:
    """Numbered page texts with their source, the way a text-only prompt wants them."""
    return "\n\n".join(
        f"[{n}] {d.metadata['filename']}, page {d.metadata['page']} "
        f"(text from {d.metadata.get('text_source', '?')}):\n{d.page_content or '(no text)'}"
        for n, d in enumerate(documents, start=1)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_pdf = data_dir() / "pdfs" / "edge" / "ocr_test.pdf"
    parser.add_argument("documents", nargs="*", type=Path, default=[default_pdf])
    parser.add_argument("--model", default="tiny-colqwen2", help="Col* model id or local path")
    parser.add_argument("--index", type=Path, default=Path("out/ocr-demo.vrag"))
    parser.add_argument("--question", default="What does Docling convert PDF documents to?")
    parser.add_argument("--llm", default=None, help="text chat model as provider:model")
    parser.add_argument("-k", type=int, default=3)
    args = parser.parse_args()

    if VisualIndex.exists(args.index):
        index = VisualIndex.open(args.index, model=args.model)
    else:
        index = VisualIndex.create(args.index, model=args.model)
    with index:
        report = index.add(args.documents, ocr="auto")
        print(f"OCR'd {len(report.ocr_pages)} pages; OCR failures: {report.ocr_failures or 'none'}")
        retriever = CompressedColPaliRetriever(index=index, k=args.k)
        chain = (
            {"context": retriever | format_pages, "question": RunnablePassthrough()}
            | PROMPT
            | load_llm(args.llm)
            | StrOutputParser()
        )
        print(f"Q: {args.question}\nA: {chain.invoke(args.question)}")


if __name__ == "__main__":
    main()
