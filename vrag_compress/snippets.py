"""The few words of a page's text that a result shows, around the match: the CLI's search table
and the web page's result cards (through ``GET /api/search``) cut them the same way."""

from __future__ import annotations

import re


def snippet(text: str | None, query: str, width: int = 90) -> str:
    """About `width` characters of the page text around the first query word found in it
    (longest words first), else its beginning; whitespace collapsed."""
    flat = " ".join((text or "").split())
    if not flat:
        return "(no text)"
    lower = flat.lower()
    words = sorted({w.strip(".,;:!?\"'()").lower() for w in query.split()}, key=len, reverse=True)
    found = [lower.find(w) for w in words if len(w) > 2 and lower.find(w) >= 0]
    start = max(0, found[0] - width // 3) if found else 0
    piece = flat[start : start + width]
    prefix = "…" if start > 0 else ""
    suffix = "…" if start + width < len(flat) else ""
    return f"{prefix}{piece}{suffix}"


def matched_words(text: str | None, query: str) -> list[str]:
    """The query's words (over two letters, in query order) that the page text contains as
    whole words, case-insensitively: what a text encoder's page matched on, to highlight."""
    lower = " ".join((text or "").split()).lower()
    found: list[str] = []
    for word in query.split():
        word = word.strip(".,;:!?\"'()").lower()
        if len(word) > 2 and word not in found and re.search(rf"\b{re.escape(word)}\b", lower):
            found.append(word)
    return found
