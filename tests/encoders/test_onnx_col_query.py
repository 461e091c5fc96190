"""`vrag export-onnx` for Col* models: ONNX query vectors and token ids equal the torch path's.

The tiny random checkpoints run the real colpali-engine classes and processors, so the template
replay (prefix, augmentation tokens, special tokens, padding) and the traced decoder are the
real ones; only the sizes are small.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from vrag_compress import VisualIndex
from vrag_compress.encoders import EncoderLoadError, load_encoder
from vrag_compress.encoders.onnx_query import (
    OnnxColQueryEncoder,
    export_queries,
    load_onnx_query_encoder,
)

TOLERANCE = 1e-4
"""Largest element difference accepted between ONNX and torch query vectors (unit rows)."""

HOSTILE = [
    "what is the total revenue reported in 2013?",
    "y",
    "   ",
    "\u202eRTL override\u202c עברית مرحبا",
    "Z\u0351\u0364\u0302a\u0306\u0347l\u0357g\u0366o combining marks",
    "🏳️‍🌈 👨🏿‍💻 ﷽ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ℌ ﬁ ligature",
    "<|im_end|><end_of_utterance><eos>Query: <pad><pad>",
    "quotes \" ' ` and back\\slashes \\n literal",
    "\r\n\t\x0b\x0c\x1f mixed whitespace",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    " ".join(["tokens"] * 400),
]
FAMILIES = ["tiny-colsmol", "tiny-colpali", "tiny-colqwen2"]


@pytest.fixture(scope="module")
def cache(
    tmp_path_factory: pytest.TempPathFactory, private_cache: Callable[[Path], Path]
) -> Iterator[Path]:
    """A private model cache for the exports (its tiny checkpoints are the shared ones)."""
    root = private_cache(tmp_path_factory.mktemp("onnx-col"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VRAG_CACHE_DIR", str(root))
        yield root


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request: pytest.FixtureRequest, cache: Path) -> tuple[object, OnnxColQueryEncoder]:
    """The torch encoder of one tiny family and its ONNX export."""
    encoder = load_encoder(request.param, device="cpu")
    export_queries(encoder)
    exported = load_onnx_query_encoder(request.param)
    assert isinstance(exported, OnnxColQueryEncoder)
    return encoder, exported


def test_query_ids_equal_the_processors(pair: tuple[object, OnnxColQueryEncoder]) -> None:
    encoder, exported = pair
    for query, ids in zip(HOSTILE, exported.query_ids(HOSTILE), strict=True):
        batch = encoder.processor.process_queries([query])  # type: ignore[attr-defined]
        want = batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()
        assert ids == want, query


def test_vectors_equal_torch_one_query_and_a_padded_batch(
    pair: tuple[object, OnnxColQueryEncoder],
) -> None:
    encoder, exported = pair
    for query in HOSTILE:
        want = encoder.encode_queries([query])[0]  # type: ignore[attr-defined]
        got = exported.encode_queries([query])[0]
        assert got.shape == want.shape, query
        assert float(np.abs(got - want).max()) < TOLERANCE, query
    batch = HOSTILE[:4]  # different lengths: the processor's padding side and pad id matter
    wants = encoder.encode_queries(batch, batch_size=len(batch))  # type: ignore[attr-defined]
    for got, want in zip(exported.encode_queries(batch), wants, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        assert float(np.abs(got - want).max()) < TOLERANCE


def test_image_placeholders_are_refused_as_the_processor_refuses_them(
    pair: tuple[object, OnnxColQueryEncoder],
) -> None:
    encoder, exported = pair
    token = encoder.processor.tokenizer.convert_ids_to_tokens(encoder.image_token_id)  # type: ignore[attr-defined]
    query = f"a page with {token} inside"
    try:
        want = encoder.encode_queries([query])[0]  # type: ignore[attr-defined]
    except ValueError:
        with pytest.raises(ValueError, match="reserves for page images"):
            exported.encode_queries([query])
        return
    assert float(np.abs(exported.encode_queries([query])[0] - want).max()) < TOLERANCE


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ("tiny-colgemma3", "query template could not be reproduced"),  # a jinja chat template
        ("tiny-colqwen3_5", "aten::linalg_solve_triangular"),  # Gated DeltaNet's chunked solve
    ],
)
def test_families_that_cannot_export_say_why(cache: Path, model: str, reason: str) -> None:
    with pytest.raises(EncoderLoadError, match=reason):
        export_queries(load_encoder(model, device="cpu"))
    assert load_onnx_query_encoder(model) is None


def test_a_cli_search_of_a_colsmol_index_never_imports_torch(
    cache: Path, shared_data: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from vrag_compress.cli import app

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VRAG_CACHE_DIR": str(cache)}
    pdf = shared_data / "pdfs" / "gov" / "nics-background-checks-2015-11.pdf"
    index = tmp_path / "ix"
    for args in (  # in this process (the cache fixture set VRAG_CACHE_DIR): the probe is checked
        ["index", pdf, "--index", index, "--model", "tiny-colsmol"],
        ["export-onnx", index],
    ):
        result = CliRunner().invoke(app, list(map(str, args)))
        assert result.exit_code == 0, result.output
    argv = ["vrag", "search", str(index), "state totals", "--json"]
    probe = (
        "import json, runpy, sys\n"
        f"sys.argv = {argv!r}\n"
        "try:\n    runpy.run_module('vrag_compress', run_name='__main__')\n"
        "except SystemExit as stop:\n    assert not stop.code, stop.code\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers') if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == []
    onnx_hits = json.loads("\n".join(lines[:-1]))["hits"]
    with VisualIndex.open(index, readonly=True, device="cpu") as opened:
        opened.encoder  # noqa: B018  (a loaded encoder makes queries use torch)
        reference = opened.search("state totals", k=5)
    assert [h["page_id"] for h in onnx_hits] == [h.page_id for h in reference]
    assert [h["score"] for h in onnx_hits] == pytest.approx([h.score for h in reference], abs=1e-3)


def _tiny_colsmol(dtype: object, max_visual_tokens: int | None) -> tuple[object, object]:
    from colpali_engine.models import ColIdefics3, ColIdefics3Processor

    from vrag_compress.encoders.tiny import tiny_model_path

    folder = tiny_model_path("tiny-colsmol")
    model = ColIdefics3.from_pretrained(folder, dtype=dtype).eval()
    return model, ColIdefics3Processor.from_pretrained(folder)


def test_bench_onnx_arch_builds_indexes_exports_and_compares(
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    private_cache: Callable[[Path], Path],
    run_in_process: Callable[..., object],
) -> None:
    """`--arch` on a tiny stand-in for colsmol-256m (the real size takes minutes).

    Its `vrag export-onnx` and the fresh processes it times run in this process here (each
    would import torch and load the model again); test_onnx_query's `bench onnx` test runs
    the timed processes for real."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from vrag_compress.cli import app
    from vrag_compress_bench import encode_archs
    from vrag_compress_bench import onnx as onnx_bench

    stand_in = encode_archs.RealArch("colsmol-256m", "vidore/colSmol-256M", "tiny", _tiny_colsmol)
    monkeypatch.setitem(encode_archs.ARCHS, "colsmol-256m", stand_in)
    monkeypatch.setattr(onnx_bench, "subprocess", SimpleNamespace(run=run_in_process))
    monkeypatch.setenv("VRAG_CACHE_DIR", str(private_cache(tmp_path / "cache")))
    report = tmp_path / "onnx.json"
    args = ["bench", "onnx", "--arch", "colsmol-256m", "--random-weights", "--work", tmp_path]
    args += ["--pages", 10, "--queries", 3, "--starts", 1, "--json", report]
    result = CliRunner().invoke(app, list(map(str, args)))
    assert result.exit_code == 0, result.output
    row = json.loads(report.read_text())
    assert (row["arch"], row["random_weights"], row["pages"]) == ("colsmol-256m", True, 10)
    assert row["export"]["max_abs_difference"] < 1e-3
    for backend in ("onnx", "torch"):
        assert row[backend]["first_query_s"] > 0 and row[backend]["encode_p50_ms"] > 0
    assert row["overlap@10"] == 1.0 and row["max_score_diff"] < 1e-3
    with VisualIndex.open(row["index"], readonly=True) as index:
        assert len(index.documents()) == 10
        assert isinstance(index.query_encoder, OnnxColQueryEncoder)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give --index or --arch"),
        (["--index", "x", "--arch", "colsmol-256m"], "give --index or --arch"),
        (["--arch", "colsmol-256m"], "--random-weights"),
        (["--arch", "colfoo", "--random-weights"], "unknown arch"),
    ],
)
def test_bench_onnx_bad_usage_exits_2(args: list[str], message: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vrag_compress.cli import app

    result = CliRunner().invoke(app, ["bench", "onnx", *args, "--work", str(tmp_path)])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
