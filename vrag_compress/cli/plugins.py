"""Command groups that other distributions add to `vrag` through entry points (group
``vrag_compress.commands``, name = the command, value = a Typer app or a Typer/Click command):
`vrag bench` comes from the vrag-compress-bench distribution. A group is imported only when its
command runs; `vrag --help` lists it by name without importing it, so the benchmarks never load
on an everyday `vrag` call. A known group whose distribution is missing answers in one line what
to install (exit 2) instead of "No such command"."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from vrag_compress.cli.options import CheckedPathGroup, check_paths_of

ENTRY_POINT_GROUP = "vrag_compress.commands"


@dataclass(frozen=True)
class KnownGroup:
    """A command group this project ships in a distribution of its own: what `vrag --help`
    says about it before it is imported, and how to install it when it is missing."""

    help: str
    title: str  # what `vrag --help` lists while it is not installed
    distribution: str
    install: str


KNOWN_GROUPS = {
    "bench": KnownGroup(
        help="Benchmarks that print numbers (and --json).",
        title="Benchmarks",
        distribution="vrag-compress-bench",
        install="pip install -e ./benchmarks in a checkout of vrag-compress "
        "(from a release: pip install 'vrag-compress[bench]')",
    ),
}


def command_entry_points() -> dict[str, EntryPoint]:
    """Installed command groups by name (the first distribution wins a name given twice)."""
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(point.name, point)
    return found


def missing_message(name: str) -> str:
    """The one line `vrag NAME` prints when the distribution that provides it is not installed."""
    known = KNOWN_GROUPS[name]
    return f"error: `vrag {name}` needs the {known.distribution} package: {known.install}"


def load_group(name: str) -> Any:
    """The command (a Click group for `bench`) that entry point ``name`` provides, imported now,
    with the path checks every `vrag` command gets (`options.check_paths_of`)."""
    point = command_entry_points().get(name)
    if point is None:
        raise LookupError(missing_message(name) if name in KNOWN_GROUPS else f"no `vrag {name}`")
    value = point.load()
    command = typer.main.get_command(value) if isinstance(value, typer.Typer) else value
    if not isinstance(command, (TyperCommand, TyperGroup)):
        raise TypeError(
            f"entry point {point.name} = {point.value} ({ENTRY_POINT_GROUP}) is "
            f"{type(value).__name__}, not a Typer app or command"
        )
    command.name = name
    check_paths_of(command)
    return command


class LazyCommand(TyperCommand):
    """Stands for an entry point's command in `vrag`'s list: its help line comes from
    `KNOWN_GROUPS` (empty for others), and the command is imported when it runs, the whole
    command line then parsed by the real one (its `--help`, options and subcommands)."""

    def __init__(self, name: str, load: Callable[[], Any], help: str) -> None:
        super().__init__(name, help=help, add_help_option=False, rich_markup_mode=None)
        self._load = load

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        return self._load().make_context(info_name, args, parent=parent, **extra)


def _missing(name: str) -> Callable[[], Any]:
    def refuse() -> Any:
        typer.echo(missing_message(name), err=True)
        raise typer.Exit(2)

    return refuse


class VragGroup(CheckedPathGroup):
    """The `vrag` group: its own commands, then the command groups of installed entry points
    and the known ones not installed (listed so that running them says what to install)."""

    def list_commands(self, ctx: Any) -> list[str]:
        own = super().list_commands(ctx)
        extra = [*command_entry_points(), *KNOWN_GROUPS]
        return own + [name for name in dict.fromkeys(extra) if name not in own]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        own = super().get_command(ctx, cmd_name)
        if own is not None:
            return own
        known = KNOWN_GROUPS.get(cmd_name)
        if cmd_name in command_entry_points():
            help_text = known.help if known else ""
            return LazyCommand(cmd_name, lambda: load_group(cmd_name), help_text)
        if known is not None:
            help_text = f"{known.title}; not installed ({known.distribution})."
            return LazyCommand(cmd_name, _missing(cmd_name), help_text)
        return None
