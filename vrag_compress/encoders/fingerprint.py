"""Which files a model name means, and a fingerprint of their weights; imports no torch.

Why: an index's vectors, and an ONNX query export, only agree with queries encoded by the same
weights, and a model name does not pin them: a relative folder (``models/col``) is another
folder in another project, a folder can be rewritten in place with the same shapes, a hub
snapshot can move to a new revision. The index records `model_fingerprint` when it is created
and every ONNX export records it too, so a search can notice either drifting without loading
the model.

What is hashed: each weight file's relative name and size, and its bytes: all of them while the
weights total at most `WHOLE_BYTES`, else `SAMPLES` blocks of `SAMPLE_BYTES` per file spread
evenly from its first to its last byte (4 MiB per file, read on every open). A PEFT adapter's
base model is included.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path
from typing import Any

from vrag_compress.encoders.base import ST_PREFIX, TEXT_MODELS

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".npy")
WHOLE_BYTES = 64 * 2**20
"""Weights up to this total size are hashed whole; larger ones are sampled, file by file."""
SAMPLES = 64
SAMPLE_BYTES = 64 * 2**10
FINGERPRINT_VERSION = "w1"
"""Prefix of every fingerprint; changes when what is hashed changes."""

_memo: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}
"""Digests already computed in this process, keyed by the files' names, sizes and times."""


def model_folder(model_id: str) -> Path | None:
    """The local folder `load_encoder` would read for `model_id`, or None when there is none
    here (a hub id not in the cache, a tiny model not built yet, a name no folder can have)."""
    try:
        return _model_folder(str(model_id).removeprefix(ST_PREFIX))
    except (OSError, ValueError, RuntimeError):  # too long, NUL bytes, ~unknown-user
        return None


def _model_folder(name: str) -> Path | None:
    from vrag_compress.encoders.tiny import MARKER_FILE, TINY_MODELS, cache_root, make_spec

    if name in TEXT_MODELS:
        try:
            module = importlib.import_module(TEXT_MODELS[name])
        except ImportError:
            return None
        return Path(module.get_model_path()).resolve()
    if name in TINY_MODELS:
        folder = cache_root() / make_spec(TINY_MODELS[name]).folder_name
        return folder.resolve() if (folder / MARKER_FILE).is_file() else None
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.is_absolute() or name.startswith((".", "~")) or name.count("/") != 1:
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True)).resolve()
    except Exception:  # not cached, or an invalid id: no local files to fingerprint
        return None


def model_identity(model_id: str) -> str:
    """A string naming the model without collisions: the id, plus the absolute folder when the
    id is a local folder (the same relative id is another model in another working folder)."""
    name = str(model_id)
    folder = model_folder(name)
    try:
        local = Path(name.removeprefix(ST_PREFIX)).expanduser().is_dir()
    except (OSError, ValueError, RuntimeError):
        local = False
    return f"{name}\n{folder}" if folder is not None and local else name


def model_fingerprint(model_id: str) -> str | None:
    """The fingerprint of the weights `model_id` means here, or None when they cannot be found
    or read (never an error: opening an index must not fail on it)."""
    folder = model_folder(model_id)
    try:
        return None if folder is None else weights_fingerprint(folder)
    except OSError:  # unreadable, or removed while hashing
        return None


def weights_fingerprint(folder: Path) -> str | None:
    """``w1:<sha256>`` of the weight files under `folder` and of its adapter's base model
    (None when the folder holds no weight files)."""
    own = _files_digest(folder)
    if own is None:
        return None
    base = _base_folder(folder)
    below = _files_digest(base) if base is not None else None
    digest = hashlib.sha256(f"{own}\0{below}".encode())
    return f"{FINGERPRINT_VERSION}:{digest.hexdigest()}"


def _files_digest(folder: Path) -> str | None:
    """sha256 of the weight files' names, sizes and (sampled) bytes; memoised per process
    while their names, sizes and modification times stay the same."""
    files = sorted(
        (f.relative_to(folder).as_posix(), f)
        for f in folder.rglob("*")
        if f.suffix in WEIGHT_SUFFIXES and not _hidden(f.relative_to(folder)) and f.is_file()
    )
    if not files:
        return None
    stats = tuple((name, f.stat().st_size, f.stat().st_mtime_ns) for name, f in files)
    key = (str(folder), stats)
    if key not in _memo:
        digest = hashlib.sha256()
        whole = sum(size for _, size, _ in stats) <= WHOLE_BYTES
        for (name, file), (_, size, _) in zip(files, stats, strict=True):
            digest.update(f"{name}\0{size}\0".encode())
            _hash_bytes(file, size, digest, whole=whole)
        _memo[key] = digest.hexdigest()
    return _memo[key]


def _hidden(relative: Path) -> bool:
    """Files under dot folders (``.cache``, ``.git``) are not the model's weights."""
    return any(part.startswith(".") for part in relative.parts)


def _hash_bytes(file: Path, size: int, digest: Any, *, whole: bool) -> None:
    """The whole file (or one smaller than the samples), else evenly spread blocks (first and
    last included)."""
    with open(file, "rb") as handle:
        if whole or size <= SAMPLES * SAMPLE_BYTES:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
            return
        for i in range(SAMPLES):
            handle.seek(i * (size - SAMPLE_BYTES) // (SAMPLES - 1), os.SEEK_SET)
            digest.update(handle.read(SAMPLE_BYTES))


def _base_folder(folder: Path) -> Path | None:
    """A PEFT adapter's base model (most of its weights), when it is found here."""
    config = folder / "adapter_config.json"
    if not config.is_file():
        return None
    try:
        base = json.loads(config.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    return model_folder(str(base)) if base else None
