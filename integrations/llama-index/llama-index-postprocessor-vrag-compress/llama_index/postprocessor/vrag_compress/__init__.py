"""LlamaIndex node postprocessor of vrag-compress (`llama-index-postprocessor-vrag-compress`).

`VragRerank`: reranks another retriever's nodes by late interaction over page images;
`RerankWarning` names the nodes it could not score.
"""

from __future__ import annotations

from llama_index.postprocessor.vrag_compress.base import RerankWarning, VragRerank

__all__ = ["RerankWarning", "VragRerank"]
