"""Fixtures: real data folder, a deterministic fake Col* encoder, and a small page index.

The fake encoder stands in for a Col* model where tiny random models would give meaningless
scores: every word drawn on a page (and every query word) becomes a fixed unit vector from a
hash, so a query retrieves the pages whose words it shares.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from vrag_compress import VisualIndex, get_compressor  # noqa: E402
from vrag_compress.bench.paths import data_dir  # noqa: E402
from vrag_compress.encoders.base import PageEncoding  # noqa: E402
from vrag_compress.ingest import Page  # noqa: E402

DIM = 32
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


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = data_dir()
    if not (path / "pdfs").is_dir():
        pytest.fail(f"shared data not found at {path}; set VRAG_DATA_DIR", pytrace=False)
    return path


def word_vector(word: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class HashWordEncoder:
    """Deterministic fake Col* encoder (Encoder protocol); pages are made with `page_image`."""

    model_id = "fake-hash-words"
    dim = DIM
    n_layers = 4

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    @staticmethod
    def _key(image: Image.Image) -> str:
        return hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()

    def page_image(self, text: str) -> Image.Image:
        """A page image with ``text`` drawn on it; the encoder 'reads' it back by its pixels."""
        image = Image.new("RGB", (160, 120), "white")
        ImageDraw.Draw(image).multiline_text((4, 4), text.replace(" ", "\n"), fill="black")
        self.texts[self._key(image)] = text
        return image

    def encode_pages(self, images: list[Image.Image], *, with_stats: bool = False):
        out = []
        for image in images:
            text = self.texts.get(self._key(image))
            tokens = words(text) if text else [f"pixels-{self._key(image)}"]
            vectors = np.stack([word_vector(w) for w in tokens])
            stats = np.ones((self.n_layers, len(tokens)), np.float32) if with_stats else None
            out.append(PageEncoding(vectors, centrality=stats, eos_attention=stats))
        return out

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        return [np.stack([word_vector(w) for w in words(q) or ["empty"]]) for q in queries]


TOPICS = {
    "budget": "federal budget appropriations senate",
    "firearms": "firearm background checks state",
    "layoffs": "warn layoffs california employers",
    "aviation": "aviation maintenance handbook aircraft",
    "court": "supreme court oral argument transcript",
    "weather": "rainfall temperature forecast storm",
}


def topic_pages(encoder: HashWordEncoder) -> list[Page]:
    """One page per topic; documents 'a' (years 2015) and 'b' (2020) hold three pages each."""
    pages = []
    for i, (name, text) in enumerate(TOPICS.items()):
        doc_id = "a" if i < 3 else "b"
        image = encoder.page_image(text)
        pages.append(Page(doc_id, i % 3 + 1, image, f"{name}: {text}", CORPUS / f"{doc_id}.pdf"))
    return pages


def build_index(path: Path, encoder: HashWordEncoder) -> VisualIndex:
    index = VisualIndex.create(path, compressor=get_compressor("identity"), encoder=encoder)
    pages = topic_pages(encoder)
    index.add([p for p in pages if p.doc_id == "a"], metadata={"year": 2015}, progress=False)
    index.add([p for p in pages if p.doc_id == "b"], metadata={"year": 2020}, progress=False)
    return index


@pytest.fixture(scope="session")
def fake_encoder() -> HashWordEncoder:
    return HashWordEncoder()


@pytest.fixture(scope="session")
def page_index(tmp_path_factory: pytest.TempPathFactory, fake_encoder) -> Iterator[VisualIndex]:
    index = build_index(tmp_path_factory.mktemp("lc") / "pages", fake_encoder)
    yield index
    index.close()
