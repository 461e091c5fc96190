"""Tables that fit the terminal: rich wraps cells by word while every column keeps room for its
longest word; a table that cannot fit so (many columns on 80 or fewer) is folded into one block
of ``header value`` pairs per row, wrapped by word, rather than cut with ellipses."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text


def fit_table(table: Table, console: Console) -> RenderableType:
    """``table`` as is when its narrowest layout (no word cut) fits ``console``, else folded."""
    return table if narrowest(table, console) <= console.width else fold_table(table)


def narrowest(table: Table, console: Console) -> int:
    """The table's width with each column as wide as its longest word (header included), plus
    padding and borders: rich never cuts a word of a table this wide or wider."""
    options = console.options
    words = [
        max(
            (Measurement.get(console, options, cell).minimum for cell in column.cells),
            default=0,
        )
        for column in table.columns
    ]
    headers = [Measurement.get(console, options, c.header).minimum for c in table.columns]
    padding = 2 * len(words) if table.pad_edge else 2 * len(words) - 2
    return sum(map(max, words, headers)) + padding + len(words) + 1


def fold_table(table: Table) -> RenderableType:
    """One block per row: the first cell in bold, then ``header value`` pairs joined by " · "."""
    columns = table.columns
    cells = [list(column.cells) for column in columns]
    headers = [_plain(column.header) for column in columns]
    parts: list[RenderableType] = []
    if table.title:
        parts.append(Text(_plain(table.title), style="bold"))
    for row in range(table.row_count):
        first = Text(_plain(cells[0][row]), style="bold") if cells else Text()
        pairs = [
            f"{header} {_plain(column[row])}"
            for header, column in zip(headers[1:], cells[1:], strict=True)
            if _plain(column[row])
        ]
        parts += [first, Padding(Text(" · ".join(pairs)), (0, 0, 0, 2), expand=False)]
    return Group(*parts)


def _plain(value: object) -> str:
    """A cell or header as plain text (rich markup read, styles dropped)."""
    if isinstance(value, Text):
        return value.plain
    return Text.from_markup(value).plain if isinstance(value, str) else str(value or "")
