"""The `vrag` Typer application objects; commands live in sibling modules, one per area."""

from __future__ import annotations

import typer

from vrag_compress.cli.plugins import VragGroup

# Plain help (no rich markup): square brackets in help ("the [ocr] extra") stay text, and flags
# are not shown with a "<bool>" type.
app = typer.Typer(
    name="vrag",
    help="Index PDFs and page images with compressed ColPali-family embeddings and search them.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    # every path a command takes is checked while parsing; `vrag bench` and other entry-point
    # command groups are listed by name and imported only when they run
    cls=VragGroup,
)


def _print_version(value: bool) -> None:
    if value:
        from vrag_compress.version import version_line

        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Index PDFs and page images with compressed ColPali-family embeddings and search them."""


__all__ = ["app"]
