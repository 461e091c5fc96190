"""Tiny random Col* checkpoints (every colpali-engine family) that build offline in seconds.

Why: no real weights can be downloaded on the test machines, yet the encoders, the attention
capture and everything downstream must run through the real model classes and the real
``from_pretrained`` loading path. These checkpoints have random weights and a toy tokenizer:
their vectors are MEANINGLESS for retrieval. They exist for tests, smoke runs and benchmarks
whose cost depends only on the architecture (depth, heads, sequence length).

A checkpoint is built deterministically (fixed seed) into a cache folder, once; concurrent
builders each write a private temporary folder and atomically rename it into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vrag_compress.encoders.tiny_families import RECIPES

TINY_MODELS: dict[str, str] = {
    "tiny-colpali": "colpali",
    "tiny-colqwen2": "colqwen2",
    "tiny-colqwen2_5": "colqwen2.5",
    "tiny-colsmol": "colidefics3",
    "tiny-colqwen3": "colqwen3",
    "tiny-colqwen3_5": "colqwen3.5",
    "tiny-colgemma3": "colgemma3",
    "tiny-colmodernvbert": "colmodernvbert",
}
"""Tiny model names accepted wherever a model name is, mapped to their family."""

MARKER_FILE = "vrag_tiny.json"
"""Written into every tiny checkpoint; its presence labels the folder as random weights."""

CACHE_ENV = "VRAG_CACHE_DIR"
RECIPE_VERSION = 3


class TinyModelError(ValueError):
    """A tiny-model request is malformed (unknown name or family, impossible sizes)."""


@dataclass(frozen=True)
class TinySpec:
    """Everything that determines a tiny checkpoint's bytes (the cache key)."""

    family: str
    image_size: int
    layers: int
    heads: int
    seed: int = 0
    version: int = RECIPE_VERSION

    @property
    def folder_name(self) -> str:
        return (
            f"tiny-{self.family}-s{self.image_size}-l{self.layers}-h{self.heads}"
            f"-seed{self.seed}-v{self.version}"
        )


def default_image_size(family: str) -> int:
    """The family's default input side (see `tiny_families.RECIPES` for what it means)."""
    return RECIPES[family].default_size


def make_spec(
    family: str,
    *,
    image_size: int | None = None,
    layers: int | None = None,
    heads: int = 4,
    seed: int = 0,
) -> TinySpec:
    """Validate the options and return the spec that names the cache folder."""
    recipe = RECIPES.get(family)
    if recipe is None or family not in TINY_MODELS.values():
        raise TinyModelError(
            f"unknown tiny model family {family!r}; choose one of {sorted(TINY_MODELS.values())}"
        )
    size = recipe.default_size if image_size is None else int(image_size)
    if size < recipe.size_step or size % recipe.size_step:
        raise TinyModelError(
            f"image_size for {family} ({recipe.size_help}) must be a positive multiple of "
            f"{recipe.size_step}, got {size}"
        )
    layers = recipe.default_layers if layers is None else int(layers)
    if layers < 1 or heads < 2 or heads % 2:
        raise TinyModelError(f"need layers >= 1 and an even heads >= 2, got {layers=} {heads=}")
    return TinySpec(family=family, image_size=size, layers=layers, heads=int(heads), seed=seed)


def cache_root() -> Path:
    """``$VRAG_CACHE_DIR/tiny`` or ``~/.cache/vrag_compress/tiny``."""
    base = os.environ.get(CACHE_ENV)
    root = Path(base) if base else Path.home() / ".cache" / "vrag_compress"
    return root / "tiny"


def tiny_model_path(name_or_family: str, **options: Any) -> Path:
    """The folder of a tiny checkpoint, building it first when it is not cached yet.

    ``name_or_family``: a `TINY_MODELS` name (``"tiny-colqwen2"``) or the bare family name.
    ``options``: ``image_size``, ``layers``, ``heads``, ``seed`` (see `build_tiny_model`).
    """
    family = TINY_MODELS.get(name_or_family, name_or_family)
    spec = make_spec(family, **options)
    target = cache_root() / spec.folder_name
    if (target / MARKER_FILE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.folder_name}-", dir=target.parent))
    try:
        _build(spec, staging)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / MARKER_FILE).is_file():  # lost a race to a broken folder: replace it
                shutil.rmtree(target, ignore_errors=True)
                os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def build_tiny_model(
    family: str,
    out_dir: str | Path,
    *,
    image_size: int | None = None,
    layers: int | None = None,
    heads: int = 4,
    seed: int = 0,
) -> Path:
    """Build a tiny random checkpoint (model + processor) into ``out_dir`` and return it.

    ``image_size``: ColPali's square input side (tokens = (size/14)^2; 448 gives the real 1024);
    for the Qwen families the longest side the processor allows; for ColSmol/ModernVBERT the
    tile side. ``layers`` / ``heads``: decoder depth (family default when None) and attention
    heads (head dim fixed at 16).
    """
    spec = make_spec(family, image_size=image_size, layers=layers, heads=heads, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _build(spec, out)
    return out


def _build(spec: TinySpec, out: Path) -> None:
    import torch

    import vrag_compress.compat  # noqa: F401  (before transformers)

    torch.manual_seed(spec.seed)
    RECIPES[spec.family].build(spec, out)
    info = {**asdict(spec), "warning": "random weights: meaningless for retrieval"}
    (out / MARKER_FILE).write_text(json.dumps(info, indent=2))
