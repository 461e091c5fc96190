"""Late-interaction (MaxSim) scoring, in one place: the reference every kernel is checked
against (`reference`), the packed numpy path the stores search with (`packed`), and the torch
path for a GPU or many CPU threads (`torch_scorer`). Only the reference loads here; the other two
are imported by name, so using `maxsim` never imports torch or a thread pool.
"""

from __future__ import annotations

from vrag_compress.scoring.reference import maxsim

__all__ = ["maxsim"]
