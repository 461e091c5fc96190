"""Page-as-query: does a page image (or a near-duplicate of it) find its own page at rank 1, and
what does the search cost, with the query page raw or compressed by the index's compressor?

Builds an index of the ViDoRe sample pages and the one-page government PDFs with a tiny random Col*
model at a realistic sequence length (ColPali-shaped, 448 px: 1,024 vectors a page), then
searches with every stored page image: as stored (the same pixels), as a near-duplicate
(scaled to 85 %, JPEG quality 50) and as a phone photo of it (margins cropped, turned 2 degrees,
60 %, JPEG 35); each with the query page's raw vectors and compressed by the index's compressor.
Search times are the store's exact MaxSim over every page (best of 3); the machine is shared, so
compare them with each other, not with other runs.
The weights are random, so this measures matching of the same page, not understanding.

    python tools/measure_image_queries.py OUT.json
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pypdfium2 as pdfium
from PIL import Image

from vrag_compress import VisualIndex, get_compressor
from vrag_compress.encoders.tiny import tiny_model_path
from vrag_compress.shared_data import data_dir

RATIO = 0.25


def pages_of(pdf: Path) -> int:
    """How many pages a PDF has (the one-page government PDFs keep the run to minutes)."""
    document = pdfium.PdfDocument(str(pdf))
    try:
        return len(document)
    finally:
        document.close()


def near_duplicate(image: Image.Image) -> Image.Image:
    """The page scaled to 85 % and re-encoded as a lossy JPEG (a re-export)."""
    small = image.resize((int(image.width * 0.85), int(image.height * 0.85)))
    return _jpeg(small, 50)


def photo(image: Image.Image) -> Image.Image:
    """The page as a phone photo of it: margins cropped, turned 2 degrees, 60 %, JPEG 35."""
    w, h = image.size
    cropped = image.crop((int(0.04 * w), int(0.04 * h), int(0.96 * w), int(0.96 * h)))
    turned = cropped.rotate(2, expand=True, fillcolor="white")
    return _jpeg(turned.resize((int(turned.width * 0.6), int(turned.height * 0.6))), 35)


def _jpeg(image: Image.Image, quality: int) -> Image.Image:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


CHANGES = {"same": lambda image: image, "near_duplicate": near_duplicate, "photo": photo}


def measure(index: VisualIndex) -> dict[str, dict[str, float]]:
    """Per change and query form (raw page vectors, compressed): rank-1 rate, mean rank, query
    vectors and the store's exact MaxSim time; and the encode time with and without the
    attention statistics compression needs."""
    encoder, compressor, store = index.encoder, index.compressor, index.store
    pages = [h for d in index.documents() for h in index.get(store.page_ids(d.doc_id))]
    rows: dict[str, dict[str, list[float]]] = {}
    encode_ms: dict[str, list[float]] = {"raw (no statistics)": [], "with statistics": []}
    for page in pages:
        for change, make in CHANGES.items():
            image = make(page.image)
            started = time.perf_counter()
            (encoding,) = encoder.encode_pages([image], with_stats=True)
            encode_ms["with statistics"].append(1000 * (time.perf_counter() - started))
            if change == "same":
                started = time.perf_counter()
                encoder.encode_pages([image])
                encode_ms["raw (no statistics)"].append(1000 * (time.perf_counter() - started))
            (kept,) = compressor.compress_many([encoding])
            for form, vectors in (("raw", encoding.vectors), ("compressed", kept.vectors)):
                row = rows.setdefault(f"{change}/{form}", {"rank": [], "ms": [], "vectors": []})
                timings = []
                for _ in range(3):
                    started = time.perf_counter()
                    results = store.search(vectors, len(pages), mode="exact")
                    timings.append(1000 * (time.perf_counter() - started))
                ids = [r.page_id for r in results]
                row["rank"].append(ids.index(page.page_id) + 1)
                row["ms"].append(min(timings))
                row["vectors"].append(vectors.shape[0])
    out: dict[str, dict[str, float]] = {
        name: {
            "queries": len(row["rank"]),
            "rank1": sum(r == 1 for r in row["rank"]) / len(row["rank"]),
            "mean_rank": statistics.fmean(row["rank"]),
            "query_vectors": statistics.fmean(row["vectors"]),
            "maxsim_ms_p50": statistics.median(row["ms"]),
        }
        for name, row in rows.items()
    }
    out["encode_ms_p50"] = {name: statistics.median(ms) for name, ms in encode_ms.items()}
    return out


def main(out: Path) -> None:
    data = data_dir()
    model = tiny_model_path("tiny-colpali", image_size=448)
    files = sorted((data / "vidore_arxivqa_sample" / "images").iterdir())
    files += [p for p in sorted((data / "pdfs" / "gov").glob("*.pdf")) if pages_of(p) == 1]
    compressor = get_compressor("sap", ratio=RATIO, layers=[0, 1])
    with tempfile.TemporaryDirectory() as folder:
        index = VisualIndex.create(Path(folder) / "i.vrag", model=str(model), compressor=compressor)
        index.add(files, progress=False, ocr="never")
        results = measure(index)
        report = {
            "model": "tiny-colpali, 448 px (1,024 vectors a page), random weights",
            "compressor": f"sap ratio {RATIO} layers [0, 1]",
            "pages": index.store.count(),
            "results": results,
        }
        index.close()
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
