"""torchvision compatibility: the package and a Qwen2-VL image processor import and work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# What every encoding command does: load the CLI, then an encoder module (imports transformers),
# with no logging configured, so Python prints any warning to stderr as a command would.
CLI_SCRIPT = """
import vrag_compress.cli
import vrag_compress.encoders.text
"""

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
    # The fix is the normal state of a README install (CPU torch + PyPI's CUDA torchvision) and
    # nothing here calls a torchvision C++ op: no command may print a warning about it.
    assert "torchvision's compiled ops do not match" not in run.stderr


def test_constraints_pin_the_torchvision_built_for_the_pinned_torch() -> None:
    pins = dict(
        line.split("==", 1)
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    )
    torch_major, torch_minor = (int(part) for part in pins["torch"].split(".")[:2])
    assert torch_major == 2
    # torchvision 0.(minor + 15) is the release built against torch 2.minor (0.28 <-> 2.13).
    assert pins["torchvision"].split(".")[:2] == ["0", str(torch_minor + 15)]


def test_a_cli_command_prints_no_torchvision_warning() -> None:
    run = subprocess.run(
        [sys.executable, "-c", CLI_SCRIPT], capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "torchvision" not in run.stderr


def test_guard_is_a_no_op_once_torchvision_is_loaded() -> None:
    import vrag_compress.compat as compat

    # isort: split
    import torchvision  # noqa: F401

    assert compat.torchvision_ops_broken() is False
