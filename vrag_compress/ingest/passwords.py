"""Passwords of protected PDFs, per file, from a file rather than the command line.

A password typed as an argument lands in shell history and process listings, so `vrag index`
reads them from a file (``--passwords-file FILE``, or the file ``VRAG_PDF_PASSWORDS`` names):
a JSON object ``{"name.pdf": "password"}`` or lines ``name<TAB>password``. A key matches a file
by its name, its path as given or its absolute path. Passwords are used to open the files and are
never stored (index, job records) nor shown (errors name the file and line, not the secret).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

PASSWORDS_ENV = "VRAG_PDF_PASSWORDS"


class PasswordFileError(ValueError):
    """A passwords file that cannot be read or parsed; the message never quotes a password."""


def load_passwords(path: str | Path) -> dict[str, str]:
    """``{file name or path: password}`` from a JSON object or ``name<TAB>password`` lines
    (blank lines and lines starting with ``#`` are skipped)."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PasswordFileError(f"{path}: cannot read the passwords file ({error})") from None
    if text.lstrip().startswith("{"):
        return _from_json(path, text)
    return _from_lines(path, text)


def _from_json(path: Path, text: str) -> dict[str, str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:  # the message quotes no content, only the position
        raise PasswordFileError(
            f"{path}: not valid JSON (line {error.lineno}, column {error.colno})"
        ) from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in data.items()
    ):
        raise PasswordFileError(
            f'{path}: expected a JSON object of file names to password strings, {{"a.pdf": "..."}}'
        )
    return dict(data)


def _from_lines(path: Path, text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, tab, password = line.partition("\t")
        if not tab or not name.strip():
            raise PasswordFileError(
                f"{path} line {number}: expected 'name<TAB>password' (a tab between the file "
                "name and its password), or a JSON object"
            )
        found[name.strip()] = password
    return found


def passwords_from_env() -> dict[str, str] | None:
    """The passwords of the file ``VRAG_PDF_PASSWORDS`` names; None when it is not set."""
    value = os.environ.get(PASSWORDS_ENV, "").strip()
    return load_passwords(value) if value else None


def password_for(path: str | Path, passwords: Mapping[str, str] | None) -> str | None:
    """The password for ``path``: by its path as given, its absolute path, or its file name."""
    if not passwords:
        return None
    path = Path(path)
    for key in (str(path), str(path.absolute()), str(path.resolve()), path.name):
        if key in passwords:
            return passwords[key]
    return None
