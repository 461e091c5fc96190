"""Which optional extra provides a missing module, so a missing dependency is one clear line.

Import-free on purpose: the CLI uses it when an import has just failed.
"""

from __future__ import annotations

EXTRA_OF_MODULE: dict[str, str] = {
    "qdrant_client": "qdrant",
    "fastapi": "serve",
    "uvicorn": "serve",
    "multipart": "serve",
    "python_multipart": "serve",
    "swagger_ui_bundle_v2": "serve",
    "langchain_vrag_compress": "ask",
    "langchain": "ask",
    "rapidocr_onnxruntime": "ocr",
    "pdf2image": "pdf2image",
    "ranx": "bench",
    "vrag_compress_bench": "bench",  # `vrag bench`: the vrag-compress-bench distribution
    "mcp": "mcp",
}
"""Top-level module -> the extra of pyproject.toml that installs it."""


def install_command(extra: str) -> str:
    return f"pip install 'vrag-compress[{extra}]'"


def _missing_modules(error: BaseException) -> list[str]:
    """The names of the modules that failed to import, along the error's cause chain."""
    names: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ImportError) and current.name:
            names.append(current.name)
        current = current.__cause__ or current.__context__
    return names


def missing_extra(error: BaseException) -> tuple[str, str] | None:
    """(module, extra) when `error` comes from a module one of our extras installs."""
    for name in _missing_modules(error):
        extra = EXTRA_OF_MODULE.get(name.split(".")[0])
        if extra is not None:
            return name, extra
    return None


def missing_dependency_message(error: BaseException) -> str:
    """One line for a failed import: the extra to install, else the module and the error."""
    found = missing_extra(error)
    if found is not None:
        module, extra = found
        return (
            f"this needs the [{extra}] extra ({module} is not installed): {install_command(extra)}"
        )
    names = _missing_modules(error)
    what = f"{names[0]} is not installed" if names else str(error)
    return f"a dependency could not be imported ({what}); reinstall vrag-compress ({error})"
