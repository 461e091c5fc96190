"""Text-only QA chains over a scanned PDF get the OCR'd page text (LangChain and LlamaIndex)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from vrag_compress import VisualIndex, get_compressor

if TYPE_CHECKING:
    from langchain_core.documents import Document
    from langchain_core.language_models import BaseChatModel

# LangChain, LlamaIndex and RapidOCR are imported where used, not at module level: collecting
# this module runs in every pytest-xdist worker, and only the worker that runs it needs them.

pytestmark = pytest.mark.slow  # end to end with real models and data

SCAN_WORDS = ("docling", "json", "markdown", "contained", "package")


@functools.cache
def text_only_chat_model() -> type[BaseChatModel]:
    """The class of `TextOnlyChatModel`, defined on first use (it subclasses LangChain's)."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from pydantic import Field

    class TextOnlyChatModel(BaseChatModel):
        """A fake chat model that accepts only plain-text messages and records what it was sent."""

        prompts: list[str] = Field(default_factory=list)

        @property
        def _llm_type(self) -> str:
            return "text-only-fake"

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            for message in messages:
                if not isinstance(message.content, str):
                    raise ValueError("this text-only model cannot read image content blocks")
            prompt = "\n".join(str(m.content) for m in messages)
            self.prompts.append(prompt)
            answer = "Docling" if "docling" in prompt.lower() else "I don't know"
            return ChatResult(generations=[ChatGeneration(message=AIMessage(answer))])

    return TextOnlyChatModel


@pytest.fixture(scope="module")
def scan_index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    """A scanned PDF (OCR'd) and a born-digital one (text layer), indexed with `ocr="auto"`."""
    import rapidocr_onnxruntime  # noqa: F401  (dev extra and integrations: fail, never skip)

    index = VisualIndex.create(
        tmp_path_factory.mktemp("ocr") / "idx",
        model="tiny-colqwen2",
        compressor=get_compressor("sap", ratio=0.25, layers=[0, 1]),
    )
    pdfs = shared_data / "pdfs"
    report = index.add(
        [pdfs / "edge" / "ocr_test.pdf", pdfs / "gov" / "scotus-transcript-p1.pdf"], progress=False
    )
    assert report.ok and len(report.ocr_pages) == 1
    yield index
    index.close()


def format_docs(documents: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in documents)


def test_hits_carry_ocr_text(scan_index: VisualIndex):
    hits = scan_index.search("document conversion", k=2)
    scan = next(h for h in hits if h.metadata["filename"] == "ocr_test.pdf")
    assert scan.metadata["text_source"] == "ocr"
    assert all(w in scan.text.lower() for w in SCAN_WORDS)


def test_lcel_chain_gives_a_text_only_llm_the_ocr_text(scan_index: VisualIndex):
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_vrag_compress import CompressedColPaliRetriever

    retriever = CompressedColPaliRetriever(index=scan_index, k=2)
    llm = text_only_chat_model()()
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer only from these pages:\n\n{context}"), ("human", "{question}")]
    )
    chain = (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | prompt
        | llm
        | StrOutputParser()
    )
    answer = chain.invoke("Which tool converts PDF documents to JSON and Markdown?")
    assert answer == "Docling"
    [sent] = llm.prompts
    assert all(w in sent.lower() for w in SCAN_WORDS)
    assert "supreme court" in sent.lower(), "the born-digital page keeps its text layer"


def test_create_retrieval_chain_gives_a_text_only_llm_the_ocr_text(scan_index: VisualIndex):
    from langchain_classic import chains
    from langchain_classic.chains import combine_documents as combine
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_vrag_compress import CompressedColPaliRetriever

    retriever = CompressedColPaliRetriever(
        index=scan_index, k=1, filter={"filename": "ocr_test.pdf"}
    )
    llm = text_only_chat_model()()
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Context:\n{context}"), ("human", "{input}")]
    )
    chain = chains.create_retrieval_chain(
        retriever, combine.create_stuff_documents_chain(llm, prompt)
    )
    result = chain.invoke({"input": "What does Docling bundle?"})
    assert result["answer"] == "Docling"
    [document] = result["context"]
    assert document.metadata["text_source"] == "ocr" and "Markdown" in document.page_content
    assert all(w in llm.prompts[0].lower() for w in SCAN_WORDS)


def test_llamaindex_text_query_engine_gets_the_ocr_text(scan_index: VisualIndex):
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.schema import ImageNode
    from llama_index.retrievers import vrag_compress as retrievers

    retriever = retrievers.CompressedColPaliRetriever(
        scan_index, similarity_top_k=1, filters={"filename": "ocr_test.pdf"}
    )
    [found] = retriever.retrieve("document conversion")
    assert isinstance(found.node, ImageNode) and found.node.image_path  # images stay available
    assert all(w in found.node.text.lower() for w in SCAN_WORDS)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query("What does Docling bundle?")  # MockLLM echoes the prompt it got
    assert all(w in str(response).lower() for w in SCAN_WORDS)
