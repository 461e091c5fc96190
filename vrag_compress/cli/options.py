"""Checking and resolving what users type: paths, methods with parameters, ratios, document
names.

Bad values raise `typer.BadParameter`, which exits 2 (bad usage) with the option named.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any

import typer
from typer.core import TyperGroup

from vrag_compress.store import user_input


class CheckedPathGroup(TyperGroup):
    """The `vrag` command group: every path argument or option of every command under it
    (`vrag bench ...` included) is checked by `user_input.check_path_text` while the command
    line is parsed, so a path no file system takes (a NUL, a 5,000-character name) is a usage
    error naming the option, never an `OSError` traceback from wherever it is first used; other
    text must be UTF-8 (`user_input.check_utf8`: bytes a non-UTF-8 terminal passed are not),
    while a path may name a file whose name is not UTF-8 (an old Latin-1 name)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_paths_of(self)


def check_paths_of(command: Any) -> None:
    """Check the paths and text every parameter of ``command`` and its subcommands is given."""
    for param in command.params:
        if not getattr(param.callback, "checks_paths", False):
            param.callback = _path_checker(param.callback)
    for sub in getattr(command, "commands", {}).values():
        check_paths_of(sub)


def _path_checker(inner: Callable[..., Any] | None) -> Callable[..., Any]:
    """A parameter callback that refuses unusable paths and text that is not UTF-8 in the
    parsed value, then runs ``inner`` (the parameter's own callback, if any)."""

    def check(ctx: Any, param: Any, value: Any) -> Any:
        for item in value if isinstance(value, (list, tuple)) else (value,):
            try:
                if isinstance(item, PurePath):
                    user_input.check_path_text(str(item), "path")  # non-UTF-8 names are fine
                elif isinstance(item, str):
                    user_input.check_utf8(item, "text")
            except user_input.UserInputError as error:
                message = str(error).split(": ", 1)[1]
                raise typer.BadParameter(message, ctx=ctx, param=param) from None
        return value if inner is None else inner(ctx, param, value)

    check.checks_paths = True  # type: ignore[attr-defined]
    return check


def parse_value(text: str) -> Any:
    """`3` → 3, `true` → True, `"x"` → "x", anything else stays a string (too deep, NaN: exit 2)."""
    try:
        return user_input.parse_value(text, "value")
    except user_input.UserInputError as error:
        raise typer.BadParameter(str(error)) from error


def parse_pairs(pairs: list[str], option: str) -> dict[str, Any]:
    """Repeated KEY=VALUE as a dict; unreadable ones are usage errors (exit 2) naming ``option``."""
    try:
        return user_input.parse_pairs(pairs, option.lstrip("-"))
    except user_input.UserInputError as error:
        raise typer.BadParameter(str(error), param_hint=option) from error


def parse_metadata(pairs: list[str]) -> dict[str, Any]:
    """`-m KEY=VALUE` pages get, checked like an upload's metadata before any work starts."""
    from vrag_compress.store.filters import check_user_metadata

    try:
        return check_user_metadata(parse_pairs(pairs, "--metadata"))
    except user_input.UserInputError as error:
        raise typer.BadParameter(str(error), param_hint="--metadata") from error


def parse_filter(filters: list[str]) -> dict[str, Any] | None:
    """`--filter '{"year": {"$gte": 2000}}'` (JSON) or repeated `--filter key=value` (equality);
    read by the same function as the server's ``filter=``; bad filters are usage errors."""
    from vrag_compress.store.filters import FilterError, parse_user_filter

    try:
        return parse_user_filter(filters)
    except FilterError as error:
        raise typer.BadParameter(str(error), param_hint="--filter") from error


def parse_method(method: str, params: list[str]) -> tuple[str, dict[str, Any]]:
    """`uot:epsilon=0.01:rho=3` and/or `--param epsilon=0.01` → ("uot", {"epsilon": 0.01, ...})."""
    from vrag_compress.compress import list_compressors

    name, _, inline = method.strip().partition(":")
    known = list_compressors()
    if name not in known:
        raise typer.BadParameter(
            f"unknown method {name!r}; choose one of {', '.join(known)}", param_hint="--method"
        )
    merged = parse_pairs([p for p in inline.split(":") if p], "--method")
    merged.update(parse_pairs(params, "--param"))
    if "ratio" in merged:
        raise typer.BadParameter("give the keep ratio with --ratio", param_hint="--param")
    return name, merged


