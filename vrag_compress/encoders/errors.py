"""Errors raised while loading encoders or encoding inputs (torch-free, cheap to import)."""

from __future__ import annotations

from collections.abc import Sequence


class EncoderLoadError(RuntimeError):
    """A model could not be loaded: missing weights, unsupported architecture, bad device."""


class ModelNotFoundError(EncoderLoadError):
    """A hub id is not available (offline, not cached) and is not a local folder."""


class UnsupportedModelError(EncoderLoadError):
    """The checkpoint's architecture is not one of the supported Col* families."""


class StatsUnavailableError(EncoderLoadError):
    """The model encodes, but its attention statistics (centrality, EOS attention) cannot be
    captured, so statistics-based compression (SAP) cannot run on it."""


class EncoderInputError(ValueError):
    """The images or queries handed to an encoder are not usable (wrong type, empty image)."""


def model_not_found_message(model: str, reason: str) -> str:
    """The one explanation users get when weights are missing (how to use local weights)."""
    return (
        f"model {model!r} is not available: {reason}. This machine cannot download it "
        "(HF_HUB_OFFLINE=1 or no network). To use real weights, download them where there is "
        f"internet with `huggingface-cli download {model} --local-dir DIR` (for adapter "
        "checkpoints such as vidore/colqwen2-v1.0 also download the base model named in "
        "adapter_config.json), copy DIR here and pass the folder path as the model. "
        "'minilm' is a real offline encoder that reads each page's text (text layer or OCR), "
        "and 'auto' picks the best model available here. 'tiny-colqwen2' and 'tiny-colpali' "
        "run offline, but they are random models whose vectors are meaningless for retrieval "
        "(tests and smoke runs only)."
    )


def check_text_queries(queries: Sequence[str]) -> None:
    """Every query a non-empty string (blank ones have no tokens to search with)."""
    for i, query in enumerate(queries):
        if not isinstance(query, str) or not query.strip():
            raise EncoderInputError(f"query {i} is empty; give a non-empty string")
