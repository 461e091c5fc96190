"""Issue 49, findings 2 and 12: a model is pinned by its identity and its weights' fingerprint.

Two models whose names slug alike (``/m/a_b``, ``/m/a/b``), or one relative id in two projects,
keep two ONNX exports; a foreign, stale or damaged export warns and the search answers as torch
does; an index notices (warns) when its model folder is rewritten in place with the same shapes.
The models are tiny random ColSmol checkpoints (seed 0 and seed 1: same files, same sizes,
other bytes) saved as plain folders, so the real loading and export paths run.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vrag_compress import VisualIndex
from vrag_compress.encoders import load_encoder
from vrag_compress.encoders.onnx_query import (
    OnnxColQueryEncoder,
    export_dir,
    export_queries,
    load_onnx_query_encoder,
)

QUERY = "total revenue by region"
TEXTS = [
    "total revenue by region and quarter",
    "operating cost of the northern plant",
    "background checks by state",
    "regional sales in 2013",
    "a table of permits issued",
    "revenue forecast for next year",
    "staff headcount by department",
]
EXPORT_WARNING = r"ONNX query export .* is not used"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A private cache; model folders /…/m/a_b (seed 0) and /…/m/a/b (seed 1), both exported
    (b last, so before the fix b's export sat where a_b's is looked for); an index of a_b."""
    from vrag_compress.encoders.tiny import tiny_model_path

    root = tmp_path_factory.mktemp("fingerprint")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VRAG_CACHE_DIR", str(root / "cache"))
        seeds = [tiny_model_path("tiny-colsmol", seed=seed) for seed in (0, 1)]
        a_b, b = root / "m" / "a_b", root / "m" / "a" / "b"
        shutil.copytree(seeds[0], a_b)
        shutil.copytree(seeds[1], b)
        encoders = {path: load_encoder(str(path), device="cpu") for path in (a_b, b)}
        index = root / "ix"
        with VisualIndex.create(index, model=str(a_b), compressor="identity", device="cpu") as ix:
            ids = [f"doc-{i}" for i in range(len(TEXTS))]
            vectors = encoders[a_b].encode_queries(TEXTS)
            ix.upsert_vectors(vectors, page_ids=ids, doc_ids=ids, texts=TEXTS)
            ix.encoder  # noqa: B018  (a loaded encoder makes the search use torch)
            reference = [(h.page_id, h.score) for h in ix.search(QUERY, k=5)]
        for path in (a_b, b):
            export_queries(encoders[path])
        yield {"root": root, "seeds": seeds, "a_b": a_b, "b": b, "index": index,
               "encoders": encoders, "reference": reference}  # fmt: skip


def _onnx_search(index: Path) -> tuple[Any, list[tuple[str, float]]]:
    with VisualIndex.open(index, readonly=True, device="cpu") as opened:
        hits = opened.search(QUERY, k=5)
        return opened.query_encoder, [(h.page_id, h.score) for h in hits]