def check_writable(path: Path, option: str) -> None:
    """Refuse an output file whose folder cannot be made or written, before the work that
    ends by writing it (so a long run does not end in a traceback after its work is done)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise typer.BadParameter(
            f"cannot make the folder {path.parent}: {error.strerror}", param_hint=option
        ) from None
    if path.is_dir() or not os.access(path.parent, os.W_OK):
        what = "is a folder" if path.is_dir() else "is in a folder this user cannot write"
        raise typer.BadParameter(f"{path} {what}", param_hint=option)


def check_plot_path(path: Path, option: str) -> None:
    """A plot file whose extension names a format matplotlib writes (checked before the work
    whose last step draws it)."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lower().lstrip(".") not in kinds:
        raise typer.BadParameter(
            f"{user_input.show(str(path))}: end the file name with .png, .svg or .pdf "
            f"(one of {', '.join(sorted(kinds))})",
            param_hint=option,
        )


def check_ratio(ratio: float) -> float:
    if not 0.0 < ratio <= 1.0:
        raise typer.BadParameter(f"must be in (0, 1], got {ratio}", param_hint="--ratio")
    return ratio


def check_choice(value: str, choices: tuple[str, ...], option: str) -> str:
    if value not in choices:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}", param_hint=option)
    return value


def build_compressor(
    name: str, params: dict[str, Any], ratio: float, profile: Path | None = None
) -> Any:
    """The compressor for the command line (through `compressor_for`, like the index); bad
    parameters raise `BadParameter` (exit 2), an unreadable profile `ProfileError`."""
    from vrag_compress.compress import ProfileError, capabilities, compressor_for

    if profile is not None and not capabilities(name).uses_window:
        raise typer.BadParameter(
            f"--profile is a SAP layer window; {name} takes none", param_hint="--profile"
        )
    try:
        return compressor_for(name, ratio=ratio, profile=profile, **params)
    except ProfileError:
        raise
    except (ValueError, TypeError) as error:
        raise typer.BadParameter(str(error), param_hint="--param") from error


def file_name(hit: Any) -> str:
    name = hit.metadata.get("filename")
    return name or (Path(hit.source).name if hit.source else hit.doc_id)


def resolve_document(documents: list[Any], name: str) -> str:
    """The doc id a user means: a doc id, a file name, or a path of an indexed source file.

    Raises `LookupError` with the choices when nothing or more than one document matches."""
    if any(d.doc_id == name for d in documents):
        return name
    resolved = _existing_path(name)
    matches = [
        d
        for d in documents
        if d.source and (Path(d.source).name == name or d.source in (name, resolved))
    ]
    if len(matches) == 1:
        return matches[0].doc_id
    if not matches:
        raise LookupError(
            f"no document {user_input.show(name)} in this index (`vrag info` lists them)"
        )
    listed = ", ".join(f"{d.doc_id} ({d.source})" for d in matches)
    raise LookupError(
        f"{user_input.show(name)} matches {len(matches)} documents: {listed}; give the doc id"
    )


def _existing_path(name: str) -> str | None:
    """The absolute path ``name`` names when it is an existing file, else None (also for text
    that cannot be a path: too long, a NUL, ``~user`` of no such user)."""
    if not could_be_path(name):
        return None
    target = Path(user_input.expand_home(name))
    return str(target.resolve()) if target.exists() else None


def could_be_path(text: str) -> bool:
    """Whether ``text``, given where a path or a name is accepted (a document, a model), can
    be looked up on disk at all; when not, it can only be a name."""
    try:
        user_input.check_path_text(text, "path")
    except user_input.UserInputError:
        return False
    return True


def image_out(path: Path) -> Path:
    """An ``--out`` image path whose extension names a format Pillow writes (checked before any
    work: saving is the last step)."""
    from PIL import Image

    Image.init()
    suffix = path.suffix.lower()
    if suffix not in Image.registered_extensions():
        shown = user_input.show(str(path))
        raise typer.BadParameter(
            f"{shown} has no image file extension Pillow writes ({suffix or 'none'}); "
            "end it with .png, .jpg or .webp"
        )
    return path
