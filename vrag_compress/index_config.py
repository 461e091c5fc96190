"""What an index was built with: the typed, versioned config written at create and read at open.

The store keeps the config as a JSON object; this module is the only code that turns it into
values (`IndexConfig.from_dict`) or back (`IndexConfig.to_dict`). The defaults an index is created
with come from `vrag_compress.defaults`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from vrag_compress.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_DPI,
    DEFAULT_IMAGE_FORMAT,
    DEFAULT_IMAGE_MAX_SIDE,
    DEFAULT_METHOD,
    DEFAULT_MODEL,
    DEFAULT_RATIO,
    DEFAULT_RENDERER,
)
from vrag_compress.encoders.speedups import DTYPES, SPEEDUPS, encoder_options
from vrag_compress.store.candidates.cells import CODES

if TYPE_CHECKING:
    from vrag_compress.compress.base import Compressor

log = logging.getLogger(__name__)

CONFIG_VERSION = 1
"""Bumped when the meaning of a key changes; older configs are still read (missing keys take the
defaults), newer ones are refused with an upgrade hint."""

__all__ = [
    "CONFIG_VERSION",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_DPI",
    "DEFAULT_METHOD",
    "DEFAULT_MODEL",
    "DEFAULT_RATIO",
    "DEFAULT_RENDERER",
    "ImageOptions",
    "IndexConfig",
    "IndexConfigError",
    "IndexOptions",
    "ModelChangedWarning",
    "VisualIndexError",
]


class VisualIndexError(RuntimeError):
    """A problem with the index as a whole (wrong model, missing folder, closed index)."""


class IndexConfigError(VisualIndexError):
    """The stored index config is unreadable or from a newer version of the package."""


class ModelChangedWarning(UserWarning):
    """The model's weights differ from those the index was built with (`model_fingerprint`):
    queries and stored page vectors no longer come from one model, so rankings may shift."""


@dataclass(frozen=True)
class ImageOptions:
    """Whether page images are stored in the index folder, in which format, at what size."""

    store: bool = True
    format: str = DEFAULT_IMAGE_FORMAT
    max_side: int = DEFAULT_IMAGE_MAX_SIDE

    def to_dict(self) -> dict[str, Any]:
        """The options as the config stores them (``images`` key)."""
        return {"store": self.store, "format": self.format, "max_side": self.max_side}


_IMAGE_KEYWORDS = {"store_images": "store", "image_format": "format", "image_max_side": "max_side"}


@dataclass(frozen=True)
class IndexOptions:
    """What a new index records besides its model and compressor, as one typed object that
    `VisualIndex.create`, `open_or_create` and `vrag index` pass whole.

    ``dtype`` ("auto", "fp32", "bf16") and ``speedup`` ("none", "int8") are the Col* loading
    options; ``codes`` ("none", "4bit", "2bit", "1bit") the residual codes of the candidate index;
    ``fp16`` True keeps fp16 rows for good, False only the codes (embedded store only); both
    None (the default) let the store pick its layout by size (store/local/layout.py)."""

    batch_size: int = DEFAULT_BATCH_SIZE
    dpi: int = DEFAULT_DPI
    renderer: str = DEFAULT_RENDERER
    images: ImageOptions = ImageOptions()
    dtype: str = "auto"
    speedup: str = "none"
    codes: str | None = None
    fp16: bool | None = None

    @classmethod
    def with_keywords(cls, base: IndexOptions | None = None, **keywords: Any) -> IndexOptions:
        """``base`` (or the defaults) with `create`'s keyword arguments applied: the fields by
        name, and ``store_images``/``image_format``/``image_max_side`` for ``images``."""
        options = base or cls()
        known = {f.name for f in fields(cls)} - {"images"}
        unknown = sorted(set(keywords) - known - set(_IMAGE_KEYWORDS))
        if unknown:
            raise VisualIndexError(
                f"unknown index option {', '.join(unknown)}; the options are "
                f"{', '.join(sorted(known | set(_IMAGE_KEYWORDS)))}"
            )
        images = {_IMAGE_KEYWORDS[k]: v for k, v in keywords.items() if k in _IMAGE_KEYWORDS}
        flat = {k: v for k, v in keywords.items() if k in known}
        return replace(options, images=replace(options.images, **images), **flat)

    def encoder_options(self) -> dict[str, str]:
        """The non-default Col* loading options the config records (checked)."""
        try:
            return encoder_options(self.dtype, self.speedup)
        except ValueError as error:
            raise VisualIndexError(str(error)) from None


@dataclass(frozen=True)
class IndexConfig:
    """The index's model, compressor and page-rendering settings (JSON keys as stored).

    ``compressor``/``compressor_params`` rebuild the compressor with ``get_compressor``;
    ``compressor_module`` names the module that registers a compressor defined outside the
    package, so an index opened before that module is imported can say what to import.
    ``extra`` keeps keys this version does not know (written by newer code or by tools).
    ``codes`` are the residual codes the store's candidate index keeps per vector ("none",
    "4bit", "2bit", "1bit"; set at creation or by ``vrag optimize INDEX --codes``); ``fp16`` False
    keeps no fp16 vectors at all (searches rerank the decoded codes); ``layout`` "auto" keeps
    fp16 rows while the index is small and switches to ``codes`` past a size (the default of a
    new index, store/local/layout.py), "fixed" keeps what ``fp16`` says.
    ``encoder_options`` are the Col* loading options chosen at create (``dtype``: "float32" or
    "bfloat16"; ``speedup``: "int8"); the encoder is loaded with them again on open.
    ``model_fingerprint`` is `encoders.fingerprint.model_fingerprint` of the model when the index
    was created (None: an older index, or a model without local files); open warns when the
    model's weights no longer match it.
    """

    model_id: str
    dim: int
    compressor: str
    compressor_params: dict[str, Any] = field(default_factory=dict)
    encoder: dict[str, Any] = field(default_factory=dict)
    compressor_module: str | None = None
    images: ImageOptions = field(default_factory=ImageOptions)
    batch_size: int = DEFAULT_BATCH_SIZE
    dpi: int = DEFAULT_DPI
    renderer: str = DEFAULT_RENDERER
    vrag_version: str | None = None
    codes: str = "none"
    encoder_options: dict[str, str] = field(default_factory=dict)
    fp16: bool = True
    layout: str = "fixed"
    model_fingerprint: str | None = None
    config_version: int = CONFIG_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the store records (keys unchanged since the first index format)."""
        data: dict[str, Any] = {
            **self.extra,
            "config_version": self.config_version,
            "model_id": self.model_id,
            "dim": self.dim,
            "encoder": dict(self.encoder),
            "compressor": self.compressor,
            "compressor_params": dict(self.compressor_params),
            "images": self.images.to_dict(),
            "batch_size": self.batch_size,
            "dpi": self.dpi,
            "renderer": self.renderer,
            "vrag_version": self.vrag_version,
        }
        if self.compressor_module is not None:
            data["compressor_module"] = self.compressor_module
        if self.codes != "none":
            data["codes"] = self.codes
        if self.encoder_options:
            data["encoder_options"] = dict(self.encoder_options)
        if not self.fp16:
            data["fp16"] = False
        if self.layout == "auto":
            data["layout"] = "auto"
        if self.model_fingerprint is not None:
            data["model_fingerprint"] = self.model_fingerprint
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexConfig:
        """Read a stored config; keys missing from older indexes take today's defaults."""
        if not isinstance(data, dict):
            raise IndexConfigError(f"index config must be a JSON object, got {type(data).__name__}")
        version = data.get("config_version", CONFIG_VERSION)
        if not isinstance(version, int) or version > CONFIG_VERSION:
            raise IndexConfigError(
                f"index config version {version!r} is newer than this vrag_compress understands "
                f"(up to {CONFIG_VERSION}); upgrade vrag_compress to open this index"
            )
        missing = [key for key in ("model_id", "dim", "compressor") if key not in data]
        if missing:
            raise IndexConfigError(f"index config is missing {missing}; got keys {sorted(data)}")
        known = {f.name for f in fields(cls)} - {"extra"}
        images = data.get("images") or {}
        codes = data.get("codes", "none")
        if codes not in CODES:
            raise IndexConfigError(f"index config 'codes' must be one of {CODES}, got {codes!r}")
        layout = data.get("layout", "fixed")
        if layout not in ("auto", "fixed"):
            raise IndexConfigError(f"index config 'layout' must be auto or fixed, got {layout!r}")
        fingerprint = data.get("model_fingerprint")
        if fingerprint is not None and not isinstance(fingerprint, str):
            raise IndexConfigError(
                f"index config 'model_fingerprint' must be a string, got {fingerprint!r}"
            )
        try:
            return cls(
                model_id=str(data["model_id"]),
                dim=int(data["dim"]),
                compressor=str(data["compressor"]),
                compressor_params=dict(data.get("compressor_params") or {}),
                encoder=dict(data.get("encoder") or {}),
                compressor_module=data.get("compressor_module"),
                images=ImageOptions(**images),
                batch_size=int(data.get("batch_size", DEFAULT_BATCH_SIZE)),
                dpi=int(data.get("dpi", DEFAULT_DPI)),
                renderer=str(data.get("renderer", DEFAULT_RENDERER)),
                vrag_version=data.get("vrag_version"),
                codes=codes,
                encoder_options=_encoder_options(data.get("encoder_options") or {}),
                fp16=data.get("fp16", True) is not False,
                layout=layout,
                model_fingerprint=fingerprint,
                config_version=version,
                extra={k: v for k, v in data.items() if k not in known},
            )
        except (TypeError, ValueError) as exc:
            raise IndexConfigError(f"index config is invalid: {exc}") from exc


