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
