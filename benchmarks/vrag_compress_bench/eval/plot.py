"""Plots for the retention benchmark: retention vs keep ratio, and the per-layer SR curve."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def new_figure(size: tuple[float, float]) -> tuple[Any, Any]:
    """A figure and its axes on matplotlib's file-only backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=size)


def save_figure(fig: Any, out_png: str | Path) -> Path:
    """Lay the figure out, write it as a PNG (making its folder) and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_retention(result: dict[str, Any], out_png: str | Path) -> Path:
    """retention@10 against the keep ratio (log axis), one line per method; writes a PNG."""
    by_method: dict[str, list[tuple[float, float]]] = {}
    for row in result["results"]:
        by_method.setdefault(row["method"], []).append((row["ratio"], row["retention@10"]))
    fig, ax = new_figure((7, 4.5))
    for method, points in by_method.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=method)
    ax.set_xscale("log")
    ratios = sorted({row["ratio"] for row in result["results"]})
    ax.set_xticks(ratios, [f"{r:g}" for r in ratios])
    ax.minorticks_off()
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("keep ratio γ (tokens kept / tokens)")
    ax.set_ylabel("retention@10 (NDCG@10 / uncompressed)")
    ax.set_title(
        f"{result['dataset']} · {result['encoder']} · {result['n_queries']} queries · "
        f"window {result['window']}"
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    return save_figure(fig, out_png)


def plot_sr_curve(curve: list[float], window: list[int], out_png: str | Path, title: str) -> Path:
    """The per-layer SR curve of single-layer SAP with the selected window shaded."""
    fig, ax = new_figure((6, 3.5))
    ax.plot(range(len(curve)), curve, marker="o")
    if window:
        ax.axvspan(min(window) - 0.4, max(window) + 0.4, alpha=0.2, label=f"window {window}")
    ax.set_xlabel("layer (0-based)")
    ax.set_ylabel("SR of single-layer SAP")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return save_figure(fig, out_png)


def plot_estimate(rows: list[dict[str, Any]], out_png: str | Path, title: str) -> Path:
    """Estimated against judged retention@10, one marker per (method, ratio), with the ±0.03
    band around the diagonal and, where the rows carry them, both 90% intervals as error bars
    (judged: horizontal, estimate: vertical)."""
    fig, ax = new_figure((5.5, 5))
    values = [r["estimated"] for r in rows] + [r["measured"] for r in rows]
    low, high = min(values) - 0.03, max(values) + 0.03
    ax.plot([low, high], [low, high], color="grey", linewidth=0.8)
    ax.fill_between([low, high], [low - 0.03, high - 0.03], [low + 0.03, high + 0.03], alpha=0.15)
    markers = dict(zip(sorted({r["ratio"] for r in rows}), "osD^v", strict=False))
    for method in dict.fromkeys(r["method"] for r in rows):
        at = [r for r in rows if r["method"] == method]
        line = ax.scatter([r["measured"] for r in at], [r["estimated"] for r in at], label=method)
        for r in at:
            colour = line.get_facecolor()[0]
            ax.scatter(r["measured"], r["estimated"], marker=markers[r["ratio"]], color=colour)
            if "measured_low" in r and "low" in r:
                x, y = r["measured"], r["estimated"]
                ax.errorbar(
                    x,
                    y,
                    xerr=[[x - r["measured_low"]], [r["measured_high"] - x]],
                    yerr=[[y - r["low"]], [r["high"] - y]],
                    color=colour,
                    alpha=0.35,
                    linewidth=0.8,
                )
            ax.annotate(
                f"{r['ratio']:g}",
                (r["measured"], r["estimated"]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_xlabel("judged retention@10")
    ax.set_ylabel("estimated (label-free)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, out_png)


def plot_budgets(rows: list[dict[str, Any]], out_png: str | Path, title: str) -> Path:
    """retention@10 against γ: each method's fixed budget solid, ``:budget=adaptive`` dashed
    (other labelled variants dotted), one colour per method."""
    fig, ax = new_figure((8, 5))
    import matplotlib.pyplot as plt

    bases = list(dict.fromkeys(r["method"].split(":")[0] for r in rows))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, base in enumerate(bases):
        colour = colours[i % len(colours)]
        for label in dict.fromkeys(r["method"] for r in rows if r["method"].split(":")[0] == base):
            points = sorted((r["ratio"], r["retention@10"]) for r in rows if r["method"] == label)
            style = "-" if label == base else "--" if label.endswith("budget=adaptive") else ":"
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            ax.plot(xs, ys, style, marker="o", color=colour, label=label)
    ratios = sorted({r["ratio"] for r in rows})
    ax.set_xscale("log")
    ax.set_xticks(ratios, [f"{r:g}" for r in ratios])
    ax.minorticks_off()
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("keep ratio γ")
    ax.set_ylabel("retention@10")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, out_png)
