"""Which encoder a model name means: Col* checkpoints, the MiniLM page-text encoder, or `auto`.

`auto` picks the best Col* checkpoint that loads here (the Hugging Face cache, or the hub when
downloads are allowed) and otherwise the real offline MiniLM text encoder, and says why.
"""

from __future__ import annotations

import difflib
import logging
import os
from pathlib import Path
from typing import Any

from vrag_compress.encoders.base import ST_PREFIX, TEXT_MODELS, Encoder
from vrag_compress.encoders.errors import (
    EncoderLoadError,
    ModelNotFoundError,
    model_not_found_message,
)
from vrag_compress.encoders.tiny import TINY_MODELS

log = logging.getLogger(__name__)

AUTO = "auto"
AUTO_CANDIDATES = (
    "vidore/colqwen2-v1.0",
    "vidore/colqwen2.5-v0.2",
    "vidore/colpali-v1.3",
)
"""Col* checkpoints `auto` tries, best first: the default ColQwen2 (it has the paper's
calibrated SAP window), then ColQwen2.5 and ColPali. The hub is only tried for the first."""
AUTO_FALLBACK = "minilm"


def known_models() -> list[str]:
    """The short names and checkpoints a model name is compared with to catch typos."""
    return [AUTO, *TEXT_MODELS, *AUTO_CANDIDATES, *TINY_MODELS]


def unknown_model_hint(name: str) -> str | None:
    """Why ``name`` cannot be a model, with the closest known name, or None when it may be one:
    a known name, ``st:...``, an existing path, or a plausible hub id (``owner/name``, which
    may be in the Hugging Face cache). Cheap: nothing is imported or loaded."""
    name = str(name)
    known = known_models()
    if name in known or is_st_name(name) or _on_disk(name):
        return None
    owner, slash, repo = name.partition("/")
    if slash and owner and repo and "/" not in repo and not name.startswith((".", "~")):
        return None
    if "/" in name or os.sep in name or name.startswith((".", "~")):
        return model_not_found_message(name, "no such folder and not a hub id")
    lowered = {k.lower(): k for k in known}  # "MiniLM" means minilm
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    guess = f"did you mean {lowered[close[0]]!r}? " if close else ""
    real = [k for k in known if k not in TINY_MODELS]
    return (
        f"unknown model {name!r}: {guess}Known names: {', '.join(real)} (and tiny-* test "
        "models); or give a Hugging Face hub id (owner/name) or a local folder"
    )


def _on_disk(name: str) -> bool:
    """Whether ``name`` is an existing path; text no file system takes (a NUL, a name over
    255 bytes) or ``~user`` of no such user is not one."""
    try:
        return Path(os.path.expanduser(name)).exists()
    except (OSError, ValueError):
        return False


def check_model_name(name: str) -> None:
    """Raise `ModelNotFoundError` at once for a name that cannot be a model (see above)."""
    hint = unknown_model_hint(name)
    if hint is not None:
        raise ModelNotFoundError(hint)


def is_text_model(name: str) -> bool:
    """Whether ``name`` is a page-text model (MiniLM) rather than a Col* one."""
    return str(name) in TEXT_MODELS


def is_st_name(name: str) -> bool:
    """``st:NAME_OR_PATH``: a Sentence Transformers `MultiVectorEncoder` (see `encoders.st`)."""
    return str(name).startswith(ST_PREFIX)


def load_encoder(model: str | os.PathLike, *, device: str = "auto", **options: Any) -> Encoder:
    """An encoder for any supported name: ``minilm`` (page text), ``auto``, or a Col* model
    (hub id, local folder, tiny name; `options` go to the Col* loader)."""
    name = str(model)
    check_model_name(name)
    if name == AUTO:
        encoder, reason = load_auto_encoder(device=device, **options)
        log.warning("model auto: using %s (%s)", encoder.model_id, reason)
        return encoder
    if is_st_name(name):
        from vrag_compress.encoders.st import load_st_encoder

        return load_st_encoder(name, device=device)
    if is_text_model(name):
        from vrag_compress.encoders.text_pages import PageTextEncoder

        col_only = sorted(k for k in ("dtype", "speedup") if options.get(k) not in (None, "none"))
        if col_only:
            raise EncoderLoadError(
                f"{', '.join(col_only)} apply to Col* models only; {name} runs in float32"
            )
        return PageTextEncoder(name, device=device)
    from vrag_compress.encoders.colpali import load_encoder as load_col_encoder

    return load_col_encoder(name, device=device, **options)


def adapt_encoder(encoder: Any) -> Encoder | None:
    """A Sentence Transformers `MultiVectorEncoder` becomes our encoder; others pass through."""
    if encoder is None or not is_multi_vector_encoder(encoder):
        return encoder
    from vrag_compress.encoders.st import wrap_multi_vector_encoder

    return wrap_multi_vector_encoder(encoder)


def is_multi_vector_encoder(obj: object) -> bool:
    """Whether `obj` is a Sentence Transformers `MultiVectorEncoder` (without importing it)."""
    return any(
        cls.__name__ == "MultiVectorEncoder" and cls.__module__.startswith("sentence_transformers")
        for cls in type(obj).__mro__
    )


def load_auto_encoder(
    *, device: str = "auto", candidates: tuple[str, ...] = AUTO_CANDIDATES, **options: Any
) -> tuple[Encoder, str]:
    """The best Col* encoder that loads here, else MiniLM; returns it with the reason."""
    from vrag_compress.encoders.colpali import load_encoder as load_col_encoder

    tried = []
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
    for position, name in enumerate(candidates):
        if not _cached(name) and (offline or position > 0):
            tried.append(f"{name}: not in the Hugging Face cache")
            continue
        try:
            col_encoder = load_col_encoder(name, device=device, **options)
        except EncoderLoadError as error:
            tried.append(f"{name}: {str(error).split('. ')[0]}")
            continue
        return col_encoder, f"best Col* checkpoint available here: {name}"
    from vrag_compress.encoders.text_pages import PageTextEncoder

    fallback = PageTextEncoder(AUTO_FALLBACK, device=device)
    reason = (
        "no Col* checkpoint could be loaded ("
        + "; ".join(tried)
        + "), so the real offline MiniLM text encoder reads each page's text layer or OCR text"
    )
    return fallback, reason


def _cached(name: str) -> bool:
    """Whether the hub id has a complete snapshot in the local Hugging Face cache."""
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(name, local_files_only=True)
    except Exception:  # not cached, or a partial/invalid cache entry: both mean "not here"
        return False
    return True
