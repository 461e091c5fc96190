"""Late-interaction scoring: the reference MaxSim other kernels are checked against."""

from __future__ import annotations

import numpy as np


def maxsim(query: np.ndarray, doc: np.ndarray) -> float:
    """``sum_i max_j q_i . x_j`` for query [M, D] and document [N, D]; 0.0 for an empty document."""
    query = np.asarray(query, dtype=np.float32)
    doc = np.asarray(doc, dtype=np.float32)
    if query.ndim != 2 or doc.ndim != 2 or query.shape[1] != doc.shape[1]:
        raise ValueError(
            f"maxsim needs [M, D] and [N, D] arrays, got {query.shape} and {doc.shape}"
        )
    if doc.shape[0] == 0 or query.shape[0] == 0:
        return 0.0
    return float((query @ doc.T).max(axis=1).sum())
