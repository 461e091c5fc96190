"""The public surface: what `vrag_compress` exports, and that the framework integrations use only
that (so the core can change its modules without breaking them) while the core imports no
framework."""

from __future__ import annotations

import ast
import base64
import io
from pathlib import Path

import pytest
from PIL import Image

import vrag_compress

ROOT = Path(__file__).resolve().parents[1]
INTEGRATION_SOURCES = [
    ROOT / "integrations" / "langchain" / "langchain_vrag_compress",
    *sorted((ROOT / "integrations" / "llama-index").glob("llama-index-*/llama_index")),
]
FRAMEWORKS = ("langchain", "langchain_core", "langchain_classic", "llama_index")
INTEGRATIONS = ("langchain_vrag_compress", "llama_index")  # they depend on the core, not back


def _imports(folder: Path) -> list[tuple[Path, int, str, list[str]]]:
    """(file, line, module, names) of every import statement under a folder."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((path, node.lineno, node.module, [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found += [(path, node.lineno, a.name, []) for a in node.names]
    return found


def test_all_lists_exactly_the_lazy_exports_and_each_resolves():
    assert set(vrag_compress.__all__) == {"__version__", *vrag_compress._EXPORTS}
    assert len(vrag_compress.__all__) == len(set(vrag_compress.__all__))
    for name in vrag_compress.__all__:
        assert getattr(vrag_compress, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        vrag_compress.nope  # noqa: B018


@pytest.mark.parametrize("folder", INTEGRATION_SOURCES, ids=lambda p: p.name)
def test_integrations_import_only_names_exported_by_vrag_compress(folder: Path):
    assert folder.is_dir(), folder
    bad = []
    for path, line, module, names in _imports(folder):
        if module != "vrag_compress" and not module.startswith("vrag_compress."):
            continue
        where = f"{path.relative_to(ROOT)}:{line}"
        if module != "vrag_compress" or not names:
            bad.append(f"{where}: imports {module} (use `from vrag_compress import ...`)")
        bad += [
            f"{where}: {name} is not in vrag_compress.__all__"
            for name in names
            if name not in vrag_compress.__all__
        ]
    assert not bad, "\n".join(bad)


def test_the_core_imports_no_framework():
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path, line, module, _ in _imports(ROOT / "vrag_compress")
        if module.split(".")[0] in FRAMEWORKS
    ]
    assert not bad, "frameworks belong under integrations/:\n" + "\n".join(bad)


def _imported_names(folder: Path) -> list[tuple[Path, int, str]]:
    """Every module an import statement or an ``import_module("...")`` call names."""
    found = [(path, line, module) for path, line, module, _ in _imports(folder)]
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.append((path, node.lineno, node.args[0].value))
    return found


def test_the_core_imports_no_integration():
    """The integrations depend on vrag-compress; the core reaches them only through plugins
    (entry points such as ``vrag_compress.chat_models``), never by importing them."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path, line, module in _imported_names(ROOT / "vrag_compress")
        if module.split(".")[0] in INTEGRATIONS
    ]
    assert not bad, "the core must not import an integration:\n" + "\n".join(bad)


def test_the_store_imports_nothing_of_the_pipeline():
    """The store is a layer below: it may use its own modules, MaxSim, the durable write and the
    version, no more (tests/test_import_layers.py checks every layer)."""
    allowed = (
        "vrag_compress.store",
        "vrag_compress.scoring",
        "vrag_compress.durable",
        "vrag_compress.version",
    )
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path, line, module in _imported_names(ROOT / "vrag_compress" / "store")
        if module.startswith("vrag_compress")
        and not any(module == a or module.startswith(a + ".") for a in allowed)
    ]
    assert not bad, "the store imports the pipeline:\n" + "\n".join(bad)


def test_page_id_is_the_one_default_id_format():
    page = vrag_compress.Page("report", 3, Image.new("RGB", (4, 4)), None, Path("/r.pdf"))
    assert vrag_compress.page_id("report", 3) == page.page_id == "report:3"


def test_image_base64_downsizes_and_names_the_mime_type():
    data, mime = vrag_compress.image_base64(Image.new("RGB", (400, 200), "red"), "jpeg", 100)
    assert mime == "image/jpeg"
    with Image.open(io.BytesIO(base64.b64decode(data))) as decoded:
        assert decoded.format == "JPEG" and decoded.size == (100, 50)
    with pytest.raises(ValueError, match="image_format 'gif' is not supported"):
        vrag_compress.image_base64(Image.new("RGB", (4, 4)), "gif")
