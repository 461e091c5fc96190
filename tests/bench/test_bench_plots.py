"""The benchmark plots write readable PNGs (into folders they make) from their result rows."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from vrag_compress_bench.eval.hybrid import plot_hybrid
from vrag_compress_bench.eval.plot import plot_estimate, plot_retention, plot_sr_curve


def _png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


def test_every_plot_writes_a_png(tmp_path: Path) -> None:
    retention = {
        "dataset": "d",
        "encoder": "e",
        "n_queries": 3,
        "window": [1, 2],
        "results": [
            {"method": m, "ratio": r, "retention@10": v}
            for m, r, v in [("sap", 0.1, 0.9), ("sap", 0.25, 0.95), ("uot", 0.1, 0.97)]
        ],
    }
    estimate = [
        {"method": "sap", "ratio": 0.1, "estimated": 0.9, "measured": 0.92},
        {"method": "uot", "ratio": 0.05, "estimated": 0.95, "measured": 0.93},
        {"method": "uot", "ratio": 0.1, "estimated": 0.96, "measured": 0.99}
        | {"low": 0.94, "high": 0.97, "measured_low": 0.95, "measured_high": 1.02},
    ]
    fusions = [{"alpha": None, "ndcg@10": 0.4}, {"alpha": 0.3, "ndcg@10": 0.42}]
    hybrid = {
        "dataset": "d",
        "encoder": "e",
        "hybrid": {
            "bm25": {"ndcg@10": 0.3},
            "rows": [{"visual": "sap", "fusions": fusions, "visual_metrics": {"ndcg@10": 0.35}}],
        },
    }
    written = [
        plot_retention(retention, tmp_path / "a" / "retention.png"),
        plot_sr_curve([0.5, 0.7, 0.6], [1], tmp_path / "b" / "sr.png", "SR"),
        plot_estimate(estimate, tmp_path / "c" / "estimate.png", "estimate"),
        plot_hybrid(hybrid, tmp_path / "d" / "hybrid.png"),
    ]
    for path in written:
        width, height = _png_size(path)
        assert width > 300 and height > 200
