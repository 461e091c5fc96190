"""The benchmarks are a distribution of their own (benchmarks/, vrag-compress-bench): released
with the core at the same version, pinning exactly that core, registered as `vrag bench` through
an entry point, and never imported by the library."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from vrag_compress.cli.plugins import ENTRY_POINT_GROUP, KNOWN_GROUPS, load_group

ROOT = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def test_the_benchmarks_pin_the_core_they_ship_with():
    core, bench = project(ROOT), project(ROOT / "benchmarks")
    assert bench["version"] == core["version"]
    pins = [d for d in bench["dependencies"] if re.match(r"vrag-compress\b", d)]
    assert pins == [f"vrag-compress[serve]=={core['version']}"]
    assert core["optional-dependencies"]["bench"] == [f"{bench['name']}=={core['version']}"]


def test_the_entry_point_is_the_group_the_core_knows():
    bench = project(ROOT / "benchmarks")
    assert bench["entry-points"][ENTRY_POINT_GROUP] == {
        "bench": "vrag_compress_bench.cli:bench_app"
    }
    assert KNOWN_GROUPS["bench"].distribution == bench["name"]
    assert "pip install -e ./benchmarks" in KNOWN_GROUPS["bench"].install
    # `vrag --help` lists the group with this line before importing it: the group's own help
    assert load_group("bench").help == KNOWN_GROUPS["bench"].help


def test_make_installs_the_benchmarks_with_the_tests():
    makefile = (ROOT / "Makefile").read_text()
    assert "-e ./benchmarks" in makefile and "benchmarks/pyproject.toml" in makefile


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (inside functions and type-only too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_library_never_imports_the_benchmarks():
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "vrag_compress").rglob("*.py"))
        for name in imported_modules(path)
        if name.startswith(("vrag_compress_bench", "vrag_compress.bench"))
    }
    assert offenders == set()
