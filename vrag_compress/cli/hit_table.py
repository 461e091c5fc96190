"""`vrag search`'s hits on a terminal of any width: a table while the snippet keeps room to be
read, else one block of lines per hit. Both wrap text by word and never cut the right border or a
file name (unless the name alone is wider than the terminal)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from vrag_compress.cli.options import file_name
from vrag_compress.snippets import snippet

SNIPPET_MIN_WIDTH = 32
"""Below this many columns left for the snippet, hits print as blocks rather than a table."""
FILE_MAX_WIDTH = 40
"""File names up to this long stay on one line in the table; longer ones fold."""
_BORDERS = 3  # a rich table's columns each cost a separator and padding on both sides


def found_by(components: dict[str, dict[str, float]] | None) -> str:
    """``visual #2 (12.3), text #1 (4.56)``: where each side ranked and scored a hit."""
    parts = [
        f"{side} #{int(c['rank'])} ({c['score']:.3g})"
        for side, c in sorted((components or {}).items(), reverse=True)
    ]
    return ", ".join(parts)


def print_hits(console: Console, hits: Sequence[Any], words: str, fused: bool) -> None:
    """The hits (with their neighbour pages) fitted to ``console``'s width; ``fused`` (text and
    hybrid searches) adds where each side ranked the page."""
    rows = [_cells(rank, hit, words, fused) for rank, hit in enumerate(hits, start=1)]
    names = max((len(r["file"]) for r in rows), default=4)
    file_width = min(max(names, 4), FILE_MAX_WIDTH)
    fixed = max((len(r["score"]) for r in rows), default=5) + 4 + 4 + file_width
    if console.width - fixed - 5 * _BORDERS - 1 >= SNIPPET_MIN_WIDTH:
        console.print(_table(rows, file_width))
    else:
        console.print(_blocks(rows))


def _cells(rank: int, hit: Any, words: str, fused: bool) -> dict[str, Any]:
    found = found_by(hit.components) if fused else ""
    return {
        "rank": str(rank),
        "score": f"{hit.score:.4g}",
        "file": file_name(hit),
        "page": str(hit.page_no),
        "found": f"found by {found}" if found else "",
        "snippet": snippet(hit.text, words),
        "context": [(near.page_no, snippet(near.text, words)) for near in hit.context],
    }


def _table(rows: list[dict[str, Any]], file_width: int) -> Table:
    table = Table("rank", "score")
    table.add_column("file", overflow="fold", min_width=file_width)
    table.add_column("page", no_wrap=True)
    table.add_column("snippet", ratio=1, min_width=SNIPPET_MIN_WIDTH)
    for row in rows:
        text = Text(row["snippet"])
        if row["found"]:
            text = Text.assemble((row["found"], "bold"), "\n", text)
        table.add_row(row["rank"], row["score"], Text(row["file"]), row["page"], text)
        for page_no, near in row["context"]:
            table.add_row("", "", "", f"({page_no})", Text(near), style="dim")
    return table


def _blocks(rows: list[dict[str, Any]]) -> RenderableType:
    parts: list[RenderableType] = []
    for row in rows:
        head = Text.assemble(
            (f"{row['rank']}. ", "bold"),
            (row["file"], "bold"),
            f", page {row['page']} · score {row['score']}",
        )
        body = [Text(row["found"], style="bold")] if row["found"] else []
        body.append(Text(row["snippet"]))
        body += [Text(f"({n}) {near}", style="dim") for n, near in row["context"]]
        parts += [head, Padding(Group(*body), (0, 0, 1, 3), expand=False)]
    return Group(*parts)
