"""Repository hygiene a new user meets first: the licence, install instructions, portable paths."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER_FACING = [
    ROOT / "README.md",
    *sorted((ROOT / "integrations").glob("*/README.md")),
    *sorted((ROOT / "examples").glob("*.py")),
    *sorted((ROOT / "docs").glob("*.md")),
]


def test_license_file_matches_pyproject() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()  # (tomllib needs Python 3.11)
    assert re.search(r'^license = "Apache-2.0"$', pyproject, re.M)
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_no_absolute_paths_of_the_build_machine() -> None:
    pattern = re.compile(r"(?<![\w.])/(work|root|home)/")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in USER_FACING
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_readme_installs_from_the_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "pip install vrag-compress" not in readme
    assert "not published on PyPI" in readme
    assert "pip install -c constraints.txt -e ." in readme
