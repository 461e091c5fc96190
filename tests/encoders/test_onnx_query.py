"""`vrag export-onnx`: MiniLM queries through ONNX Runtime, no torch, equal to the torch path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from vrag_compress import VisualIndex

QUERIES = ["background checks by state", "x", "how many permits were issued in november 2015"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> dict[str, Path]:
    """A MiniLM index of one real PDF (a page of little text: MiniLM encodes every chunk of a
    page's text), and the MiniLM query export in a private model cache
    (both commands run in this process: the tests below start the processes they check)."""
    from typer.testing import CliRunner

    from vrag_compress.cli import app

    root = tmp_path_factory.mktemp("onnx")
    pdf = shared_data / "pdfs" / "gov" / "scotus-transcript-p1.pdf"
    index = root / "ix"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VRAG_CACHE_DIR", str(root / "cache"))
        for args in (["index", pdf, "--index", index, "--model", "minilm"], ["export-onnx", index]):
            result = CliRunner().invoke(app, list(map(str, args)))
            assert result.exit_code == 0, result.output
    return {"index": index, "cache": root / "cache"}


def test_onnx_query_vectors_equal_the_torch_encoder(
    exported: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vrag_compress.encoders import load_encoder
    from vrag_compress.encoders.onnx_query import load_onnx_query_encoder

    monkeypatch.setenv("VRAG_CACHE_DIR", str(exported["cache"]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # onnxruntime would take a thread per core
    onnx = load_onnx_query_encoder("minilm")
    assert onnx is not None
    assert onnx.session.get_session_options().intra_op_num_threads == 1
    torch_vectors = load_encoder("minilm", device="cpu").encode_queries(QUERIES)
    for got, want in zip(onnx.encode_queries(QUERIES), torch_vectors, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4)
    with pytest.raises(ValueError, match="empty"):
        onnx.encode_queries(["  "])


def test_search_uses_the_export_and_ranks_as_torch_does(
    exported: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vrag_compress.encoders.onnx_query import OnnxTextQueryEncoder

    monkeypatch.setenv("VRAG_CACHE_DIR", str(exported["cache"]))
    with VisualIndex.open(exported["index"], readonly=True) as index:
        hits = index.search(QUERIES[0], k=5)
        assert isinstance(index.query_encoder, OnnxTextQueryEncoder)
        labels = [t.label for t in sorted(hits[0].explain().tokens, key=lambda t: t.token)]
        assert labels[:2] == ["[CLS]", "background"]
    with VisualIndex.open(exported["index"], readonly=True, device="cpu") as index:
        index.encoder  # noqa: B018  (loading the torch encoder makes queries use it)
        reference = index.search(QUERIES[0], k=5)
    assert [h.page_id for h in hits] == [h.page_id for h in reference]
    assert [h.score for h in hits] == pytest.approx([h.score for h in reference], abs=1e-3)


def test_a_cli_search_with_an_export_never_imports_torch(exported: dict[str, Path]) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VRAG_CACHE_DIR": str(exported["cache"])}
    argv = ["vrag", "search", str(exported["index"]), "background checks", "--json"]
    probe = (
        "import runpy, sys\n"
        f"sys.argv = {argv!r}\n"
        "try:\n    runpy.run_module('vrag_compress', run_name='__main__')\n"
        "except SystemExit as stop:\n    assert not stop.code, stop.code\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers') if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + probe],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_a_model_that_cannot_be_exported_is_refused_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, private_cache: Callable[[Path], Path]
) -> None:
    """Run in this process: the exit must be the command's own (an exception escaping it would
    be a traceback in a real `vrag` process)."""
    from typer.testing import CliRunner

    from vrag_compress.cli import app

    monkeypatch.setenv("VRAG_CACHE_DIR", str(private_cache(tmp_path)))
    done = CliRunner().invoke(app, ["export-onnx", "tiny-colgemma3", "--json"])
    assert done.exit_code == 1 and done.stdout == ""
    assert type(done.exception) is SystemExit  # typer.Exit from the command, nothing escaped
    assert "error:" in done.stderr and "Traceback" not in done.stderr
    assert "query template could not be reproduced" in " ".join(done.stderr.split())
    assert not list((tmp_path / "onnx").glob("tiny-colgemma3*"))


def test_bench_onnx_reports_both_backends(
    exported: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench runs in this process; the fresh processes it times per backend are real."""
    from typer.testing import CliRunner

    from vrag_compress.cli import app

    monkeypatch.setenv("VRAG_CACHE_DIR", str(exported["cache"]))
    report = tmp_path / "onnx.json"
    args = ["bench", "onnx", "--index", exported["index"], "--queries", "2", "--starts", "1"]
    done = CliRunner().invoke(app, [*map(str, args), "--json", str(report)])
    assert done.exit_code == 0, done.output
    result = json.loads(report.read_text())
    for backend in ("onnx", "torch"):
        assert result[backend]["first_query_s"] > 0
        assert result[backend]["encode_p50_ms"] > 0
    assert result["overlap@10"] == 1.0
    assert result["max_score_diff"] < 1e-3
