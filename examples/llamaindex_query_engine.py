"""PDFs -> compressed ColPali index -> LlamaIndex query engine that answers with page citations.

Runs offline by default (tiny random ColQwen2 model, LlamaIndex's mock LLM, so the "answer" is
the prompt echoed back); pass a real model and LLM for real answers:

    python examples/llamaindex_query_engine.py ../shared/data/pdfs/gov \
        --question "How many background checks were there in November 2015?"
    python examples/llamaindex_query_engine.py docs/ --model vidore/colqwen2-v1.0 \
        --llm openai:gpt-4o-mini          # needs llama-index-llms-openai and OPENAI_API_KEY
    python examples/llamaindex_query_engine.py docs/ --llm ollama:llava   # llama-index-llms-ollama

Pages are indexed through `VectorStoreIndex` + `VragVectorStore` (files already in the index are
skipped on later runs) and queried with `CompressedColPaliRetriever` in a multimodal
`RetrieverQueryEngine`, so the LLM sees the retrieved page images.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# the shared data folder beside the repository (or $VRAG_DATA_DIR)
DATA_DIR = Path(
    os.environ.get("VRAG_DATA_DIR", Path(__file__).resolve().parents[2] / "shared/data")
)
DEFAULT_PDFS = [str(DATA_DIR / "pdfs" / "edge" / "multi_page.pdf")]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pdfs", nargs="*", default=DEFAULT_PDFS, help="PDF/image files or folders")
    parser.add_argument("--index", default="./vrag-llamaindex", help="index folder")
    parser.add_argument("--model", default="tiny-colqwen2", help="Col* model id or local path")
    parser.add_argument("--compressor", default="sap", help="sap, uot, identity, ...")
    parser.add_argument("--ratio", type=float, default=0.1, help="kept fraction of page vectors")
    parser.add_argument("--question", default="What is this document about?")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--llm", default="mock", help="mock | openai:<model> | ollama:<model>")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", dest="json_out", help="write the answer and citations here")
    return parser.parse_args()


def load_llm(spec: str) -> Any:
    """A chat LLM from `kind[:model]`; integrations are imported only when asked for."""
    kind, _, model = spec.partition(":")
    if kind == "mock":
        from llama_index.core.llms.mock import MockLLM

        return MockLLM(is_chat_model=True)
    try:
        if kind == "openai":
            from llama_index.llms.openai import OpenAI

            return OpenAI(model=model or "gpt-4o-mini")
        if kind == "ollama":
            from llama_index.llms.ollama import Ollama

            return Ollama(model=model or "llava", request_timeout=300)
    except ImportError as error:
        raise SystemExit(f"--llm {spec}: pip install llama-index-llms-{kind} ({error})") from error
    raise SystemExit(f"--llm {spec!r}: use mock, openai:<model> or ollama:<model>")


def index_documents(args: argparse.Namespace):
    """Add every not-yet-indexed file to the VragVectorStore through VectorStoreIndex."""
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.readers.vrag_compress import PageImageNodeParser, PDFPageReader
    from llama_index.vector_stores.vrag_compress import StoreSideEmbedding, VragVectorStore

    store = VragVectorStore.from_path(
        args.index,
        model=args.model,
        compressor=args.compressor,
        ratio=args.ratio,
        device=args.device,
    )
    known = {d.doc_id for d in store.client.documents()}
    documents = [d for d in PDFPageReader().load_data(args.pdfs) if d.id_ not in known]
    if documents:
        VectorStoreIndex.from_documents(
            documents,
            storage_context=StorageContext.from_defaults(vector_store=store),
            transformations=[PageImageNodeParser()],
            embed_model=StoreSideEmbedding(),  # the store encodes pages itself
            show_progress=True,
        )
    print(
        f"index {args.index}: {store.client.store.count()} pages ({len(documents)} new documents)"
    )
    return store


def main() -> None:
    args = parse_args()
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.retrievers.vrag_compress import CompressedColPaliRetriever

    store = index_documents(args)
    retriever = CompressedColPaliRetriever(store.client, similarity_top_k=args.top_k)
    engine = RetrieverQueryEngine.from_args(retriever, llm=load_llm(args.llm), multimodal=True)
    response = engine.query(args.question)
    citations = [
        {
            "rank": rank,
            "file": n.node.metadata.get("filename"),
            "page_no": n.node.metadata.get("page_no"),
            "score": round(float(n.score or 0.0), 4),
            "image_path": getattr(n.node, "image_path", None),
        }
        for rank, n in enumerate(response.source_nodes, start=1)
    ]
    print(f"\nQ: {args.question}\nA: {str(response)[:600]}\n\nSources:")
    for c in citations:
        print(f"  [{c['rank']}] {c['file']}, page {c['page_no']} (MaxSim {c['score']})")
    if args.json_out:
        payload = {"question": args.question, "answer": str(response), "citations": citations}
        Path(args.json_out).write_text(json.dumps(payload, indent=2))
    store.client.close()


if __name__ == "__main__":
    main()
