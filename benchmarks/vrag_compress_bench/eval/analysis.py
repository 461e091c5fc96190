"""Which tokens a pruning method keeps: the evidence for the attention-sink diagnosis."""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

PUNCTUATION = set(string.punctuation)


def is_punctuation(token: str) -> bool:
    return bool(token) and all(ch in PUNCTUATION for ch in token)


def kept_token_report(
    tokens: Sequence[Sequence[str]], compressed: Sequence[Any], top: int = 10
) -> dict[str, Any] | None:
    """Share of kept tokens that are punctuation, the most frequent kept tokens, and the same
    share over all tokens for reference. None for merging methods (no kept positions)."""
    if any(c.kept is None for c in compressed):
        return None
    kept: Counter[str] = Counter()
    for doc_tokens, page in zip(tokens, compressed, strict=True):
        kept.update(doc_tokens[int(i)] for i in page.kept)
    everything: Counter[str] = Counter(t for doc in tokens for t in doc)
    n_kept, n_all = sum(kept.values()), sum(everything.values())
    punct_kept = sum(n for t, n in kept.items() if is_punctuation(t))
    punct_all = sum(n for t, n in everything.items() if is_punctuation(t))
    return {
        "kept_punctuation_share": punct_kept / n_kept if n_kept else 0.0,
        "corpus_punctuation_share": punct_all / n_all if n_all else 0.0,
        "top_kept": [[t, n / n_kept] for t, n in kept.most_common(top)],
    }
