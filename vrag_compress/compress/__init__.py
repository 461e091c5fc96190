"""Page compression: pruning (SAP and baselines) and merging (UOT and baselines).

from vrag_compress.compress import compressor_for, get_compressor
sap = get_compressor("sap", ratio=0.1, profile="colqwen2")
sap = compressor_for("sap", encoder=encoder, ratio=0.1)  # the model's window, calibrated or not
compressed = sap.compress_many(pages)

A new method is one `BaseCompressor` subclass that declares its capabilities, plus
`register_compressor`.
"""

from vrag_compress.compress.base import (
    BaseCompressor,
    CompressedPage,
    CompressionError,
    Compressor,
    budget,
)
from vrag_compress.compress.baselines import (
    AdaptiveEOSCompressor,
    ClusterCompressor,
    EOSCompressor,
    IdentityCompressor,
    PoolCompressor,
    RandomCompressor,
    calibrate_kappa,
)
from vrag_compress.compress.factory import (
    Capabilities,
    capabilities,
    compressor_for,
    parse_method_spec,
)
from vrag_compress.compress.profiles import (
    BUILTIN_PROFILES,
    CalibrationProfile,
    ProfileError,
    UncalibratedWindowWarning,
    builtin_profile,
    fallback_window,
)
from vrag_compress.compress.registry import (
    get_compressor,
    list_compressors,
    register_compressor,
)
from vrag_compress.compress.sap import SAPCompressor
from vrag_compress.compress.uot import UOTCompressor, uot_reference
from vrag_compress.compress.variants import VARIANTS

__all__ = [
    "BUILTIN_PROFILES",
    "AdaptiveEOSCompressor",
    "BaseCompressor",
    "CalibrationProfile",
    "Capabilities",
    "ClusterCompressor",
    "CompressedPage",
    "CompressionError",
    "Compressor",
    "EOSCompressor",
    "IdentityCompressor",
    "PoolCompressor",
    "ProfileError",
    "RandomCompressor",
    "SAPCompressor",
    "UOTCompressor",
    "UncalibratedWindowWarning",
    "VARIANTS",
    "budget",
    "builtin_profile",
    "calibrate_kappa",
    "capabilities",
    "compressor_for",
    "parse_method_spec",
    "fallback_window",
    "get_compressor",
    "list_compressors",
    "register_compressor",
    "uot_reference",
]
