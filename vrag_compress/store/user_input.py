"""Reading what users type (a JSON object, KEY=VALUE pairs) without trusting its size or shape.

The CLI and the server read filters and metadata through these helpers, so both refuse the same
input with the same one-line message. Nothing here recurses over user data: JSON nested too deeply
for Python's decoder is refused (the decoder's `RecursionError` is caught), and decoded values are
walked with an explicit stack.
"""

from __future__ import annotations

import json
import math
import os
import reprlib
import unicodedata
from collections.abc import Iterator
from typing import Any

from vrag_compress.store.base import StoreError

MAX_JSON_DEPTH = 100  # nesting of lists/objects in a filter or metadata value users send
MAX_STRING_CHARS = 65_536  # longest string (key or value) in a filter or metadata users send
NAME_MAX_BYTES = 255  # longest file or folder name most file systems take (ext4, APFS, NTFS)
PATH_MAX_BYTES = 4096  # longest path the kernel takes in one call (Linux PATH_MAX)
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
"""Invisible characters that reorder how text around them is displayed (Unicode bidi controls):
text holding them reads differently on screen from what it matches, so user input refuses them.
Right-to-left letters (Arabic, Hebrew) are ordinary text and welcome."""

_show = reprlib.Repr()
_show.maxlevel, _show.maxstring, _show.maxother, _show.maxlist, _show.maxdict = 3, 60, 60, 6, 4


class UserInputError(StoreError, ValueError):
    """Input a user typed or sent that cannot be read; the message names what and where."""


def show(value: Any) -> str:
    """A short repr for messages and logs (safe on huge or deeply nested values)."""
    return _show.repr(value)


def load_json(text: str, what: str, error: type[UserInputError] = UserInputError) -> Any:
    """``text`` decoded as JSON and checked by `check_text`."""
    try:
        value = _decode(text, what, error)
    except json.JSONDecodeError as problem:
        raise error(f"invalid JSON {what}: {problem}") from None
    check_text(value, what, error)
    return value


def parse_value(text: str, what: str, error: type[UserInputError] = UserInputError) -> Any:
    """The VALUE of KEY=VALUE: `3` -> 3, `true` -> True, `"x"` -> "x", other text stays text."""
    try:
        value = _decode(text, what, error)
    except json.JSONDecodeError:
        value = text
    check_text(value, what, error)
    return value


def parse_pairs(
    pairs: list[str], what: str, error: type[UserInputError] = UserInputError
) -> dict[str, Any]:
    """Repeated KEY=VALUE as a dict (the key stripped, the value read by `parse_value`)."""
    result: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise error(f"{what}: expected KEY=VALUE, got {show(pair)}")
        result[key.strip()] = parse_value(value, f"{what} {show(key.strip())}", error)
    return result


def check_text(value: Any, what: str, error: type[UserInputError] = UserInputError) -> None:
    """Refuse decoded input nested deeper than `MAX_JSON_DEPTH`, with a string (key or value)
    longer than `MAX_STRING_CHARS` or holding NUL or a bidi control character, or a number
    that is not finite."""
    for item, depth in _walk(value):
        if depth > MAX_JSON_DEPTH:
            raise error(_too_deep(what))
        if isinstance(item, str):
            _check_string(item, what, error)
        elif isinstance(item, float) and not math.isfinite(item):
            raise error(f"{what}: {item} is not a finite number")


def check_path_text(text: str, what: str, error: type[UserInputError] = UserInputError) -> None:
    """Refuse a path no file system call can take, before one raises a bare `OSError` or
    `ValueError` deep inside a command: a NUL, text that cannot be encoded as a file name,
    a name over `NAME_MAX_BYTES` or a whole path over `PATH_MAX_BYTES`."""
    if "\x00" in text:
        raise error(f"{what}: a path cannot hold a NUL character: {show(text)}")
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError as problem:
        bad = text[problem.start : problem.end]
        raise error(
            f"{what}: {show(text)} holds {show(bad)}, which cannot be written as a file name"
        ) from None
    if len(raw) > PATH_MAX_BYTES:
        raise error(
            f"{what}: a path of {len(raw):,} bytes is over the limit of {PATH_MAX_BYTES:,}: "
            f"{show(text)}"
        )
    longest = max(raw.split(b"/"), key=len)
    if len(longest) > NAME_MAX_BYTES:
        name = os.fsdecode(longest)
        raise error(
            f"{what}: the name {show(name)} is {len(longest):,} bytes; file systems take at most "
            f"{NAME_MAX_BYTES} bytes per file or folder name"
        )


def check_utf8(text: str, what: str, error: type[UserInputError] = UserInputError) -> None:
    """Refuse text holding lone surrogates: the bytes of a non-UTF-8 terminal or file name as
    Python passes them on, which no tokenizer, database or JSON answer can take."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as problem:
        bad = text[problem.start : problem.end]
        raise error(
            f"{what}: {show(text)} holds {show(bad)}, bytes that are not UTF-8 text; "
            "use a UTF-8 terminal or encoding"
        ) from None


def expand_home(text: str) -> str:
    """``~`` and ``~user`` expanded like a shell does; an unknown user's ``~name`` stays as
    typed (a plain name), where `pathlib.Path.expanduser` raises `RuntimeError`."""
    return os.path.expanduser(text)


def _check_string(text: str, what: str, error: type[UserInputError]) -> None:
    if len(text) > MAX_STRING_CHARS:
        raise error(
            f"{what}: a string of {len(text):,} characters is over the limit of "
            f"{MAX_STRING_CHARS:,}: {show(text)}"
        )
    if "\x00" in text:
        raise error(f"{what}: NUL characters are not allowed: {show(text)}")
    control = next((c for c in text if c in BIDI_CONTROLS), None)
    if control is not None:
        raise error(
            f"{what}: {show(text)} holds the invisible bidirectional control "
            f"U+{ord(control):04X} ({unicodedata.name(control, 'bidi control')}), which makes "
            "text display differently from what it matches; remove it"
        )


def _walk(value: Any) -> Iterator[tuple[Any, int]]:
    """Every container, key and scalar in ``value`` with its nesting depth, without recursion."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        yield item, depth
        if depth > MAX_JSON_DEPTH:
            return
        if isinstance(item, dict):
            stack.extend((k, depth + 1) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)


def _decode(text: str, what: str, error: type[UserInputError]) -> Any:
    """`json.loads` refusing NaN/Infinity and nesting too deep to decode (a `JSONDecodeError`
    is left to the caller)."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise error(_too_deep(what)) from None
    except _NotFinite as problem:
        raise error(f"{what}: {problem}") from None


def _too_deep(what: str) -> str:
    return f"{what} nests lists or objects more than {MAX_JSON_DEPTH} levels deep; flatten it"


class _NotFinite(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _NotFinite(f"{name} is not a finite number (quote it to mean the text)")
