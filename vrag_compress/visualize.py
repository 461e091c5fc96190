"""Draw what compression kept: outlined patches (pruning) or coloured regions (merging)."""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image, ImageDraw

GOLDEN_RATIO_CONJUGATE = 0.618033988749895


def _cell_boxes(
    grid: tuple[int, int], size: tuple[int, int]
) -> list[tuple[float, float, float, float]]:
    """Pixel boxes of the patch grid laid over the whole page image, row-major."""
    rows, cols = grid
    width, height = size
    cell_w, cell_h = width / cols, height / rows
    return [
        (c * cell_w, r * cell_h, (c + 1) * cell_w, (r + 1) * cell_h)
        for r in range(rows)
        for c in range(cols)
    ]


def draw_kept(image: Image.Image, grid: tuple[int, int], kept: np.ndarray) -> Image.Image:
    """Dim the dropped patches and outline the kept ones."""
    base = image.convert("RGB")
    boxes = _cell_boxes(grid, base.size)
    shade = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(shade)
    kept_set = {int(i) for i in kept}
    for index, box in enumerate(boxes):
        if index not in kept_set:
            draw.rectangle(box, fill=(255, 255, 255, 140))
    for index in kept_set:
        draw.rectangle(boxes[index], outline=(220, 30, 30, 255), width=2)
    return Image.alpha_composite(base.convert("RGBA"), shade).convert("RGB")


def draw_assignment(
    image: Image.Image, grid: tuple[int, int], assignment: np.ndarray
) -> Image.Image:
    """Colour each patch by the representative it was merged into."""
    from matplotlib import colormaps

    base = image.convert("RGB")
    boxes = _cell_boxes(grid, base.size)
    cmap = colormaps["hsv"]
    overlay = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    for box, rep in zip(boxes, assignment, strict=True):
        # golden-ratio hue steps keep neighbouring representative ids visibly different
        r, g, b, _ = cmap((int(rep) * GOLDEN_RATIO_CONJUGATE) % 1.0)
        draw.rectangle(box, fill=(int(r * 255), int(g * 255), int(b * 255), 110))
    return Image.alpha_composite(base.convert("RGBA"), overlay).convert("RGB")


def draw_layout(image: Image.Image, layout: dict[str, Any]) -> Image.Image:
    """Pick the drawing for a stored layout (kept positions or a merge assignment)."""
    grid = (int(layout["grid"][0]), int(layout["grid"][1]))
    if "kept" in layout:
        return draw_kept(image, grid, layout["kept"])
    if "assignment" in layout:
        return draw_assignment(image, grid, layout["assignment"])
    return image.convert("RGB")


def draw_heatmap(
    image: Image.Image,
    heat: np.ndarray,
    *,
    layout: dict[str, Any] | None = None,
    regions: list[Any] | None = None,
    legend: bool = True,
) -> Image.Image:
    """Colour each patch by its MaxSim contribution (see `vrag_compress.explain`), optionally over
    the kept/merged layout, outline the matched regions, and add a legend strip below."""
    from matplotlib import colormaps

    base = draw_layout(image, layout) if layout else image.convert("RGB")
    peak = float(heat.max()) if heat.size else 0.0
    scaled = heat / peak if peak > 0 else np.zeros_like(heat, dtype=np.float64)
    colours = (colormaps["inferno"](scaled) * 255).astype(np.uint8)
    colours[..., 3] = np.where(scaled > 0, (60 + 150 * scaled).astype(np.uint8), 0)
    overlay = Image.fromarray(colours, "RGBA").resize(base.size, Image.Resampling.NEAREST)
    drawn = Image.alpha_composite(base.convert("RGBA"), overlay).convert("RGB")
    draw = ImageDraw.Draw(drawn)
    for region in regions or []:
        draw.rectangle(region.box(drawn.size), outline=(0, 200, 255), width=3)
    if not legend:
        return drawn
    return _with_legend(drawn, peak, layout_name(layout), bool(regions))


def layout_name(layout: dict[str, Any] | None) -> str | None:
    if not layout:
        return None
    return "kept" if "kept" in layout else "assignment" if "assignment" in layout else None


def _with_legend(image: Image.Image, peak: float, layout: str | None, regions: bool) -> Image.Image:
    """The image with a strip below: the colour scale of the heatmap and what the marks mean."""
    from matplotlib import colormaps

    width = image.width
    strip = Image.new("RGB", (width, 44), (255, 255, 255))
    draw = ImageDraw.Draw(strip)
    bar_w = max(60, width // 3)
    ramp = (colormaps["inferno"](np.linspace(0, 1, bar_w))[:, :3] * 255).astype(np.uint8)
    strip.paste(Image.fromarray(np.repeat(ramp[None], 12, axis=0), "RGB"), (8, 6))
    draw.text((8, 22), f"MaxSim contribution 0 .. {peak:.3f}", fill=(0, 0, 0))
    notes = []
    if regions:
        notes.append("blue box: matched region")
    if layout == "kept":
        notes.append("red outline: kept patch, pale: dropped")
    elif layout == "assignment":
        notes.append("tint: merged group")
    draw.text((bar_w + 20, 6), "; ".join(notes), fill=(0, 0, 0))
    out = Image.new("RGB", (width, image.height + strip.height), (255, 255, 255))
    out.paste(image, (0, 0))
    out.paste(strip, (0, image.height))
    return out


def layout_legend_text(layout: dict[str, Any]) -> str:
    """What the marks of `draw_layout` mean, with the page's own counts."""
    grid = layout["grid"]
    n = int(grid[0]) * int(grid[1])
    if "kept" in layout:
        return f"red outline: kept patch ({len(layout['kept'])} of {n}); pale: dropped"
    if "assignment" in layout:
        groups = len(np.unique(layout["assignment"]))
        return f"each colour: one merged vector ({groups} from {n} patches)"
    return f"{n} patches"


def with_layout_legend(drawn: Image.Image, layout: dict[str, Any]) -> Image.Image:
    """`drawn` (from `draw_layout`) with a strip below that explains the marks."""
    strip = Image.new("RGB", (drawn.width, 24), (255, 255, 255))
    ImageDraw.Draw(strip).text((8, 6), layout_legend_text(layout), fill=(0, 0, 0))
    out = Image.new("RGB", (drawn.width, drawn.height + strip.height), (255, 255, 255))
    out.paste(drawn, (0, 0))
    out.paste(strip, (0, drawn.height))
    return out
