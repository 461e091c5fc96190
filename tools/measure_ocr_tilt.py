"""Word recall of OCR on tilted scans, with and without spacing by character boxes.

Renders the first page of each PDF at 150 dpi, rotates it, speckles and blurs it like a scan,
and compares the recogniser's own line text with `RapidOcrEngine.recognize` (which spaces tilted
lines by their character boxes) against the PDF's text layer. docs/ocr.md has the numbers:

    python tools/measure_ocr_tilt.py DATA/pdfs/gov/amt_handbook_sample.pdf:2.5,3.5 \\
        DATA/pdfs/gov/scotus-transcript-p1.pdf:2.5,3.5 DATA/pdfs/edge/ocr_test.pdf:0
"""

from __future__ import annotations

import collections
import random
import re
import sys

import pypdfium2 as pdfium
from PIL import Image, ImageFilter

from vrag_compress.ingest.ocr import RapidOcrEngine, TextBox, reading_order


def words(text: str) -> collections.Counter[str]:
    return collections.Counter(re.sub(r"[^\w\s]", " ", text.lower()).split())


def scan(page: Image.Image, angle: float, seed: int = 1) -> Image.Image:
    """``page`` rotated by ``angle`` degrees, with speckles and a 0.5 px blur."""
    grey = page.convert("L").rotate(angle, resample=Image.BICUBIC, expand=True, fillcolor=255)
    rng, pixels = random.Random(seed), grey.load()
    for _ in range(grey.width * grey.height // 300):
        pixels[rng.randrange(grey.width), rng.randrange(grey.height)] = rng.randrange(150, 255)
    return grey.filter(ImageFilter.GaussianBlur(0.5)).convert("RGB")


def score(text: str, truth: collections.Counter[str]) -> tuple[float, float]:
    found = words(text)
    hit = sum((truth & found).values())
    return hit / sum(truth.values()), hit / max(1, sum(found.values()))


def main(specs: list[str]) -> None:
    engine = RapidOcrEngine()
    for spec in specs:
        path, _, angles = spec.rpartition(":")
        pdf = pdfium.PdfDocument(path)
        page = pdf[0]
        truth = words(page.get_textpage().get_text_range())
        image = page.render(scale=150 / 72).to_pil()
        for angle in (float(a) for a in angles.split(",")):
            tilted = scan(image, angle) if angle else image.convert("RGB")
            lines, _ = engine._engine(tilted, return_word_box=True)
            before = reading_order([TextBox.from_quad(r[0], r[1], r[2]) for r in lines or []])
            after = reading_order(engine.recognize(tilted))
            (rb, pb), (ra, pa) = score(before, truth), score(after, truth)
            print(
                f"{path} rotated {angle:g}: word recall {rb:.3f} -> {ra:.3f}, "
                f"precision {pb:.3f} -> {pa:.3f}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
