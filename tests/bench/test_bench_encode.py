"""`vrag bench encode`: real-size configs (checked on the meta device, no memory) and the
command's rows, table and usage errors (timed on a tiny stand-in architecture)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from vrag_compress.cli import app
from vrag_compress_bench import encode_archs
from vrag_compress_bench.encode import ROW_KEYS

# Published parameter counts (without the LM head the retrieval models drop), in millions.
PUBLISHED_M = {
    "colqwen2": 2209,  # Qwen2-VL-2B: 2.21 B
    "colpali": 2923,  # PaliGemma-3B: 2.92 B
    "colsmol-256m": 256 - 28,  # SmolVLM-256M minus its 49280x576 untied LM head
    "colsmol-500m": 507 - 47,  # SmolVLM-500M minus its 49280x960 LM head
    "colmodernvbert": 250,
}


@pytest.mark.parametrize("name", sorted(encode_archs.ARCHS))
def test_real_architectures_have_the_published_size(name: str) -> None:
    with torch.device("meta"):
        model, processor = encode_archs.ARCHS[name].build(torch.float32, None)
    params_m = sum(p.numel() for p in model.parameters()) / 1e6
    assert abs(params_m - PUBLISHED_M[name]) / PUBLISHED_M[name] < 0.03, params_m
    image_token = model.config.image_token_id
    assert image_token == processor.tokenizer.convert_tokens_to_ids(processor.image_token)


def _tiny_stand_in(dtype, max_visual_tokens):
    from colpali_engine.models import ColQwen2, ColQwen2Processor

    from vrag_compress.encoders.tiny import tiny_model_path

    folder = tiny_model_path("tiny-colqwen2")
    return (
        ColQwen2.from_pretrained(folder, dtype=dtype).eval(),
        ColQwen2Processor.from_pretrained(folder),
    )


def test_bench_encode_rows_and_table(tmp_path, monkeypatch) -> None:
    arch = encode_archs.RealArch("colqwen2", "vidore/colqwen2-v1.0", "tiny", _tiny_stand_in)
    monkeypatch.setitem(encode_archs.ARCHS, "colqwen2", arch)
    out = tmp_path / "rows.json"
    args = ["bench", "encode", "--arch", "colqwen2", "--random-weights", "--capture"]
    result = CliRunner().invoke(app, [*args, "--batch", "1", "--batch", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "pages_per_s" in result.output and "colqwen2" in result.output
    rows = json.loads(out.read_text())
    assert [row["batch"] for row in rows] == [1, 2]
    for row in rows:
        assert tuple(row) == ROW_KEYS
        assert (row["model"], row["dtype"], row["capture"]) == ("colqwen2", "fp32", True)
        assert isinstance(row["params_m"], float) and row["params_m"] > 0
        assert row["pages_per_s"] > 0 and row["peak_mb"] > 0
        assert isinstance(row["visual_tokens"], int) and row["visual_tokens"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arch", "colfoo", "--random-weights"], "unknown arch"),
        (["--arch", "colqwen2"], "--random-weights"),
        (["--arch", "colqwen2", "--random-weights", "--dtype", "fp16"], "fp32 or bf16"),
    ],
)
def test_bench_encode_bad_usage_exits_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["bench", "encode", *args])
    assert result.exit_code == 2
    assert message in result.output
