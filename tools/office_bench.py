"""Office files in as pages, measured: conversion seconds per page and page text recall per kind.

For each kind it writes one file with known words on known pages (python-docx, python-pptx and
openpyxl; the other kinds are LibreOffice copies of those), converts it with an empty cache the
way `vrag index` does, and reads every page's text as the index stores it. Recall is the share
of the words written on page N that are found in the text of page N.

    python tools/office_bench.py                       # all ten kinds, 10 pages each
    python tools/office_bench.py --kinds docx,pptx --pages 3 --json out.json

Needs the `dev` extra (the generators) and LibreOffice (`make system-deps-office`).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vrag_compress.ingest import content_hash, office, open_document

KINDS = ("docx", "doc", "odt", "rtf", "pptx", "ppt", "odp", "xlsx", "xls", "ods")
# The kinds no Python writer makes: LibreOffice copies of a generated file.
DERIVED = {"doc": "docx", "odt": "docx", "rtf": "docx", "ppt": "pptx", "odp": "pptx"}
DERIVED |= {"xls": "xlsx", "ods": "xlsx"}
_SYLLABLES = "ba be bi bo da de di do fa fe ka ko la le li lo ma me mi mo na ne no ra re ri ro"


def vocabulary(size: int, seed: int = 7) -> list[str]:
    """Distinct made-up lowercase words (no dictionary needed, none a real word split)."""
    rng = random.Random(seed)
    syllables = _SYLLABLES.split()
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def page_words(pages: int, per_page: int, seed: int = 11) -> list[list[str]]:
    """Words for each page, none shared between pages (so a word names its page)."""
    words = vocabulary(pages * per_page)
    random.Random(seed).shuffle(words)
    return [words[n * per_page : (n + 1) * per_page] for n in range(pages)]


def write_docx(path: Path, pages: list[list[str]]) -> None:
    from docx import Document
    from docx.enum.text import WD_BREAK

    document = Document()
    for number, words in enumerate(pages):
        if number:
            document.add_paragraph().add_run().add_break(WD_BREAK.PAGE)
        document.add_heading(" ".join(words[:3]), level=1)
        body, cells = words[3:-6], words[-6:]
        for start in range(0, len(body), 12):
            document.add_paragraph(" ".join(body[start : start + 12]) + ".")
        table = document.add_table(rows=2, cols=3)
        for cell, word in zip((c for row in table.rows for c in row.cells), cells, strict=True):
            cell.text = word
    document.save(str(path))


def write_pptx(path: Path, pages: list[list[str]]) -> None:
    from pptx import Presentation
    from pptx.util import Pt

    deck = Presentation()
    for words in pages:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = " ".join(words[:3])
        body = words[3:]
        bullets = [" ".join(body[start : start + 5]) for start in range(0, len(body), 5)]
        frame = slide.placeholders[1].text_frame
        frame.text = "\n".join(bullets)
        for paragraph in frame.paragraphs:  # small enough that every bullet fits the slide
            paragraph.font.size = Pt(14)
    deck.save(str(path))


def write_xlsx(path: Path, pages: list[list[str]]) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for number, words in enumerate(pages, start=1):
        sheet = book.create_sheet(f"Sheet {number}")
        for column in "ABCD":
            sheet.column_dimensions[column].width = 12  # the words are at most 8 letters
        for index, word in enumerate(words):
            sheet.cell(row=index // 4 + 1, column=index % 4 + 1, value=word)
    book.save(str(path))


WRITERS = {"docx": write_docx, "pptx": write_pptx, "xlsx": write_xlsx}


def derive(source: Path, kind: str, folder: Path) -> Path:
    """A LibreOffice copy of ``source`` as ``kind`` (outside the measured conversion)."""
    soffice = office.find_soffice()
    if soffice is None:
        sys.exit(f"LibreOffice is not installed: {office.INSTALL_HINT}")
    profile = office.write_profile(folder / ".profile", soffice)
    command = [soffice, f"-env:UserInstallation={profile.as_uri()}", "--headless", "--norestore"]
    command += ["--convert-to", kind, "--outdir", str(folder), str(source)]
    subprocess.run(command, capture_output=True, timeout=300, check=True)
    return folder / f"{source.stem}.{kind}"


def measure(path: Path, pages: list[list[str]], cache: Path) -> dict[str, Any]:
    """Convert ``path`` into an empty cache, then read its pages' text; the kind's numbers."""
    digest = content_hash(path)
    start = time.perf_counter()
    office.to_pdf(path, digest, folder=cache)
    seconds = time.perf_counter() - start
    with open_document(path, text=True) as document:
        n_pages = document.n_pages
        texts = [document.page(n).text or "" for n in range(1, n_pages + 1)]
    tokens = [set(re.findall(r"[a-z]+", text.lower())) for text in texts]
    anywhere = set().union(*tokens)
    written = sum(len(words) for words in pages)
    on_page = sum(
        word in tokens[n] for n, words in enumerate(pages) if n < n_pages for word in words
    )
    found = sum(word in anywhere for words in pages for word in words)
    return {
        "pages_written": len(pages),
        "pages_converted": n_pages,
        "convert_s": round(seconds, 2),
        "s_per_page": round(seconds / max(n_pages, 1), 3),
        "recall": round(on_page / written, 4),
        "recall_anywhere": round(found / written, 4),
    }


def run(kinds: list[str], n_pages: int, per_page: int, folder: Path) -> dict[str, Any]:
    pages = page_words(n_pages, per_page)
    made: dict[str, Path] = {}
    for kind in sorted(kinds, key=lambda k: k in DERIVED):  # the generated ones first
        if kind in DERIVED:
            base = made.get(DERIVED[kind])
            if base is None:
                base = folder / f"bench.{DERIVED[kind]}"
                WRITERS[DERIVED[kind]](base, pages)
                made[DERIVED[kind]] = base
            made[kind] = derive(base, kind, folder)
        else:
            made[kind] = folder / f"bench.{kind}"
            WRITERS[kind](made[kind], pages)
    results = {}
    for kind in kinds:
        results[kind] = measure(made[kind], pages, folder / f"cache-{kind}")
        print(f"{kind}: {results[kind]}", file=sys.stderr)
    return {"pages": n_pages, "words_per_page": per_page, "kinds": results}


def table(report: dict[str, Any]) -> str:
    lines = [
        "| kind | pages | convert s | s/page | recall (its page) | recall (any page) |",
        "|------|------:|----------:|-------:|------------------:|------------------:|",
    ]
    for kind, row in report["kinds"].items():
        pages = f"{row['pages_converted']}/{row['pages_written']}"
        lines.append(
            f"| .{kind} | {pages} | {row['convert_s']:.1f} | {row['s_per_page']:.2f}"
            f" | {row['recall']:.3f} | {row['recall_anywhere']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated suffixes")
    parser.add_argument("--pages", type=int, default=10, help="pages (slides, sheets) per file")
    parser.add_argument("--words", type=int, default=40, help="distinct words per page")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    kinds = [k.strip().lstrip(".") for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kinds {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    if args.words < 10 or args.pages < 1:
        parser.error("--words must be at least 10 and --pages at least 1")
    if office.find_soffice() is None:
        print(f"LibreOffice is not installed: {office.INSTALL_HINT}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="office-bench-") as tmp:
        report = run(kinds, args.pages, args.words, Path(tmp))
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
