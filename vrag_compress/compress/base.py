"""The compressor protocol, `CompressedPage`, the one budget rule, the page check every method
shares and `BaseCompressor`, the easy way to satisfy the protocol."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from vrag_compress.compress.allocation import (
    BUDGETS,
    BudgetRule,
    allocate,
    fit_threshold,
    fixed_count,
)
from vrag_compress.compress.budget_check import (
    CHECK_MIN_PAGES,
    BudgetCheck,
    check_signal,
    fixed_shares,
)
from vrag_compress.compress.errors import CompressionError
from vrag_compress.encoders.base import PageEncoding

log = logging.getLogger(__name__)

__all__ = [
    "BaseCompressor",
    "CompressedPage",
    "CompressionError",
    "Compressor",
    "budget",
    "check_page",
]


@dataclass
class CompressedPage:
    """A compressed page: k L2-normalised float32 vectors and how they came from the source tokens.

    kept: sorted source positions of the kept tokens (pruning methods), else None.
    assignment: [N] representative id per source token (merging methods), else None.
    """

    vectors: np.ndarray
    kept: np.ndarray | None = None
    assignment: np.ndarray | None = None


def budget(n_tokens: int, ratio: float) -> int:
    """Tokens to keep for a page of ``n_tokens``: ``max(1, ceil(ratio * N))``, never more than N."""
    if not 0.0 < ratio <= 1.0:
        raise CompressionError(f"ratio must be in (0, 1], got {ratio}")
    if n_tokens <= 0:
        raise CompressionError("a page with 0 tokens cannot be compressed")
    return fixed_count(ratio, n_tokens)


@runtime_checkable
class Compressor(Protocol):
    """Compresses `PageEncoding`s into `CompressedPage`s at a fixed budget."""

    @property
    def name(self) -> str:
        """The registered method name (`get_compressor(name, **params)` rebuilds it)."""
        ...

    @property
    def params(self) -> dict[str, Any]:
        """JSON-serialisable constructor parameters; the index records them."""
        ...

    @property
    def requires_stats(self) -> bool:
        """Whether pages must be encoded with attention statistics for this compressor."""
        ...

    def compress(self, page: PageEncoding) -> CompressedPage:
        """One page to its compressed vectors."""
        ...

    def compress_many(self, pages: list[PageEncoding]) -> list[CompressedPage]:
        """A batch of pages (an adaptive budget spreads its share over them)."""
        ...


def check_page(page: PageEncoding, method: str, stats: str | None = None) -> None:
    """Reject pages a compressor cannot use: not a PageEncoding, empty, NaN/inf, zero rows,
    or missing the attention statistic ``stats`` ("centrality" or "eos_attention")."""
    if not isinstance(page, PageEncoding):
        raise CompressionError(
            f"{method}: expected a PageEncoding, got {type(page).__name__}; "
            "wrap arrays with PageEncoding(vectors, centrality=..., eos_attention=...)"
        )
    x = page.vectors
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise CompressionError(
            f"{method}: page has shape {x.shape}; a page needs N >= 1 tokens and D >= 1"
        )
    squared = np.einsum("ij,ij->i", x, x)  # one pass finds NaN/inf (propagate) and zero rows
    if not np.isfinite(squared).all():
        row = int(np.flatnonzero(~np.isfinite(squared))[0])
        raise CompressionError(f"{method}: page vector row {row} contains NaN or inf")
    if not squared.all():
        row = int(np.flatnonzero(squared == 0)[0])
        raise CompressionError(
            f"{method}: page vector row {row} is all zeros (padding?); drop padded rows first"
        )
    if stats is None:
        return
    value = getattr(page, stats)
    if value is None:
        raise CompressionError(
            f"{method} needs attention statistics ({stats}) but the page has none; "
            "encode with with_stats=True (the index does this when compressor.requires_stats)"
        )
    if not np.isfinite(value).all():
        raise CompressionError(f"{method}: page {stats} contains NaN or inf")


ADAPTIVE_FIELDS = (
    "budget_signal",
    "budget_floor",
    "budget_cap",
    "budget_threshold",
    "budget_fallback",
)


@dataclass(frozen=True)
class BaseCompressor:
    """The base class for compression methods, built-in and user-written.

    Subclasses are frozen dataclasses whose fields are exactly the parameters of
    ``get_compressor(name, **params)``, so ``get_compressor(c.name, **c.params) == c``; they
    implement ``_compress`` (one page) and/or ``_compress_many`` (a batch) and declare what they
    need with the capability attributes below, which `compressor_for` reads (a ``ratio`` field
    is how a method says it takes a keep ratio). ``n_keep(page)`` is the page's vector count.

    budget: "fixed" (``ceil(ratio * N)`` per page, as the papers) or "adaptive" (the budget
    ``ratio * sum(N)`` spread by content; see `vrag_compress.compress.allocation`), with
    ``budget_signal``, ``budget_floor``/``budget_cap`` (multiples of ``ratio * N``) and
    ``budget_threshold`` (set by ``fit(pages)``; None spreads each batch's own share) and
    ``budget_fallback`` (True: the fixed shares, rounded so a batch spends exactly its share;
    False: the page signal; None: checked on the collection's own pseudo-queries by ``fit`` and
    by every call of at least ``CHECK_MIN_PAGES`` pages, see `budget_check`).
    """

    name: ClassVar[str] = "base"
    kind: ClassVar[str] = "pruning"
    """"pruning" (keeps source tokens), "merging" (builds new vectors) or "none"."""
    stats: ClassVar[str | None] = None
    """The attention statistic every page must carry ("centrality" or "eos_attention")."""
    uses_window: ClassVar[bool] = False
    """The method reads a SAP layer window ``layers``, chosen per model by `compressor_for`."""
    needs_fit: ClassVar[bool] = False
    """The method has a fitting step (``fit(pages)``) unless ``fitted`` is already True."""
    fit_params: ClassVar[tuple[str, ...]] = ()
    """Parameters that, when given, make the fitting step unnecessary."""
    adaptive_budget: ClassVar[bool] = True
    """The method can take ``budget="adaptive"`` (it needs a ``ratio`` too)."""

    budget: str = field(default="fixed", kw_only=True)
    budget_signal: str = field(default="coverage", kw_only=True)
    budget_floor: float = field(default=0.25, kw_only=True)
    budget_cap: float = field(default=4.0, kw_only=True)
    budget_threshold: float | None = field(default=None, kw_only=True)
    budget_fallback: bool | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.budget not in BUDGETS:
            raise CompressionError(
                f"{self.name}: budget must be one of {BUDGETS}, got {self.budget!r}"
            )
        if self.budget == "fixed":
            defaults = {f.name: f.default for f in fields(BaseCompressor)}
            changed = [f for f in ADAPTIVE_FIELDS if getattr(self, f) != defaults[f]]
            if changed:
                raise CompressionError(
                    f"{self.name}: {', '.join(changed)} only apply with budget='adaptive'"
                )
            return
        if not self.adaptive_budget or not hasattr(self, "ratio"):
            raise CompressionError(
                f"{self.name} sets its own vector counts; budget='adaptive' applies to methods "
                "with a keep ratio (sap, uot, random, eos, cluster and their variants)"
            )
        cls = type(self)
        if (
            cls._compress_k is BaseCompressor._compress_k
            and cls._compress_many is BaseCompressor._compress_many
        ):
            raise CompressionError(
                f"{self.name}: budget='adaptive' gives each page its own vector count, so the "
                "method must implement _compress_k(page, k) (or _compress_many(pages))"
            )
        for key in ("budget_floor", "budget_cap"):
            object.__setattr__(self, key, float(getattr(self, key)))
        if self.budget_threshold is not None:
            object.__setattr__(self, "budget_threshold", float(self.budget_threshold))
        if not (self.budget_fallback is None or isinstance(self.budget_fallback, bool)):
            raise CompressionError(
                f"{self.name}: budget_fallback must be true, false or null, "
                f"got {self.budget_fallback!r}"
            )
        self.budget_rule().check(self.name)

    def budget_rule(self) -> BudgetRule:
        """The adaptive budget's rule (for ``budget="adaptive"``)."""
        return BudgetRule(
            float(getattr(self, "ratio", 1.0)),
            self.budget_signal,
            self.budget_floor,
            self.budget_cap,
            self.budget_threshold,
        )

    @property
    def requires_stats(self) -> bool:
        """Whether pages need attention statistics (the index captures them when True)."""
        return self.stats is not None

    @property
    def fitted(self) -> bool:
        """Whether the method compresses pages one by one without a fitting step first (an
        adaptive budget without a threshold still compresses: it spreads each batch's share)."""
        return self.budget == "fixed" or self.budget_threshold is not None

    def fit(self, pages: list[PageEncoding]) -> BaseCompressor:
        """A copy fitted on ``pages``: an adaptive budget gets its calibrated threshold (methods
        without a fitting step return themselves)."""
        if self.budget == "fixed":
            return self
        rule = replace(self.budget_rule(), threshold=None)
        fallback = self.budget_fallback
        if fallback is None:
            fallback = not self.check_budget(pages).signal_helps
        return replace(
            self,
            budget_threshold=fit_threshold(rule, [p.vectors for p in pages]),
            budget_fallback=fallback,
        )

    def check_budget(self, pages: Sequence[PageEncoding]) -> BudgetCheck:
        """Whether the adaptive budget beats the fixed shares on span pseudo-queries of
        ``pages`` (`vrag_compress.compress.budget_check`)."""

        def run(batch: list[PageEncoding], adaptive: bool) -> list[np.ndarray]:
            chosen = replace(self, budget_fallback=not adaptive, budget_threshold=None)
            return [c.vectors for c in chosen.compress_many(batch)]

        return check_signal(run, pages)

    @property
    def params(self) -> dict[str, Any]:
        """Constructor parameters; the budget fields only when the budget is adaptive, so a
        fixed-budget method records exactly what it did before adaptive budgets existed."""
        params = {key: list(v) if isinstance(v, tuple) else v for key, v in asdict(self).items()}
        if self.budget == "fixed":
            for key in ("budget", *ADAPTIVE_FIELDS):
                params.pop(key, None)
        return params

    def n_keep(self, n_tokens: int) -> int:
        """The fixed budget for a page of ``n_tokens``: ``max(1, ceil(ratio * N))``."""
        return budget(n_tokens, getattr(self, "ratio", 1.0))

    def keep_counts(self, pages: Sequence[PageEncoding]) -> list[int]:
        """Vectors to keep for each page of one batch (fixed or adaptive budget)."""
        if self.budget == "fixed":
            return [self.n_keep(page.n_tokens) for page in pages]
        fallback = self.budget_fallback
        if fallback is None and self.budget_threshold is None and len(pages) >= CHECK_MIN_PAGES:
            check = self.check_budget(pages)
            fallback = not check.signal_helps
            log.info(
                "%s: adaptive budget %s (pseudo-NDCG@10 %.4f adaptive, %.4f fixed shares, "
                "%d span pseudo-queries)",
                self.name,
                "falls back to the fixed shares" if fallback else "kept",
                check.adaptive,
                check.fixed,
                check.n_queries,
            )
        if fallback:
            return fixed_shares(float(getattr(self, "ratio", 1.0)), [p.n_tokens for p in pages])
        return allocate(self.budget_rule(), [page.vectors for page in pages])

    def compress(self, page: PageEncoding) -> CompressedPage:
        """One page, checked, to its compressed vectors."""
        check_page(page, self.name, self.stats)
        return self._compress_many([page])[0]

    def compress_many(self, pages: list[PageEncoding]) -> list[CompressedPage]:
        """A batch of pages, each checked (an adaptive budget spreads its share over them)."""
        for page in pages:
            check_page(page, self.name, self.stats)
        return self._compress_many(list(pages))

    def _compress(self, page: PageEncoding) -> CompressedPage:
        return self._compress_k(page, self.n_keep(page.n_tokens))

    def _compress_k(self, page: PageEncoding, k: int) -> CompressedPage:
        """One page to ``k`` vectors (methods with a keep ratio implement this or the batch)."""
        raise NotImplementedError

    def _compress_many(self, pages: list[PageEncoding]) -> list[CompressedPage]:
        if self.budget == "fixed":
            return [self._compress(page) for page in pages]
        return [
            self._compress_k(page, k)
            for page, k in zip(pages, self.keep_counts(pages), strict=True)
        ]
