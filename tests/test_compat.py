"""torchvision compatibility: the package and a Qwen2-VL image processor import and work."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = """
import json, logging
logging.basicConfig(level=logging.WARNING)
import vrag_compress.compat as compat
import numpy as np
from PIL import Image
import torchvision
from transformers import Qwen2VLImageProcessor
processor = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112)
image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (90, 120, 3), dtype=np.uint8))
out = processor(images=[image], return_tensors="pt")
again = compat.ensure_torchvision_importable()
import colpali_engine.models  # the import chain that crashes without the fix
print(json.dumps({
    "active": compat._state["active"],
    "again": again,
    "pixels": list(out["pixel_values"].shape),
    "grid": out["image_grid_thw"].tolist(),
}))
"""


@pytest.mark.slow
def test_package_and_qwen2vl_processor_work_in_a_fresh_interpreter() -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["again"] == result["active"]  # idempotent
    t, h, w = result["grid"][0]
    assert result["pixels"] == [t * h * w, 3 * 2 * 14 * 14]
    warnings = run.stderr.count("torchvision's compiled ops do not match")
    assert warnings == (1 if result["active"] else 0)  # one warning, only when the fix acts


def test_guard_is_a_no_op_once_torchvision_is_loaded() -> None:
    import vrag_compress.compat as compat

    # isort: split
    import torchvision  # noqa: F401

    assert compat.torchvision_ops_broken() is False
