"""PDFs -> compressed visual index -> LangChain chain that answers with page citations.

Runs offline by default: the tiny random `tiny-colqwen2` model (retrieval is meaningless, the
plumbing is real) and a placeholder chat model. For real answers use a real Col* checkpoint
and any LangChain chat model (needs `pip install langchain langchain-openai` or similar):

    python examples/langchain_qa.py ../shared/data/pdfs/gov \\
        --model vidore/colqwen2-v1.0 --llm openai:gpt-4o-mini \\
        --question "How many firearm background checks were there in Texas?"

`--chat` starts a chatbot that keeps the conversation history (one question a line on stdin).
"""

from __future__ import annotations

import argparse
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from langchain_core.language_models import BaseChatModel, GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langchain_vrag_compress import CompressedColPaliRetriever, create_visual_qa_chain  # noqa: E402

from vrag_compress import VisualIndex  # noqa: E402
from vrag_compress.shared_data import data_dir  # noqa: E402

PLACEHOLDER = (
    "(offline placeholder model; pass --llm provider:model for a real answer) "
    "The most relevant page is [1]."
)


def load_llm(spec: str | None) -> BaseChatModel:
    """A chat model from ``provider:model`` via `langchain.chat_models`, or the placeholder."""
    if not spec:
        return GenericFakeChatModel(messages=itertools.repeat(AIMessage(PLACEHOLDER)))
    from langchain.chat_models import init_chat_model

    return init_chat_model(spec)


def open_index(path: Path, model: str, documents: list[Path]) -> VisualIndex:
    """Open the index folder (or create it) and add the documents; unchanged files are skipped."""
    index = VisualIndex.open_or_create(path, model=model)
    report = index.add(documents, progress=True)
    for failure in report.failures:
        print(f"not indexed: {failure}")
    return index


def show(result: dict) -> None:
    print(f"\nQ: {result['question']}\nA: {result['answer']}")
    for citation in result["citations"]:
        print(f"  [{citation['ref']}] {citation['label']}  (score {citation['score']:.2f})")
    print(
        "retrieved:",
        ", ".join(f"{d.metadata['filename']} p{d.metadata['page']}" for d in result["documents"]),
    )


def typed_questions() -> Iterator[str]:
    """Questions typed on stdin, one a line, until an empty line or the end of the input."""
    while True:
        try:
            question = input("> ")
        except EOFError:
            return
        if not question:
            return
        yield question


def chat(chain, first: str | None) -> None:
    """A chatbot: history is the list of earlier turns, passed with every question."""
    history: list[BaseMessage] = []
    for question in itertools.chain([first] if first else [], typed_questions()):
        result = chain.invoke({"question": question, "history": history})
        show(result)
        history += [HumanMessage(question), AIMessage(result["answer"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "documents",
        nargs="*",
        type=Path,
        default=[data_dir() / "pdfs" / "gov" / "nics-background-checks-2015-11.pdf"],
    )
    parser.add_argument("--model", default="tiny-colqwen2", help="Col* model id or local path")
    parser.add_argument("--index", type=Path, default=Path("out/langchain-demo.vrag"))
    parser.add_argument("--question", default="How many firearm background checks were there?")
    parser.add_argument("--llm", default=None, help="chat model as provider:model")
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--chat", action="store_true", help="keep asking (stdin), with history")
    args = parser.parse_args()

    with open_index(args.index, args.model, args.documents) as index:
        retriever = CompressedColPaliRetriever(index=index, k=args.k)
        chain = create_visual_qa_chain(retriever, load_llm(args.llm))
        if args.chat:
            chat(chain, args.question)
        else:
            show(chain.invoke(args.question))


if __name__ == "__main__":
    main()