def _same_ranking(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert [p for p, _ in got] == [p for p, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-3)


def test_two_models_whose_names_slug_alike_keep_their_own_exports(models: dict[str, Any]) -> None:
    """Finding 2: index with /m/a_b, export it, export /m/a/b: the search still uses a_b's."""
    assert export_dir(str(models["a_b"])) != export_dir(str(models["b"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the right export is used without complaint
        encoder, hits = _onnx_search(models["index"])
    assert isinstance(encoder, OnnxColQueryEncoder)
    _same_ranking(hits, models["reference"])


def test_a_relative_model_id_in_two_projects_keeps_two_exports(
    models: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    projects = [tmp_path / "p0", tmp_path / "p1"]
    for project, seed in zip(projects, models["seeds"], strict=True):
        shutil.copytree(seed, project / "models" / "col")
        monkeypatch.chdir(project)
        export_queries(load_encoder("models/col", device="cpu"))
    monkeypatch.chdir(projects[0])
    exported = load_onnx_query_encoder("models/col")
    assert exported is not None
    want = load_encoder("models/col", device="cpu").encode_queries([QUERY])[0]
    got = exported.encode_queries([QUERY])[0]
    assert got.shape == want.shape and float(np.abs(got - want).max()) < 1e-4


def _truncate(folder: Path) -> None:
    graph = folder / "query.onnx"
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])


def _manifest(change: dict[str, Any], drop: str | None = None) -> Any:
    def edit(folder: Path) -> None:
        manifest = json.loads((folder / "query.json").read_text())
        manifest.pop(drop, None)
        (folder / "query.json").write_text(json.dumps({**manifest, **change}))

    return edit


def _foreign(models: dict[str, Any]) -> Any:
    def swap(folder: Path) -> None:
        shutil.rmtree(folder)
        shutil.copytree(export_dir(str(models["b"])), folder)

    return swap


DAMAGE = {
    "truncated graph": _truncate,
    "empty graph": lambda f: (f / "query.onnx").write_bytes(b""),
    "no graph": lambda f: (f / "query.onnx").unlink(),
    "tokenizer not JSON": lambda f: (f / "tokenizer.json").write_text('{"model": '),
    "tokenizer of another shape": lambda f: (f / "tokenizer.json").write_text('{"model": 3}'),
    "manifest not JSON": lambda f: (f / "query.json").write_text("{"),
    "manifest a list": lambda f: (f / "query.json").write_text("[1, 2]"),
    "manifest without prefix": _manifest({}, drop="prefix"),
    "manifest without constants": _manifest({}, drop="constants"),
    "manifest constants not a dict": _manifest({"constants": 5}),
    "manifest of another width": _manifest({"dim": 64}),
    "manifest of other weights": _manifest({"fingerprint": "w1:0"}),
    "manifest without identity": _manifest({}, drop="identity"),
}


@pytest.mark.parametrize("damage", [*DAMAGE, "another model's export"])
def test_a_foreign_or_damaged_export_warns_and_the_search_answers_as_torch(
    models: dict[str, Any], damage: str
) -> None:
    folder = export_dir(str(models["a_b"]))
    kept = folder.with_name(folder.name + ".kept")
    shutil.copytree(folder, kept)
    try:
        DAMAGE.get(damage, _foreign(models))(folder)
        with pytest.warns(UserWarning, match=EXPORT_WARNING):
            encoder, hits = _onnx_search(models["index"])
        assert not isinstance(encoder, OnnxColQueryEncoder)
        _same_ranking(hits, models["reference"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        kept.rename(folder)


def test_an_index_warns_when_its_model_is_rewritten_in_place(
    models: dict[str, Any], tmp_path: Path
) -> None:
    """Finding 12: same files, same sizes, other weights; a warning, not a failure."""
    from vrag_compress.index_config import ModelChangedWarning

    model = tmp_path / "model"
    shutil.copytree(models["seeds"][0], model)
    index = tmp_path / "ix"
    with VisualIndex.create(index, model=str(model), compressor="identity", device="cpu") as ix:
        ix.upsert_vectors(ix.encoder.encode_queries(TEXTS[:2]), page_ids=["a", "b"],
                          doc_ids=["a", "b"])  # fmt: skip
        assert str(ix.config.model_fingerprint).startswith("w1:")
        export_queries(ix.encoder)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelChangedWarning)
        VisualIndex.open(index, readonly=True).close()
    weights = model / "model.safetensors"
    other = models["seeds"][1] / "model.safetensors"
    assert weights.stat().st_size == other.stat().st_size
    shutil.copyfile(other, weights)
    with pytest.warns(ModelChangedWarning, match="changed since this index was built"):
        opened = VisualIndex.open(index, readonly=True, device="cpu")
    with opened, pytest.warns(UserWarning, match="exported from other weights"):
        assert len(opened.search(QUERY, k=2)) == 2
        assert not isinstance(opened.query_encoder, OnnxColQueryEncoder)


def test_an_index_without_a_recorded_fingerprint_opens_as_before(
    models: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index written before fingerprints (no key in its config) never warns."""
    model = tmp_path / "model"
    shutil.copytree(models["seeds"][0], model)
    index = tmp_path / "ix"
    with monkeypatch.context() as patch:
        patch.setattr("vrag_compress.index.model_fingerprint", lambda _: None)
        VisualIndex.create(index, model=str(model), compressor="identity", device="cpu").close()
    shutil.copyfile(models["seeds"][1] / "model.safetensors", model / "model.safetensors")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with VisualIndex.open(index, readonly=True) as opened:
            assert "model_fingerprint" not in opened.store.config
