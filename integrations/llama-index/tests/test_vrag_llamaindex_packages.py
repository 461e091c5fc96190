"""One distribution per LlamaIndex component type, named and laid out as LlamaIndex names them,
and the old import path still working with a deprecation warning."""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

HERE = Path(__file__).resolve().parents[1]
# distribution -> (module, the classes it exports, the vrag distributions it depends on)
PACKAGES = {
    "llama-index-readers-vrag-compress": (
        "llama_index.readers.vrag_compress",
        {"PDFPageReader", "PageImageNodeParser"},
        set(),
    ),
    "llama-index-vector-stores-vrag-compress": (
        "llama_index.vector_stores.vrag_compress",
        {"VragVectorStore", "StoreSideEmbedding", "UnsupportedFilterError", "to_store_filter"},
        {"llama-index-readers-vrag-compress"},
    ),
    "llama-index-retrievers-vrag-compress": (
        "llama_index.retrievers.vrag_compress",
        {"CompressedColPaliRetriever"},
        {"llama-index-vector-stores-vrag-compress"},
    ),
    "llama-index-postprocessor-vrag-compress": (
        "llama_index.postprocessor.vrag_compress",
        {"VragRerank", "RerankWarning"},
        set(),
    ),
}


def _requirement_name(requirement: str) -> str:
    return requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip()


@pytest.mark.parametrize("distribution", sorted(PACKAGES))
def test_each_distribution_holds_its_module_under_its_name(distribution: str) -> None:
    module, exported, depends_on = PACKAGES[distribution]
    project = tomllib.loads((HERE / distribution / "pyproject.toml").read_text())
    assert project["project"]["name"] == distribution
    assert project["tool"]["llamahub"]["import_path"] == module
    package = HERE / distribution / Path(*module.split("."))
    assert (package / "__init__.py").is_file() and (package / "py.typed").is_file()
    assert not (HERE / distribution / "llama_index" / "__init__.py").exists()  # a namespace
    requirements = {_requirement_name(r) for r in project["project"]["dependencies"]}
    assert {"llama-index-core", "vrag-compress"} | depends_on == requirements
    loaded = importlib.import_module(module)
    assert set(loaded.__all__) == exported
    assert set(project["tool"]["llamahub"]["class_authors"]) <= exported
    assert Path(loaded.__file__).parent == package  # this checkout's copy, not another


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("VragVectorStore", "llama_index.vector_stores.vrag_compress"),
        ("StoreSideEmbedding", "llama_index.vector_stores.vrag_compress"),
        ("UnsupportedFilterError", "llama_index.vector_stores.vrag_compress"),
        ("to_store_filter", "llama_index.vector_stores.vrag_compress"),
        ("PDFPageReader", "llama_index.readers.vrag_compress"),
        ("PageImageNodeParser", "llama_index.readers.vrag_compress"),
    ],
)
def test_the_old_import_path_works_with_a_deprecation_warning(name: str, home: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"use `from {home} import {name}`") as caught:
        namespace: dict = {}
        exec(f"from llama_index.retrievers.vrag_compress import {name}", namespace)
    assert namespace[name] is getattr(importlib.import_module(home), name)
    assert caught[0].filename == "<string>"  # points at the importing line


def test_the_retriever_imports_without_warnings_and_unknown_names_still_fail() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from llama_index.retrievers.vrag_compress import CompressedColPaliRetriever  # noqa: F401
    import llama_index.retrievers.vrag_compress as retrievers

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        retrievers.nope  # noqa: B018


def test_the_install_lines_name_every_distribution_folder() -> None:
    root = HERE.parents[1]
    readme = (HERE / "README.md").read_text()
    folders = re.findall(r"-e (integrations/llama-index/\S+)", readme)
    assert sorted(Path(f).name for f in folders) == sorted(PACKAGES)
    assert all((root / folder / "pyproject.toml").is_file() for folder in folders)
    makefile = (root / "Makefile").read_text()  # `make install` names them by component
    for distribution in PACKAGES:
        assert distribution.removeprefix("llama-index-") in makefile, distribution
