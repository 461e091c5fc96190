"""Compressors describe themselves; `compressor_for` builds one for a given model."""

from __future__ import annotations

import ast
import inspect
import json
import warnings

import numpy as np
import pytest

import vrag_compress.compress.variants as variants
from vrag_compress.compress import (
    CompressionError,
    UncalibratedWindowWarning,
    capabilities,
    compressor_for,
    get_compressor,
    list_compressors,
)
from vrag_compress.encoders.base import PageEncoding


class ModelStub:
    """Just what the factory reads from an encoder."""

    def __init__(self, model_id: str, n_layers: int) -> None:
        self.model_id, self.n_layers, self.dim = model_id, n_layers, 8


COLQWEN2 = ModelStub("vidore/colqwen2-v1.0", 28)
PAPER_WINDOW = list(range(18, 24))


def test_every_method_declares_what_it_needs():
    table = {
        name: (caps.kind, caps.stats, caps.uses_window, caps.needs_fit)
        for name in list_compressors()
        for caps in [capabilities(name)]
    }
    assert table["identity"] == ("none", None, False, False)
    assert table["sap"] == ("pruning", "centrality", True, False)
    assert table["sap-sink"] == ("pruning", "centrality", True, False)
    assert table["uot"] == ("merging", None, False, False)
    assert table["uot-sap"] == ("merging", "centrality", True, False)
    assert table["uot-anchor"] == ("merging", "centrality", True, False)
    assert table["eos"] == ("pruning", "eos_attention", False, False)
    assert table["adaptive-eos"] == ("pruning", "eos_attention", False, True)
    assert not capabilities("identity").takes_ratio
    # the declared statistic is the one the index captures for the method
    for name in ("sap", "eos", "uot-sap", "random"):
        params = {"kappa": 1.0} if name == "adaptive-eos" else {}
        assert get_compressor(name, **params).requires_stats == (
            capabilities(name).stats is not None
        )


@pytest.mark.parametrize("name", ["sap", "sap-sink", "uot-sap", "uot-anchor"])
def test_window_methods_get_the_models_builtin_window(name):
    compressor = compressor_for(name, encoder=COLQWEN2, ratio=0.2)
    assert list(compressor.params["layers"]) == PAPER_WINDOW
    assert compressor.params["ratio"] == 0.2
    if "n_layers" in compressor.params:
        assert compressor.params["n_layers"] == 28


def test_an_explicit_compressor_without_a_window_gets_the_models_window():
    given = get_compressor("sap", ratio=0.1)
    built = compressor_for(given, encoder=COLQWEN2, ratio=0.5)
    assert built.params == {"ratio": 0.1, "layers": PAPER_WINDOW, "n_layers": 28}
    explicit = get_compressor("sap", ratio=0.1, layers=[3, 4])
    assert compressor_for(explicit, encoder=COLQWEN2) is explicit


def test_an_unknown_model_gets_the_fallback_window_with_a_warning():
    with pytest.warns(UncalibratedWindowWarning, match=r"my/model \(6 layers\).*\[2, 3\]"):
        built = compressor_for(get_compressor("sap"), encoder=ModelStub("my/model", 6))
    assert built.params["layers"] == [2, 3] and built.params["n_layers"] == 6
    # same depth as a built-in family but another layer count: the paper window does not apply
    with pytest.warns(UncalibratedWindowWarning):
        built = compressor_for("sap", encoder=ModelStub("tiny-colqwen2", 2))
    assert built.params["layers"] == [0]


def test_window_and_profile_are_checked_against_the_model(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit window or profile never warns
        assert compressor_for("sap", encoder=COLQWEN2, window=[5, 6]).params["layers"] == [5, 6]
        built = compressor_for("sap", encoder=ModelStub("x", 18), profile="colpali")
    assert built.params["layers"] == [11, 12, 13, 14]
    with pytest.raises(CompressionError, match="18 decoder layers but the model has 28"):
        compressor_for("sap", encoder=COLQWEN2, profile="colpali")
    with pytest.raises(CompressionError, match="28 decoder layers but the model has 6"):
        compressor_for(get_compressor("sap", profile="colqwen2"), encoder=ModelStub("m", 6))
    # methods without a window ignore the model's window
    assert compressor_for("random", encoder=COLQWEN2, window=[1]).params == {
        "ratio": 0.1,
        "seed": 0,
    }


def test_ratio_goes_only_to_methods_that_take_one():
    assert compressor_for("identity", encoder=COLQWEN2, ratio=0.3).params == {}
    assert compressor_for("random", ratio=0.3).params["ratio"] == 0.3
    assert compressor_for("random", ratio=0.3, merge_factor=4).params["ratio"] == 0.25


def test_a_method_with_a_fitting_step_is_fitted_or_refused():
    with pytest.raises(CompressionError, match=r"adaptive-eos must be fitted.*kappa="):
        compressor_for("adaptive-eos", ratio=0.2)
    rng = np.random.default_rng(0)
    pages = [
        PageEncoding(
            vectors=rng.standard_normal((40, 4)).astype(np.float32),
            eos_attention=rng.dirichlet(np.ones(40), 3).astype(np.float32),
        )
        for _ in range(4)
    ]
    fitted = compressor_for("adaptive-eos", ratio=0.2, fit_pages=pages)
    assert fitted.params["kappa"] is not None
    native = compressor_for("adaptive-eos", ratio=0.2, kappa=1.5, fit_pages=pages)
    assert native.params["kappa"] == 1.5  # already fixed by its parameter: not refitted


def test_variants_do_not_import_the_package_that_imports_them():
    tree = ast.parse(inspect.getsource(variants))
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "vrag_compress.compress" not in imported
    assert "vrag_compress.compress.registry" not in imported
    assert {"sap-sink", "uot-anchor", "uot-sap"} <= set(list_compressors())


def test_vrag_methods_shows_what_each_method_needs():
    from typer.testing import CliRunner

    from vrag_compress.cli import app

    result = CliRunner().invoke(app, ["methods", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["sap"]["needs"]["uses_window"] and rows["sap"]["needs"]["stats"] == "centrality"
    assert rows["adaptive-eos"]["needs"]["needs_fit"]
    assert rows["adaptive-eos"]["needs"]["fit_params"] == ["kappa"]
    assert not rows["identity"]["needs"]["takes_ratio"]
