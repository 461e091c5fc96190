"""Compatibility fix for a CPU torch next to a CUDA-only torchvision build.

Why: on machines where pip pairs the CPU wheel of torch with a torchvision built for CUDA, the
torchvision C++ extension cannot load, and ``import torchvision`` then crashes in
``torchvision/_meta_registrations.py`` with ``RuntimeError: operator torchvision::nms does not
exist``. transformers 5 imports torchvision for its image processors (Qwen2-VL among them), so
every model import fails. torchvision registers fake kernels for ``nms`` and ``qnms``
unconditionally; defining those two operator schemas before torchvision is imported lets it
import with its compiled ops disabled. The image transforms (all this package uses) work; the
detection ops raise when called.

This is the normal state of an install made as the README says: PyPI carries the CPU torch
pinned in ``constraints.txt`` but only the CUDA build of the matching torchvision (the CPU one lives
on download.pytorch.org). Nothing here calls a torchvision C++ op, so the fix is logged at DEBUG
level, not as a warning every command would print.

On a machine where torchvision matches torch the extension loads and this module does nothing.
Import it (``import vrag_compress.compat``) before anything that imports transformers.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

_SCHEMA = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
_OPS = ("nms", "qnms")
_state: dict[str, bool] = {"active": False, "checked": False}


def _extension_path() -> Path | None:
    """Where torchvision's compiled ``_C`` extension lives, found without importing torchvision."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = Path(folder) / f"_C{suffix}"
            if candidate.is_file():
                return candidate
    return None


def _has_op(name: str) -> bool:
    import torch

    try:
        getattr(torch.ops.torchvision, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def torchvision_ops_broken() -> bool:
    """True when torchvision is installed but its C++ ops cannot be loaded next to this torch."""
    import torch

    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is None:
        return False
    if _has_op("nms"):
        return False
    library = _extension_path()
    if library is not None:
        try:
            torch.ops.load_library(str(library))
        except (OSError, RuntimeError):
            return True
        return not _has_op("nms")
    return True


def ensure_torchvision_importable() -> bool:
    """Define the missing torchvision operator schemas when needed; returns whether it acted.

    Idempotent and cheap after the first call; logs one DEBUG line when the fix is active.
    """
    if _state["checked"]:
        return _state["active"]
    _state["checked"] = True
    if not torchvision_ops_broken():
        return False
    import torch

    for name in _OPS:
        if not _has_op(name):
            torch.library.define(f"torchvision::{name}", _SCHEMA)
    _state["active"] = True
    logger.debug(
        "torchvision's compiled ops do not match this torch (CPU torch with a CUDA torchvision "
        "build); running with torchvision's C++ ops disabled. Image transforms work; "
        "torchvision.ops detection functions will raise."
    )
    return True


ensure_torchvision_importable()
