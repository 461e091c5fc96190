"""`vrag export-onnx`: export a text model's query path so CPU searches run without torch."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from vrag_compress.cli.app import app
from vrag_compress.cli.index import JsonOpt, emit_json, fail

out = Console()

CHECK_QUERIES = ("what is the operating cost", "background checks by state 2015", "x")
TOLERANCE = 1e-3
"""Largest element difference accepted between the torch and the ONNX query vectors."""


@app.command("export-onnx")
def export_onnx(
    target: str = typer.Argument(
        ..., metavar="INDEX_OR_MODEL", help="An index folder (its model is exported) or a model."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Export a text model's query encoder to ONNX (once per model, into the model cache).

    Afterwards every CPU search of an index built with that model encodes its query with ONNX
    Runtime, without loading torch. The export is checked against the torch encoder before it is
    kept. Text models only (minilm, a local BERT-style folder); Col* queries still use torch."""
    import numpy as np

    from vrag_compress.encoders import EncoderLoadError, load_encoder
    from vrag_compress.encoders.onnx_query import OnnxTextQueryEncoder, export_text_queries

    model = _model_of(target)
    started = time.perf_counter()
    try:
        encoder = load_encoder(model, device="cpu")
        folder = export_text_queries(encoder)
    except (EncoderLoadError, ImportError) as error:
        fail(f"cannot export {model!r}: {error}")
    exported = OnnxTextQueryEncoder(folder)
    difference = max(
        float(np.abs(a - b).max())
        for a, b in zip(
            encoder.encode_queries(list(CHECK_QUERIES)),
            exported.encode_queries(list(CHECK_QUERIES)),
            strict=True,
        )
    )
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


def _model_of(target: str) -> str:
    """The model recorded by an index folder, or the target itself (a name or model folder)."""
    folder = Path(target)
    if folder.is_dir() and not (folder / "config.json").is_file():
        from vrag_compress.index import VisualIndex, VisualIndexError
        from vrag_compress.store import StoreError

        try:
            with VisualIndex.open(folder, readonly=True) as index:
                return index.model_id
        except (VisualIndexError, StoreError) as error:
            fail(str(error))
    return target
