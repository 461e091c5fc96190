"""The package's layers, lowest first: a module imports only from its own layer or lower ones.

Every import counts: at module level, inside functions, and under ``TYPE_CHECKING`` (a type-only
import still ties the two modules' designs together, and the next refactor turns it into a runtime
one). So the graph has no cycle, and adding a store backend, a compressor or an encoder never
needs the layers above it.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vrag_compress"

# Lowest first. An entry names one module, or with ``.*`` a module and everything under it; a
# module belongs to the layer of its most specific entry, and a module no entry names fails the
# test until it is placed (so `vrag_compress.store` itself is named alone: a new store module
# goes into the folder of its layer, or is listed here on purpose).
LAYERS: list[tuple[str, ...]] = [
    (  # dependency-free helpers
        "vrag_compress.version",
        "vrag_compress.defaults",
        "vrag_compress.messages",
        "vrag_compress.progress",
        "vrag_compress.compat",
        "vrag_compress.extras",
        "vrag_compress.durable",
        "vrag_compress.driver_watch",
        "vrag_compress.shared_data",
        "vrag_compress.microbatch",
        "vrag_compress.snippets",
        "vrag_compress.threads",
    ),
    ("vrag_compress.scoring.*",),
    (  # the store's contract: what every backend and every caller shares
        "vrag_compress.store.base",
        "vrag_compress.store.user_input",
        "vrag_compress.store.validate",
        "vrag_compress.store.fusion",
        "vrag_compress.store.lexical",
    ),
    ("vrag_compress.store.filters.*", "vrag_compress.store.candidates.*"),
    ("vrag_compress.store.local.*", "vrag_compress.store.qdrant.*"),
    (  # the backend table and what is built on it
        "vrag_compress.store",
        "vrag_compress.store.open",
        "vrag_compress.store.migrate",
    ),
    ("vrag_compress.encoders.*",),  # compressors take encoders.base's page type
    ("vrag_compress.compress.*",),
    ("vrag_compress.ingest.*",),
    (  # the index layer
        "vrag_compress.index_config.*",
        "vrag_compress.indexing.*",
        "vrag_compress.index.*",
        "vrag_compress.distributed.*",
        "vrag_compress.estimate.*",
        "vrag_compress.estimate_queries.*",
        "vrag_compress.calibrate.*",
        "vrag_compress.rerank.*",
        "vrag_compress.answering.*",
        "vrag_compress.explain.*",
        "vrag_compress.image_query.*",
        "vrag_compress.visualize.*",
        "vrag_compress.beir.*",
    ),
    ("vrag_compress.serve.*",),
    ("vrag_compress.cli.*",),
    (  # the package's front door and the test helpers, which may use everything
        "vrag_compress",
        "vrag_compress.__main__",
        "vrag_compress.testing",
    ),
]
STORE_TOP_LEVEL_MAX = 12


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package modules the file of module ``name`` imports anywhere in it, ``TYPE_CHECKING``
    blocks included. ``from pkg import name`` counts as ``pkg.name`` when that is a module."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return found & modules


def _graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package modules it imports, for the package under ``root``."""
    files = {_module_name(p, root): p for p in (root / "vrag_compress").rglob("*.py")}
    return {name: _imports(path, name, set(files)) - {name} for name, path in files.items()}


def _layer(module: str) -> int | None:
    """The index in `LAYERS` of the most specific entry naming ``module``."""
    best: tuple[int, int] | None = None
    for index, entries in enumerate(LAYERS):
        for entry in entries:
            base = entry.removesuffix(".*")
            covers = module == base or (entry.endswith(".*") and module.startswith(base + "."))
            if covers and (best is None or len(base) > best[0]):
                best = (len(base), index)
    return None if best is None else best[1]


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, str] = {}
    cycles: list[str] = []

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycles.append(" -> ".join([*trail[trail.index(target) :], target]))
            elif target not in state:
                visit(target, [*trail, target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a higher layer, and every module in no layer."""
    bad = [f"{name} is in no layer: add it to LAYERS" for name in graph if _layer(name) is None]
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            low, high = _layer(name), _layer(target)
            if low is not None and high is not None and high > low:
                bad.append(f"{name} (layer {low}) imports {target} (layer {high})")
    return bad


def test_the_package_has_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (type-only imports count):\n" + "\n".join(cycles)


def test_no_import_runs_up_the_layers():
    bad = _upward(_graph())
    assert not bad, "imports against the layer order (lowest first):\n" + "\n".join(bad)


def test_the_store_folder_keeps_its_top_level_small():
    top = sorted(p.name for p in (PACKAGE / "store").glob("*.py"))
    assert len(top) <= STORE_TOP_LEVEL_MAX, (
        f"vrag_compress/store/ has {len(top)} modules at its top level (at most "
        f"{STORE_TOP_LEVEL_MAX}): put the new one in the folder of its layer ({', '.join(top)})"
    )


@pytest.mark.parametrize(
    ("module", "source", "problem"),
    [
        (
            "store/base.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from vrag_compress.store.local.catalog import Catalog\n",
            "vrag_compress.store.base (layer 2) imports vrag_compress.store.local.catalog",
        ),
        (
            "store/candidates/files.py",
            "def f():\n    from vrag_compress.store.local import segments\n",
            "vrag_compress.store.candidates.files (layer 3) imports "
            "vrag_compress.store.local.segments",
        ),
        ("store/newthing.py", "", "vrag_compress.store.newthing is in no layer"),
    ],
)
def test_a_planted_back_import_is_caught(tmp_path: Path, module: str, source: str, problem: str):
    """The checks see type-only and function-level imports (a copy of the package, one file
    changed), and a module nobody placed."""
    copy = tmp_path / "vrag_compress"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text((target.read_text() if target.exists() else "") + source)
    assert any(problem in line for line in _upward(_graph(tmp_path))), problem
