"""CPU speed option for `ColEncoder`: dynamic int8 quantisation of the linear layers.

Measured with `vrag bench encode` on the real-size ColQwen2 (docs/encoders.md): 2.46× pages/s,
2.1–2.4× less CPU time per page, mean cosine 0.989 between fp32 and int8 page vectors. bf16 weights
(``dtype="bfloat16"``) are the other option that passed the 1.3× bar on CPUs with AVX512-BF16;
bf16 autocast over fp32 weights was slower than bf16 weights and was dropped.
Torch is imported inside the function so that importing `SPEEDUPS` stays cheap (CLI).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SPEEDUPS = ("none", "int8")
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
"""Short dtype names (CLI, benchmarks) -> torch dtype names (`load_encoder(dtype=...)`)."""


def encoder_options(dtype: str = "auto", speedup: str = "none") -> dict[str, str]:
    """The non-default Col* encoder options an index records, from short names.

    ``dtype``: "auto" (bfloat16 on GPUs, float32 on the CPU), "fp32" or "bf16";
    ``speedup``: "none" or "int8" (float32 weights only). Raises ValueError on anything else.
    """
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"dtype must be auto, {' or '.join(DTYPES)}; got {dtype!r}")
    if speedup not in SPEEDUPS:
        raise ValueError(f"speedup must be one of {', '.join(SPEEDUPS)}; got {speedup!r}")
    if speedup != "none" and dtype == "bf16":
        raise ValueError(f"speedup {speedup} quantises float32 weights; not usable with bf16")
    options = {"dtype": DTYPES[dtype]} if dtype != "auto" else {}
    return options | ({"speedup": speedup} if speedup != "none" else {})


def quantize_linears_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Replace the model's ``nn.Linear`` layers, in place, by dynamic int8 ones (CPU only).

    Weights are int8 per tensor, activations are quantised on the fly per batch (PyTorch's
    eager ``quantize_dynamic``; its deprecation warnings are silenced here).
    """
    import torch
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