def _encoder_options(options: Any) -> dict[str, str]:
    """Check the recorded encoder options (a crafted or hand-edited config fails clearly)."""
    allowed = {"dtype": set(DTYPES.values()), "speedup": set(SPEEDUPS)}
    if not isinstance(options, dict) or any(
        options[key] not in allowed.get(key, ()) for key in options
    ):
        raise IndexConfigError(
            f"index config 'encoder_options' must map dtype to one of {sorted(allowed['dtype'])} "
            f"and speedup to one of {list(SPEEDUPS)}; got {options!r}"
        )
    return dict(options)


def recorded_compressor(config: IndexConfig) -> Compressor:
    """Rebuild the index's compressor; a compressor defined outside the package must have been
    registered (by importing its module) first."""
    from vrag_compress.compress import get_compressor, list_compressors

    if config.compressor not in list_compressors():
        where = (
            f" (defined in module {config.compressor_module!r})" if config.compressor_module else ""
        )
        raise VisualIndexError(
            f"this index was built with the compressor {config.compressor!r}{where}, which is not "
            "registered here; import the module that registers it (register_compressor) "
            "before adding pages"
        )
    return get_compressor(config.compressor, **config.compressor_params)


def reopen_options(options: dict[str, str], device: str) -> dict[str, str]:
    """The recorded encoder options for this device: the CPU-only int8 speedup is left out
    when the encoder lands on a GPU (its vectors are the fp32 ones the index was built to match)."""
    if "speedup" not in options:
        return options
    from vrag_compress.encoders.colpali import pick_device

    if pick_device(device) == "cpu":
        return options
    log.info("encoder speedup %s is CPU-only: not used on %s", options["speedup"], device)
    return {key: value for key, value in options.items() if key != "speedup"}
