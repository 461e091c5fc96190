"""`vrag export-onnx`: export a model's query path so CPU searches run without torch."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from vrag_compress.cli.app import app
from vrag_compress.cli.common import JsonOpt, emit_json, fail
from vrag_compress.cli.options import could_be_path

out = Console()

CHECK_QUERIES = (
    "what is the operating cost",
    "background checks by state 2015",
    "x",
    "Ünïcödé 日本語 🙂 <end_of_utterance>",
)
TOLERANCE = 1e-3
"""Largest element difference accepted between the torch and the ONNX query vectors (unit
rows: 1e-3 leaves MaxSim scores within about 1e-3 per query token)."""


@app.command("export-onnx")
def export_onnx(
    target: str = typer.Argument(
        ..., metavar="INDEX_OR_MODEL", help="An index folder (its model is exported) or a model."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Export a model's query encoder to ONNX (once per model, into the model cache).

    Afterwards every CPU search of an index built with that model encodes its query with ONNX
    Runtime, without loading torch. The export is checked against the torch encoder before it is
    kept, and records the model's identity and weights fingerprint: a search whose model no
    longer matches them, or whose export is damaged, warns and uses torch. Text models (minilm,
    a local BERT-style folder) and Col* checkpoints (ColSmol, ColPali, ColQwen2, ...; a
    real-size one takes minutes and about 2 GB of memory)."""
    from vrag_compress.encoders import EncoderLoadError, load_encoder
    from vrag_compress.encoders.onnx_query import OnnxExportError, export_queries, open_export

    model = _model_of(target)
    started = time.perf_counter()
    try:
        encoder = load_encoder(model, device="cpu")
        folder = export_queries(encoder)
    except (EncoderLoadError, ImportError) as error:
        fail(f"cannot export {model!r}: {error}")
    try:
        exported = open_export(model, dim=int(encoder.dim))
    except ImportError:
        fail(f"the ONNX export of {model!r} in {folder} cannot be loaded: install onnxruntime")
    except OnnxExportError as error:
        fail(f"the ONNX export of {model!r} in {folder} cannot be used: {error}")
    difference = max(_difference(encoder, exported, query) for query in CHECK_QUERIES)
    if difference > TOLERANCE:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        fail(f"the ONNX export of {model!r} differs from torch by {difference:.2g}; not kept")
    report = {
        "model": model,
        "folder": str(folder),
        "size_mb": round(sum(f.stat().st_size for f in folder.iterdir()) / 2**20, 1),
        "max_abs_difference": difference,
        "seconds": round(time.perf_counter() - started, 2),
    }
    if json_out:
        emit_json(report)
        return
    out.print(
        f"exported the query encoder of {escape(model)} to {escape(str(folder))} "
        f"({report['size_mb']} MB; largest difference from torch {difference:.1e})"
    )


def _difference(encoder: Any, exported: Any, query: str) -> float:
    """Largest element difference of one query's vectors (queries are searched one at a time)."""
    import numpy as np

    want = encoder.encode_queries([query])[0]
    got = exported.encode_queries([query])[0]
    if got.shape != want.shape:
        return float("inf")
    return float(np.abs(got - want).max())


def _model_of(target: str) -> str:
    """The model recorded by an index folder, or the target itself (a name or model folder)."""
    folder = Path(target)
    if could_be_path(target) and folder.is_dir() and not (folder / "config.json").is_file():
        from vrag_compress.index import VisualIndex, VisualIndexError
        from vrag_compress.store import StoreError

        try:
            with VisualIndex.open(folder, readonly=True) as index:
                return index.model_id
        except (VisualIndexError, StoreError) as error:
            fail(str(error))
    return target
