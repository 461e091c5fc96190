"""`vrag index --dtype/--speedup`: the Col* encoder speed options are recorded and used on open."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from vrag_compress.cli import app
from vrag_compress.index import IndexConfig, VisualIndex
from vrag_compress.index_config import IndexConfigError

runner = CliRunner()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pages")
    rng = np.random.default_rng(3)
    for n in range(3):
        pixels = rng.integers(0, 256, size=(120, 90, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"page{n}.png")
    return folder


def _index(*args: object) -> tuple[int, str]:
    result = runner.invoke(app, ["index", *(str(a) for a in args)])
    return result.exit_code, result.output


def test_cli_bf16_is_recorded_and_reused_when_the_index_is_opened(pages: Path, tmp_path: Path):
    path = tmp_path / "idx"
    args = (pages, "--index", path, "--model", "tiny-colqwen2", "--device", "cpu")
    code, output = _index(*args, "--dtype", "bf16", "--json")
    assert code == 0, output
    with VisualIndex.open(path, device="cpu") as index:
        assert index.config.encoder_options == {"dtype": "bfloat16"}
        assert index.config.encoder["dtype"] == "bfloat16"
        assert index.encoder.model.dtype == torch.bfloat16  # reloaded with the recorded dtype
        assert len(index.search("a page", k=3)) == 3
    code, output = _index(*args, "--dtype", "fp32")  # an existing index keeps its options
    assert code == 0 and "--dtype ignored" in output, output


def test_int8_speedup_is_recorded_and_quantises_the_reopened_encoder(pages: Path, tmp_path: Path):
    path = tmp_path / "idx"
    with VisualIndex.create(path, model="tiny-colqwen2", device="cpu", speedup="int8") as index:
        index.add([pages], progress=False)
        assert index.config.encoder_options == {"speedup": "int8"}
        assert index.config.encoder["speedup"] == "int8"
        before = [(hit.page_id, round(hit.score, 4)) for hit in index.search("a page", k=3)]
    with VisualIndex.open(path, device="cpu") as index:
        assert index.encoder.speedup == "int8"
        linear_types = {type(m).__module__ for m in index.encoder.model.modules()}
        assert any("quantized" in name for name in linear_types)
        after = [(hit.page_id, round(hit.score, 4)) for hit in index.search("a page", k=3)]
    assert after == before  # queries are encoded the same way as when the pages were indexed


@pytest.mark.parametrize(
    ("options", "where"),
    [
        (("--dtype", "fp16"), "--dtype"),
        (("--speedup", "fp8"), "--speedup"),
        (("--dtype", "bf16", "--speedup", "int8"), "--speedup"),
    ],
)
def test_bad_encoder_options_are_usage_errors_before_anything_is_created(
    pages: Path, tmp_path: Path, options: tuple[str, ...], where: str
):
    path = tmp_path / "idx"
    code, output = _index(pages, "--index", path, "--model", "tiny-colqwen2", *options)
    assert code == 2 and where in output and "Traceback" not in output, output
    assert not path.exists()


def test_text_encoder_refuses_col_options(pages: Path, tmp_path: Path):
    code, output = _index(
        pages, "--index", tmp_path / "idx", "--model", "minilm", "--dtype", "bf16"
    )
    assert code == 2 and "apply to Col* models" in output, output
    with pytest.raises(Exception, match="apply to Col"):
        VisualIndex.create(tmp_path / "py", model="minilm", speedup="int8")
    assert not (tmp_path / "py").exists()


def test_config_round_trip_and_crafted_options():
    config = IndexConfig(
        model_id="m", dim=4, compressor="sap", encoder_options={"dtype": "bfloat16"}
    )
    data = config.to_dict()
    assert data["encoder_options"] == {"dtype": "bfloat16"}
    assert IndexConfig.from_dict(data) == config
    assert "encoder_options" not in IndexConfig(model_id="m", dim=4, compressor="sap").to_dict()
    for bad in ({"dtype": "float8"}, {"speedup": "int4"}, {"threads": 4}, ["dtype"]):
        with pytest.raises(IndexConfigError, match="encoder_options"):
            IndexConfig.from_dict({**data, "encoder_options": bad})


def test_the_cpu_only_int8_option_is_left_out_on_a_gpu(monkeypatch: pytest.MonkeyPatch):
    from vrag_compress.encoders import colpali
    from vrag_compress.index_config import reopen_options

    recorded = {"dtype": "float32", "speedup": "int8"}
    assert reopen_options(recorded, "cpu") == recorded
    monkeypatch.setattr(colpali, "pick_device", lambda device: "cuda")
    assert reopen_options(recorded, "auto") == {"dtype": "float32"}
