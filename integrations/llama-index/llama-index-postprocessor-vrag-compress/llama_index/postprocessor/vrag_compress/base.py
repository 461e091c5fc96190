"""`VragRerank`: rerank another retriever's nodes by MaxSim over page images."""

from __future__ import annotations

import warnings
from typing import Any

from llama_index.core.bridge.pydantic import Field
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, ImageNode, NodeWithScore, QueryBundle
from vrag_compress import (
    RerankCandidate,
    RerankInputError,
    VisualIndex,
    rerank_order,
    rerank_scores,
)


class VragRerank(BaseNodePostprocessor):
    """Rerank nodes by late interaction (MaxSim) of the query against their page images.

    A node of a page ``index`` holds (its id, ``page_id`` metadata, or ``doc_id`` and
    ``page_no``) is scored on its stored compressed vectors, with no model run for the page;
    a node carrying an image (`ImageNode.image_path`, ``image_path`` metadata) or a PDF or
    Office file and page number (``file_path`` or ``source``, with ``page_no`` or a numeric
    ``page_label``) is rendered and encoded on the fly with the index's model and compressor;
    on an index of a text encoder, a node's text is scored as a page of that text.

    Returns the ``top_n`` best, each with its MaxSim score (``keep_retrieval_score`` keeps the
    first retriever's in ``retrieval_score`` metadata). Nodes that cannot be scored come after
    the scored ones with no score, and a `RerankWarning` names each and what it lacks. A
    `QueryBundle` with ``image_path`` and no words reranks by that picture.
    """

    index: VisualIndex = Field(description="The vrag-compress index whose model scores.")
    top_n: int = Field(default=5, ge=1, description="Number of nodes to return.")
    keep_retrieval_score: bool = Field(
        default=False, description="Keep each node's first score in retrieval_score metadata."
    )

    @classmethod
    def class_name(cls) -> str:
        return "VragRerank"

    def _postprocess_nodes(
        self,
        nodes: list[NodeWithScore],
        query_bundle: QueryBundle | None = None,
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("VragRerank needs the query: pass query_bundle or query_str")
        if not nodes:
            return []
        query = self._query(query_bundle)
        with self.callback_manager.event(
            CBEventType.RERANKING,
            payload={
                EventPayload.NODES: nodes,
                EventPayload.MODEL_NAME: self.index.model_id,
                EventPayload.QUERY_STR: query_bundle.query_str,
                EventPayload.TOP_K: self.top_n,
            },
        ) as event:
            candidates = [node_candidate(n.node) for n in nodes]
            scores = rerank_scores(self.index, query, candidates)
            reranked = [self._scored(nodes[i], scores[i]) for i in rerank_order(scores)]
            _warn_unscored(scores)
            event.on_end(payload={EventPayload.NODES: reranked[: self.top_n]})
        return reranked[: self.top_n]

    def _query(self, bundle: QueryBundle) -> Any:
        """The words, or for an image-only bundle the picture as the index reads it."""
        if bundle.query_str.strip() or not bundle.image_path:
            return bundle.query_str
        read = self.index.read_image(bundle.image_path)
        return read.vectors if read.read_by == "page" else read.text

    def _scored(self, node: NodeWithScore, score: float | RerankInputError) -> NodeWithScore:
        if self.keep_retrieval_score:
            node.node.metadata["retrieval_score"] = node.score
        value = None if isinstance(score, RerankInputError) else float(score)
        return NodeWithScore(node=node.node, score=value)


class RerankWarning(UserWarning):
    """Some nodes could not be scored; they come last, unscored."""


def node_candidate(node: BaseNode) -> RerankCandidate:
    """What a node tells about its page (see `VragRerank`)."""
    meta = node.metadata
    image = node.image_path if isinstance(node, ImageNode) else None
    return RerankCandidate(
        page_id=meta.get("page_id") or node.node_id,
        doc_id=meta.get("doc_id"),
        page_no=_page_number(meta),
        image_path=image or meta.get("image_path"),
        file_path=meta.get("file_path") or meta.get("source"),
        text=node.get_content() or None,
        name=f"node {node.node_id}",
    )


def _page_number(meta: dict[str, Any]) -> int | None:
    """``page_no`` (vrag-compress), else a numeric ``page_label`` (LlamaIndex's PDF readers):
    both 1-based."""
    for key in ("page_no", "page_label"):
        value = meta.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
    return None


def _warn_unscored(scores: list[float | RerankInputError]) -> None:
    problems = [str(s) for s in scores if isinstance(s, RerankInputError)]
    if problems:
        warnings.warn(
            f"{len(problems)} of {len(scores)} nodes were not reranked (kept after the "
            "others, without a score): " + "; ".join(problems),
            RerankWarning,
            stacklevel=4,
        )
