"""The index handles, the job queue and the chat model one `vrag serve` process holds.

Readers (search, pages, explanations) share one read-only handle on the index and encode their
queries with a twin of the model (the same weights, their own tokenizer, see
`encoders.base.query_twin`), micro-batched by `VisualIndex.search`; the upload writer encodes
pages with the model itself on its own, lower-priority thread. So a search never waits for page
encoding. An encoder that cannot make a twin is shared through one lock (`SerialEncoder`).

With ``--workers N`` every worker process builds one `Server`: the worker that takes the
writer lock (see `jobs.WriterRole`) indexes the uploads, the others only read the same
memory-mapped files, and each read sees the latest commit.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from vrag_compress.answering import ChatModel, load_chat_model
from vrag_compress.encoders.base import Encoder, query_twin
from vrag_compress.index import VisualIndex
from vrag_compress.serve.config import ServeConfig
from vrag_compress.serve.guards import hide_root
from vrag_compress.serve.jobs import JobQueue


class SerialEncoder:
    """One encoder shared by the readers and the writer, used by one thread at a time: for
    encoders without a ``twin()`` (their tokenizer or state may not take concurrent calls)."""

    def __init__(self, encoder: Encoder) -> None:
        self._encoder = encoder
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._encoder, name)
        if not (name.startswith("encode") and callable(value)):
            return value

        def serial(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return value(*args, **kwargs)

        return serial

    def encode_pages(self, images: list[Any], *, with_stats: bool = False) -> Any:
        return self.__getattr__("encode_pages")(images, with_stats=with_stats)

    def encode_queries(self, queries: list[str]) -> Any:
        return self.__getattr__("encode_queries")(queries)


def ensure_index(config: ServeConfig, encoder: Encoder | None = None) -> None:
    """Create the index folder with ``config.model`` when it has none yet."""
    root = Path(config.index_dir)
    if not VisualIndex.exists(root):
        VisualIndex.create(
            root, model=config.model or "auto", encoder=encoder, device=config.device
        ).close()


class Server:
    """The index handles, the job queue and the chat model one app serves."""

    def __init__(
        self,
        config: ServeConfig,
        encoder: Encoder | None = None,
        chat_model: ChatModel | None = None,
    ) -> None:
        self.config = config
        root = Path(config.index_dir)
        self.root = root.resolve()  # as stored paths name it; answers show paths relative to it
        ensure_index(config, encoder)
        asked = None if config.model in (None, "auto") else config.model
        probe = VisualIndex.open(root, model=asked, encoder=encoder, readonly=True)
        pages: Any = probe.encoder
        probe.close()
        if query_twin(pages) is pages:  # no twin: readers and writer take turns, as before
            pages = SerialEncoder(pages)
        self.encoder = pages
        self.reader = VisualIndex.open(root, encoder=pages, readonly=True)
        self.jobs = JobQueue(
            root,
            self.reader,
            lambda: VisualIndex.open(root, encoder=pages),
            ocr=config.ocr,
            shared=config.workers > 1,
        )
        self.chat_model = chat_model
        if chat_model is None and config.llm:
            self.chat_model = load_chat_model(config.llm)

    def public(self, message: str) -> str:
        """An error message as answers show it: without the absolute path of the index folder
        (paths inside it relative to it, the folder itself by its name)."""
        return hide_root(message, Path(self.config.index_dir))

    def close(self) -> None:
        self.jobs.close()
        self.reader.close()
