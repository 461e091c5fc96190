"""Fixtures: real data folder, a deterministic fake Col* encoder, and a small page index.

The fake encoder (`vrag_compress.testing.WordEncoder`) stands in for a Col* model where tiny
random models would give meaningless scores: every word drawn on a page (and every query word)
becomes a fixed unit vector from a hash, so a query retrieves the pages whose words it shares.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from vrag_compress import Page, VisualIndex, get_compressor  # noqa: E402
from vrag_compress.testing import WordEncoder, shared_data  # noqa: E402, F401

CORPUS = Path("/corpus")  # absolute, so the index stores the sources unchanged


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_pycollect_makeitem(collector, name, obj):  # type: ignore[no-untyped-def]
    """Mark coroutine tests `asyncio` before pytest-asyncio looks at them.

    The standard LangChain suites define unmarked ``async def`` tests and rely on
    ``asyncio_mode = "auto"``; this keeps them running (not skipped) when pytest is started from
    the repository root, whose configuration uses strict mode.
    """
    if inspect.iscoroutinefunction(obj):
        outcome = yield
        items = outcome.get_result()
        for item in items if isinstance(items, list) else [items]:
            if isinstance(item, pytest.Function):
                item.add_marker(pytest.mark.asyncio)
    else:
        yield


TOPICS = {
    "budget": "federal budget appropriations senate",
    "firearms": "firearm background checks state",
    "layoffs": "warn layoffs california employers",
    "aviation": "aviation maintenance handbook aircraft",
    "court": "supreme court oral argument transcript",
    "weather": "rainfall temperature forecast storm",
}


def topic_pages(encoder: WordEncoder) -> list[Page]:
    """One page per topic; documents 'a' (years 2015) and 'b' (2020) hold three pages each."""
    pages = []
    for i, (name, text) in enumerate(TOPICS.items()):
        doc_id = "a" if i < 3 else "b"
        image = encoder.page_image(text)
        pages.append(Page(doc_id, i % 3 + 1, image, f"{name}: {text}", CORPUS / f"{doc_id}.pdf"))
    return pages


def build_index(path: Path, encoder: WordEncoder) -> VisualIndex:
    index = VisualIndex.create(path, compressor=get_compressor("identity"), encoder=encoder)
    pages = topic_pages(encoder)
    index.add([p for p in pages if p.doc_id == "a"], metadata={"year": 2015}, progress=False)
    index.add([p for p in pages if p.doc_id == "b"], metadata={"year": 2020}, progress=False)
    return index


@pytest.fixture(scope="session")
def fake_encoder() -> WordEncoder:
    return WordEncoder()


@pytest.fixture(scope="session")
def page_index(tmp_path_factory: pytest.TempPathFactory, fake_encoder) -> Iterator[VisualIndex]:
    index = build_index(tmp_path_factory.mktemp("lc") / "pages", fake_encoder)
    yield index
    index.close()
