"""Page compression (SPEC §2-8): pruning (SAP and baselines) and merging (UOT and baselines).

from vrag_compress.compress import get_compressor
sap = get_compressor("sap", ratio=0.1, profile="colqwen2")
compressed = sap.compress_many(pages)
"""

from vrag_compress.compress.base import CompressedPage, CompressionError, Compressor, budget
from vrag_compress.compress.baselines import (
    AdaptiveEOSCompressor,
    ClusterCompressor,
    EOSCompressor,
    IdentityCompressor,
    PoolCompressor,
    RandomCompressor,
    calibrate_kappa,
)
from vrag_compress.compress.profiles import (
    BUILTIN_PROFILES,
    CalibrationProfile,
    ProfileError,
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
from vrag_compress.compress.variants import VARIANTS  # registers sap-sink, uot-anchor, uot-sap

__all__ = [
    "BUILTIN_PROFILES",
    "AdaptiveEOSCompressor",
    "CalibrationProfile",
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
    "VARIANTS",
    "budget",
    "builtin_profile",
    "calibrate_kappa",
    "fallback_window",
    "get_compressor",
    "list_compressors",
    "register_compressor",
    "uot_reference",
]
