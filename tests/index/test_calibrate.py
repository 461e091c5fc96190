"""Calibration: Score Retention, per-layer SR curves, the SPEC §6 window rule, profiles, the plot,
pair loading and the `vrag calibrate` command end to end with a tiny ColQwen2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from vrag_compress.calibrate import (
    CalibrationError,
    CalibrationProfile,
    ProfileError,
    build_profile,
    builtin_profile,
    load_calibration_pairs,
    maxsim,
    plot_sr_curve,
    score_retention,
    select_window,
    sr_curve,
)
from vrag_compress.compress import get_compressor
from vrag_compress.encoders.base import PageEncoding


def make_pairs(seed=0, pairs=6, n=60, d=16, n_layers=8):
    rng = np.random.default_rng(seed)
    pages, queries = [], []
    for _ in range(pairs):
        x = rng.standard_normal((n, d)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        pages.append(PageEncoding(x, centrality=rng.random((n_layers, n)).astype(np.float32)))
        queries.append(rng.standard_normal((5, d)).astype(np.float32))
    return pages, queries


def test_maxsim_is_the_reference_function():
    import vrag_compress.scoring as reference

    assert maxsim is reference.maxsim


def test_score_retention_definition():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((3, 4)).astype(np.float32)
    x = rng.standard_normal((10, 4)).astype(np.float32)
    assert score_retention(q, x, x[:4]) == pytest.approx(maxsim(q, x[:4]) / maxsim(q, x))
    assert score_retention(np.zeros((2, 4), np.float32), x, x[:1]) == 1.0
    # a merged representative closer to the query than any token: SR > 1, never clipped
    q1 = np.array([[1.0, 1.0]], np.float32) / np.sqrt(2)
    full = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    assert score_retention(q1, full, q1) > 1.0


def test_sr_curve_equals_single_layer_sap_averaged_over_pairs():
    pages, queries = make_pairs()
    curve = sr_curve(pages, queries, ratio=0.1)
    assert curve.shape == (8,)
    for layer in range(8):
        sap = get_compressor("sap", ratio=0.1, layers=[layer])
        expected = np.mean(
            [
                score_retention(q, p.vectors, c.vectors)
                for p, q, c in zip(pages, queries, sap.compress_many(pages), strict=True)
            ]
        )
        assert curve[layer] == pytest.approx(expected, rel=1e-6)


def test_sr_curve_input_errors():
    pages, queries = make_pairs(pairs=2)
    with pytest.raises(CalibrationError, match="one query per page"):
        sr_curve(pages, queries[:1])
    with pytest.raises(CalibrationError, match="no calibration pairs"):
        sr_curve([], [])
    with pytest.raises(CalibrationError, match="with_stats=True"):
        sr_curve([PageEncoding(pages[0].vectors)], queries[:1])
    other, _ = make_pairs(n_layers=5, pairs=1)
    with pytest.raises(CalibrationError, match="one model at a time"):
        sr_curve([pages[0], other[0]], queries)
    with pytest.raises(CalibrationError, match=r"query must be \[M, 16\]"):
        sr_curve(pages[:1], [np.ones((3, 8), np.float32)])


def paper_curve(n_layers: int, l_star: int) -> np.ndarray:
    """Rising SR through the middle layers, then a trailing drop from l_star on."""
    rising = np.linspace(0.55, 0.95, l_star)
    drop = np.linspace(0.62, 0.58, n_layers - l_star)
    return np.concatenate([rising, drop])


@pytest.mark.parametrize(
    "n_layers, l_star, window",
    [(18, 15, range(11, 15)), (28, 24, range(18, 24)), (36, 34, range(26, 34))],
)
def test_select_window_reproduces_paper_windows(n_layers, l_star, window):
    start, end = select_window(paper_curve(n_layers, l_star), rho=0.2)
    assert list(range(start, end)) == list(window)
    profile = builtin_profile({18: "colpali", 28: "colqwen2", 36: "jina-v4"}[n_layers])
    assert profile.window == tuple(window) and profile.n_layers == n_layers


def test_select_window_without_trailing_drop_takes_last_layers():
    assert select_window(np.linspace(0.5, 0.9, 10), rho=0.2) == (8, 10)
    assert select_window([0.7] * 6, rho=0.5) == (3, 6)  # equal to the median is not a drop
    assert select_window([0.4], rho=1.0) == (0, 1)


def test_select_window_median_and_clipping():
    assert select_window([1, 2, 3, 4], rho=0.25) == (3, 4)
    assert select_window([4, 3, 2, 1], rho=0.25) == (1, 2)  # median 2.5: trailing run is 2, 1
    assert select_window([4, 3, 2, 1], rho=1.0) == (0, 2)  # clipped at layer 0


@pytest.mark.parametrize("curve, rho", [([], 0.2), ([[1.0, 2.0]], 0.2), ([0.5, np.nan], 0.2)])
def test_select_window_rejects_bad_curves(curve, rho):
    with pytest.raises(CalibrationError):
        select_window(curve, rho)


@pytest.mark.parametrize("rho", [0.0, -0.1, 1.01, float("nan")])
def test_select_window_rejects_rho_outside_unit_interval(rho):
    with pytest.raises(CalibrationError, match="rho"):
        select_window([0.5, 0.6], rho)


def test_build_profile_save_load_and_use_in_sap(tmp_path):
    pages, queries = make_pairs()
    profile = build_profile(pages, queries, "my/model", ratio=0.1, rho=0.25)
    assert profile.n_layers == 8 and profile.n_pairs == 6 and len(profile.sr_curve) == 8
    assert profile.window == tuple(range(*select_window(profile.sr_curve, 0.25)))
    path = profile.save(tmp_path / "profile.json")
    data = json.loads(path.read_text())
    assert {"model_id", "n_layers", "window", "sr_curve", "gamma", "rho", "n_pairs"} <= set(data)
    assert CalibrationProfile.load(path) == profile
    sap = get_compressor("sap", ratio=0.1, profile=path)
    assert sap.layers == profile.window and sap.n_layers == 8
    assert len(sap.compress(pages[0]).kept) == 6


def test_profile_errors(tmp_path):
    with pytest.raises(ProfileError, match="not found"):
        CalibrationProfile.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ProfileError, match="not valid JSON"):
        CalibrationProfile.load(bad)
    with pytest.raises(ProfileError, match="missing"):
        CalibrationProfile.from_dict({"model_id": "m"})
    with pytest.raises(ProfileError, match="sr_curve has 2 values"):
        CalibrationProfile("m", 3, (1,), sr_curve=(0.1, 0.2))


def test_builtin_profile_lookup_by_model_id():
    assert builtin_profile("vidore/colpali-v1.3").window == (11, 12, 13, 14)
    assert builtin_profile("vidore/colpali-v1.2-merged").n_layers == 18
    assert builtin_profile("vidore/colqwen2-v1.0").window == tuple(range(18, 24))
    assert builtin_profile("jinaai/jina-embeddings-v4").window == tuple(range(26, 34))
    assert builtin_profile("vidore/colqwen2.5-v0.2") is None
    assert builtin_profile("tiny-colsmol") is None
    for name in NEW_FAMILIES:  # no paper window: the fallback applies until calibrated
        assert builtin_profile(name) is None, name


def test_plot_sr_curve_writes_a_png(tmp_path):
    pages, queries = make_pairs()
    profile = build_profile(pages, queries, "my/model")
    out = plot_sr_curve(profile, tmp_path / "plots" / "sr.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(CalibrationError, match="no SR curve"):
        plot_sr_curve(builtin_profile("colpali"), tmp_path / "x.png")


def test_pairs_from_beir_folder(shared_data):
    pairs = load_calibration_pairs(shared_data / "vidore_arxivqa_sample")
    assert [p.image.name for p in pairs] == ["0.png", "1.png"]
    assert pairs[0].query.startswith("Based on the graph")
    assert len(load_calibration_pairs(shared_data / "vidore_arxivqa_sample", limit=1)) == 1


def test_pairs_from_jsonl_and_errors(tmp_path, shared_data):
    image = shared_data / "vidore_arxivqa_sample" / "images" / "3.png"
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"image": str(image), "query": "what is shown?"}) + "\n\n")
    assert load_calibration_pairs(path)[0].image == image
    path.write_text(json.dumps({"image": "nope.png", "query": "q"}) + "\n")
    with pytest.raises(CalibrationError, match="image not found"):
        load_calibration_pairs(path)
    path.write_text('{"image": 3}\n')
    with pytest.raises(CalibrationError, match="needs string fields"):
        load_calibration_pairs(path)
    path.write_text("not json\n")
    with pytest.raises(CalibrationError, match=r"pairs.jsonl:1: not valid JSON"):
        load_calibration_pairs(path)
    (tmp_path / "folder").mkdir()
    with pytest.raises(CalibrationError, match="qrels.tsv|corpus.jsonl"):
        load_calibration_pairs(tmp_path / "folder")
    with pytest.raises(CalibrationError, match="not found"):
        load_calibration_pairs(tmp_path / "missing")


def test_vrag_calibrate_end_to_end(tmp_path, shared_data):
    from vrag_compress.cli import app

    out = tmp_path / "profile.json"
    plot = tmp_path / "sr.png"
    summary = tmp_path / "summary.json"
    result = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(shared_data / "vidore_arxivqa_sample"),
            "--model",
            "tiny-colqwen2",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--plot",
            str(plot),
            "--json",
            str(summary),
        ],
    )
    assert result.exit_code == 0, result.output
    profile = CalibrationProfile.load(out)
    assert profile.model_id == "tiny-colqwen2" and profile.n_pairs == 2
    assert len(profile.sr_curve) == profile.n_layers >= 1
    assert profile.window == tuple(range(*select_window(profile.sr_curve, 0.2)))
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert json.loads(summary.read_text())["window"] == list(profile.window)
    sap = get_compressor("sap", profile=out)
    assert sap.n_layers == profile.n_layers


NEW_FAMILIES = [
    "tiny-colqwen2_5",
    "tiny-colsmol",
    "tiny-colqwen3",
    "tiny-colqwen3_5",
    "tiny-colgemma3",
    "tiny-colmodernvbert",
]


@pytest.mark.parametrize("model", NEW_FAMILIES)
@pytest.mark.slow
def test_new_families_sap_fallback_then_calibrated_window(tmp_path, shared_data, model):
    """Before calibration SAP warns and uses the fallback window; `vrag calibrate` then
    writes a profile whose window SAP uses silently on the same model's pages."""
    import warnings

    from vrag_compress.cli import app
    from vrag_compress.compress.base import budget
    from vrag_compress.compress.profiles import fallback_window
    from vrag_compress.encoders import load_encoder

    encoder = load_encoder(model, device="cpu")
    image = shared_data / "vidore_arxivqa_sample" / "images" / "0.png"
    from PIL import Image

    with Image.open(image) as img:
        page = encoder.encode_pages([img.convert("RGB")], with_stats=True)[0]
    with pytest.warns(UserWarning, match="uncalibrated fallback"):
        compressed = get_compressor("sap", ratio=0.5).compress(page)
    assert compressed.vectors.shape[0] == budget(page.n_tokens, 0.5)
    assert fallback_window(encoder.n_layers)[-1] < encoder.n_layers

    out = tmp_path / "profile.json"
    args = ["calibrate", str(shared_data / "vidore_arxivqa_sample"), "--model", model]
    result = CliRunner().invoke(app, [*args, "--device", "cpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    profile = CalibrationProfile.load(out)
    assert profile.model_id == model and profile.n_layers == encoder.n_layers
    assert len(profile.sr_curve) == profile.n_layers and profile.n_pairs == 2
    sap = get_compressor("sap", profile=out, ratio=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sap.compress(page).vectors.shape[0] == compressed.vectors.shape[0]


def test_vrag_calibrate_reports_bad_input(tmp_path):
    from vrag_compress.cli import app

    result = CliRunner().invoke(app, ["calibrate", str(tmp_path / "nope"), "--model", "x"])
    assert result.exit_code == 1
    result = CliRunner().invoke(app, ["calibrate", str(tmp_path), "--model", "x", "--rho", "2"])
    assert result.exit_code == 1
