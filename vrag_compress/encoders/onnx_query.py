"""Queries without torch: a text model's query path exported to ONNX, run with ONNX Runtime.

Why: a search on the CPU needs one short forward of the query encoder, yet loading torch and
transformers takes seconds and hundreds of MB. `vrag export-onnx` exports the query path of an
index's text model (MiniLM, or another local BERT-style folder) once, into the model cache; every
later search with that model on the CPU tokenizes with the `tokenizers` library and runs the graph
with `onnxruntime`, neither of which imports torch.

What the export holds (``$VRAG_CACHE_DIR/onnx/<model>/``): ``query.onnx`` (token ids -> last hidden
state, dynamic batch and length), ``tokenizer.json``, ``projection.npy`` when the model projects
its vectors, and ``query.json`` (model id, window, dimension). Queries keep every non-padding token
and are L2-normalised rows, exactly as `TextTokenEncoder.encode_queries` does; tests compare both.
Col* families are not exported yet: their queries still load the torch model.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from vrag_compress.encoders.base import unit_rows
from vrag_compress.encoders.errors import EncoderLoadError, check_text_queries
from vrag_compress.encoders.tiny import cache_root

EXPORT_FILES = ("query.onnx", "tokenizer.json", "query.json")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def export_dir(model_id: str) -> Path:
    """Where the export of `model_id` lives (one per model, shared by every index using it)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", str(model_id)).strip("_") or "model"
    return cache_root().parent / "onnx" / slug


def has_export(model_id: str) -> bool:
    folder = export_dir(model_id)
    return all((folder / name).is_file() for name in EXPORT_FILES)


def export_text_queries(encoder: Any, out: Path | None = None) -> Path:
    """Export the query path of a page-text encoder (`PageTextEncoder`); needs torch and onnx.

    Written into a temporary folder and renamed into place, so a reader never sees half of it."""
    import shutil
    import tempfile

    import torch

    try:
        import onnx  # noqa: F401  (torch's exporter writes through it)
    except ImportError as error:
        raise EncoderLoadError(
            "exporting needs the onnx package: pip install 'vrag-compress[onnx]'"
        ) from error
    text = getattr(encoder, "text", None)
    if text is None or not hasattr(text, "model") or not hasattr(text, "tokenizer"):
        raise EncoderLoadError(
            f"{getattr(encoder, 'model_id', encoder)!r} has no exportable text query path; only "
            "text models (minilm or a local BERT-style folder) can be exported to ONNX"
        )
    target = out or export_dir(encoder.model_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=target.parent))
    try:
        _export_graph(text.model, text.tokenizer, work / "query.onnx")
        text.tokenizer.backend_tokenizer.save(str(work / "tokenizer.json"))
        if text.projection is not None:
            np.save(work / "projection.npy", text.projection)
        manifest = {
            "model_id": encoder.model_id,
            "max_length": int(text.max_length),
            "dim": int(encoder.dim),
            "pad_id": int(text.tokenizer.pad_token_id or 0),
            "torch": torch.__version__,
        }
        (work / "query.json").write_text(json.dumps(manifest, indent=2))
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _export_graph(model: Any, tokenizer: Any, file: Path) -> None:
    """Trace ids -> last hidden state with dynamic batch and length (eager attention traces)."""
    import torch

    class HiddenStates(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    sample = tokenizer(["a query", "a longer sample query"], padding=True, return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "hidden")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes about shapes the dynamic axes cover
            torch.onnx.export(
                HiddenStates(model).eval(),
                tuple(sample[name] for name in INPUTS),
                str(file),
                input_names=list(INPUTS),
                output_names=["hidden"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
    finally:
        model.set_attn_implementation(previous)


class OnnxTextQueryEncoder:
    """Query vectors from an ONNX export: `tokenizers` + `onnxruntime`, no torch."""

    reads = "text"

    def __init__(self, folder: Path) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        manifest = json.loads((folder / "query.json").read_text())
        self.model_id = str(manifest["model_id"])
        self.dim = int(manifest["dim"])
        self.max_length = int(manifest["max_length"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.enable_padding(pad_id=int(manifest["pad_id"]))
        projection = folder / "projection.npy"
        self.projection = np.load(projection) if projection.is_file() else None
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(
            str(folder / "query.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def encode_queries(self, queries: list[str]) -> list[np.ndarray]:
        """One [M, D] array of unit rows per query: every non-padding token, as the torch path."""
        check_text_queries(queries)
        encodings = self.tokenizer.encode_batch(list(queries))
        feeds = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        hidden = self.session.run(["hidden"], feeds)[0]
        out = []
        for row, mask in zip(hidden, feeds["attention_mask"].astype(bool), strict=True):
            x = row[mask].astype(np.float32)
            if self.projection is not None:
                x = x @ self.projection.T
            out.append(unit_rows(x))
        return out

    def token_labels(self, query: str) -> list[str]:
        """The query's tokens as text (for explanations), without a transformers tokenizer."""
        return list(self.tokenizer.encode(query).tokens)


def load_onnx_query_encoder(model_id: str) -> OnnxTextQueryEncoder | None:
    """The exported query encoder of `model_id`, or None when it has no export (or the ONNX
    runtime is missing: the torch path then answers, as before)."""
    if not has_export(model_id):
        return None
    try:
        return OnnxTextQueryEncoder(export_dir(model_id))
    except ImportError:
        return None
