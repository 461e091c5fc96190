"""UOT merging: merge a page's tokens into K representatives with an EM loop whose
E-step is a KL-relaxed entropic Sinkhorn plan and whose M-step is the normalised barycentre.

Two implementations of the same math:
- `uot_reference`: the algorithm transcribed literally, one page at a time, log-domain Sinkhorn
  (the slow reference the tests and the benchmark compare against);
- `UOTCompressor`: whole batches of pages through the same tensor ops (pad + mask), on CPU or
  GPU, with the Sinkhorn scalings in the linear domain when exp(-C/eps) cannot underflow
  (C <= 2, so eps >= 0.025 keeps exp(-2/eps) >= 1.8e-35 > float32's smallest normal), else in
  the log domain. The M-step uses ``P^T X = diag(v) G^T (u * X)``, so the plan is never formed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from vrag_compress.compress.base import BaseCompressor, CompressedPage, CompressionError
from vrag_compress.compress.common import check_ratio, merged, page_seed
from vrag_compress.encoders.base import PageEncoding

LINEAR_DOMAIN_MIN_EPSILON = 0.025
MARGINAL_EPS = 1e-9
MOVE_TOL = 1e-4
PRECISIONS = ("fp32", "bf16")


def source_marginal(page: PageEncoding, marginal: str = "attention") -> np.ndarray:
    """mu: the layer-averaged visual in-degree, ``(a + 1e-9) / sum(a + 1e-9)``; uniform without
    attention statistics or with ``marginal="uniform"`` (float64, sums to 1)."""
    if marginal == "uniform" or page.centrality is None:
        return np.full(page.n_tokens, 1.0 / page.n_tokens)
    if not np.isfinite(page.centrality).all():
        raise CompressionError("uot: page centrality contains NaN or inf")
    a = page.centrality.astype(np.float64).mean(axis=0) + MARGINAL_EPS
    if (a < 0).any():
        raise CompressionError("uot: centrality has negative values; expected attention in-degree")
    return a / a.sum()


def kmeanspp_uniforms(rng: np.random.Generator, k: int) -> np.ndarray:
    """The k uniform draws that fix a k-means++ seeding (one per chosen centre)."""
    return rng.random(k)


def kmeanspp_init(x, mask, k: int, uniforms):
    """k-means++ seeding (no Lloyd steps) for a batch, by inverse-CDF sampling.

    x [B, N, D] unit rows (padding rows anywhere masked out), mask [B, N] bool, uniforms [B, K]
    float64 (K >= k, extra columns ignored). First centre uniform over the valid tokens, each
    next centre with probability proportional to the squared distance to the nearest chosen
    centre, ``2 (1 - x.y)``; uniform again if every remaining distance is 0 (duplicates).
    Returns centres [B, k, D] (L2-normalised rows).
    """
    import torch

    batch = x.shape[0]
    rows = torch.arange(batch, device=x.device)
    valid = mask.to(torch.float64)
    counts = valid.sum(dim=1)
    first = torch.clamp((uniforms[:, 0] * counts).long(), max=x.shape[1] - 1)
    first = _nth_valid(mask, first)
    centres = [x[rows, first]]
    nearest = torch.full(mask.shape, float("inf"), dtype=torch.float64, device=x.device)
    for step in range(1, k):
        sim = torch.bmm(centres[-1].unsqueeze(1), x.transpose(1, 2)).squeeze(1).to(torch.float64)
        nearest = torch.minimum(nearest, torch.clamp(2.0 * (1.0 - sim), min=0.0))
        weights = nearest * valid
        empty = weights.sum(dim=1, keepdim=True) <= 0
        weights = torch.where(empty, valid, weights)
        cdf = torch.cumsum(weights, dim=1)
        target = uniforms[:, step : step + 1] * cdf[:, -1:]
        index = torch.searchsorted(cdf, target, right=True).squeeze(1)
        index = torch.clamp(index, max=x.shape[1] - 1)
        centres.append(x[rows, index])
    init = torch.stack(centres, dim=1)
    return torch.nn.functional.normalize(init, dim=-1)


def _nth_valid(mask, nth):
    """Position of the nth valid token per row (valid tokens may not be a prefix)."""
    import torch

    cum = torch.cumsum(mask.long(), dim=1)
    return torch.searchsorted(cum, (nth + 1).unsqueeze(1)).squeeze(1)


def sinkhorn_uot_log(cost, mu, nu, epsilon: float, rho: float, iters: int):
    """Reference KL-relaxed entropic Sinkhorn, log domain, from zero potentials.

    cost [..., N, K], mu [..., N], nu [..., K] (zeros allowed: masked entries); returns the plan.
    """
    import torch

    phi = rho / (rho + epsilon)
    log_kernel = -cost / epsilon
    log_mu, log_nu = torch.log(mu), torch.log(nu)
    log_u = torch.zeros_like(mu)
    log_v = torch.where(nu > 0, torch.zeros_like(nu), torch.full_like(nu, -math.inf))
    for _ in range(iters):
        log_u = phi * (log_mu - torch.logsumexp(log_kernel + log_v.unsqueeze(-2), dim=-1))
        log_v = phi * (log_nu - torch.logsumexp(log_kernel + log_u.unsqueeze(-1), dim=-2))
    return torch.exp(log_u.unsqueeze(-1) + log_kernel + log_v.unsqueeze(-2))


def sinkhorn_uot_linear(kernel_t, mu, nu, epsilon: float, rho: float, iters: int):
    """The same iterations as `sinkhorn_uot_log` on scalings ``u = exp(log u)``,
    ``v = exp(log v)``, with ``kernel_t = exp(-C/eps)`` transposed to [B, K, N] (the layout whose
    matrix-vector products are fast on CPU). Returns (u [B, N], v [B, K])."""
    import torch

    phi = rho / (rho + epsilon)
    v = (nu > 0).to(kernel_t.dtype)
    u = mu
    for _ in range(iters):
        u = (mu / torch.bmm(v.unsqueeze(1), kernel_t).squeeze(1)) ** phi
        v = (nu / torch.bmm(u.unsqueeze(1), kernel_t.transpose(1, 2)).squeeze(1)) ** phi
    return u, v


def uot_reference(
    x: np.ndarray,
    mu: np.ndarray,
    init: np.ndarray,
    *,
    epsilon: float = 0.04,
    rho: float = 5.0,
    iters: int = 20,
    sinkhorn_iters: int = 3,
    dtype: str = "float32",
) -> tuple[np.ndarray, np.ndarray]:
    """UOT for one page, literally: log-domain Sinkhorn E-step, normalised barycentre M-step
    (a representative with no mass keeps its vector), stop when no row moves more than 1e-4.

    x [N, D], mu [N], init [K, D]. Returns (Y [K, D], assignment [N] = argmax of the last plan).
    """
    import torch

    tdtype = getattr(torch, dtype)
    xt = torch.as_tensor(x, dtype=tdtype)
    mut = torch.as_tensor(mu, dtype=tdtype)
    y = torch.as_tensor(init, dtype=tdtype).clone()
    nu = torch.full((y.shape[0],), 1.0 / y.shape[0], dtype=tdtype)
    plan = None
    for _ in range(iters):
        cost = 1.0 - xt @ y.T
        plan = sinkhorn_uot_log(cost, mut, nu, epsilon, rho, sinkhorn_iters)
        raw = plan.T @ xt
        norms = raw.norm(dim=1, keepdim=True)
        empty = (plan.sum(dim=0) == 0) | (norms.squeeze(1) == 0)
        y_new = torch.where(empty.unsqueeze(1), y, raw / torch.clamp(norms, min=1e-30))
        moved = (y_new - y).norm(dim=1).max()
        y = y_new
        if moved <= MOVE_TOL:
            break
    if plan is None:
        raise CompressionError(f"uot: iters must be >= 1, got {iters}")
    return y.numpy().astype(np.float32), plan.argmax(dim=1).numpy()


@dataclass(frozen=True)
class UOTCompressor(BaseCompressor):
    """Batched UOT merging into ``k = ceil(ratio * N)`` representatives per page.

    epsilon: entropy weight (the paper's gamma; 0.01 for PaliGemma in the paper).
    rho: marginal relaxation; iters: EM steps (T); sinkhorn_iters: Sinkhorn steps (L).
    marginal: "attention" (mu from centrality when present) or "uniform".
    precision: "fp32", or "bf16" for the two matrix products per EM step (faster, approximate).
    batch_size: pages per tensor batch; device: "cpu", "cuda", ...
    """

    name: ClassVar[str] = "uot"
    kind: ClassVar[str] = "merging"
    stats: ClassVar[str | None] = None  # centrality is used when present, never required

    ratio: float = 0.1
    epsilon: float = 0.04
    rho: float = 5.0
    iters: int = 20
    sinkhorn_iters: int = 3
    seed: int = 0
    marginal: str = "attention"
    precision: str = "fp32"
    batch_size: int = 8
    device: str = "cpu"

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratio", check_ratio(self.ratio))
        for key in ("epsilon", "rho"):
            value = float(getattr(self, key))
            if not (math.isfinite(value) and value > 0):
                raise CompressionError(f"uot: {key} must be a positive finite number, got {value}")
            object.__setattr__(self, key, value)
        for key in ("iters", "sinkhorn_iters", "batch_size"):
            value = int(getattr(self, key))
            if value < 1:
                raise CompressionError(f"uot: {key} must be >= 1, got {value}")
            object.__setattr__(self, key, value)
        object.__setattr__(self, "seed", int(self.seed))
        if self.marginal not in ("attention", "uniform"):
            raise CompressionError(
                f"uot: marginal must be 'attention' or 'uniform', got {self.marginal!r}"
            )
        if self.precision not in PRECISIONS:
            raise CompressionError(
                f"uot: precision must be one of {PRECISIONS}, got {self.precision!r}"
            )
        super().__post_init__()

    @property
    def requires_stats(self) -> bool:
        """Statistics are wanted for the attention marginal (pages without them get uniform)."""
        return self.marginal == "attention"

    def _compress_many(self, pages: list[PageEncoding]) -> list[CompressedPage]:
        out: list[CompressedPage | None] = [None] * len(pages)
        todo = []
        ks = self.keep_counts(pages)
        for i, page in enumerate(pages):
            if ks[i] >= page.n_tokens:
                out[i] = merged(page.vectors, np.arange(page.n_tokens))
            else:
                todo.append(i)
        todo.sort(key=lambda i: pages[i].n_tokens)  # similar lengths share a batch: less padding
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            batch = self._run_batch([pages[i] for i in chunk], [ks[i] for i in chunk])
            for i, result in zip(chunk, batch, strict=True):
                out[i] = result
        return out  # type: ignore[return-value]

    def _run_batch(self, pages: list[PageEncoding], ks: list[int]) -> list[CompressedPage]:
        import torch

        device = torch.device(self.device)
        k_max = max(ks)
        x, mask = _pad([p.vectors for p in pages], device)
        mu, _ = _pad([source_marginal(p, self.marginal)[:, None] for p in pages], device)
        draws = [_padded_uniforms(self.seed, p, k, k_max) for p, k in zip(pages, ks, strict=True)]
        uniforms = torch.as_tensor(np.stack(draws), device=device)
        cols = torch.arange(k_max, device=device)[None, :] < _column(ks, device)
        y0 = kmeanspp_init(x, mask, k_max, uniforms) * cols.unsqueeze(2)
        y, assignment = self._em(x, mu.squeeze(2), y0, cols)
        y, assignment = y.cpu().numpy(), assignment.cpu().numpy()
        return [
            merged(y[b, :k], assignment[b, : p.n_tokens])
            for b, (p, k) in enumerate(zip(pages, ks, strict=True))
        ]

    def _em(self, x, mu, y, cols):
        """EM on a padded batch; pages leave the loop as they converge (per-page early stop)."""
        import torch

        nu = cols.to(torch.float32) / cols.sum(dim=1, keepdim=True)
        out_y = y.clone()
        out_assign = torch.zeros(x.shape[:2], dtype=torch.long, device=x.device)
        active = torch.arange(x.shape[0], device=x.device)
        xm = x.to(torch.bfloat16) if self.precision == "bf16" else x
        for step in range(self.iters):
            raw, mass, plan_rows = self._plans(xm, y, mu, nu)
            norms = raw.norm(dim=2, keepdim=True)
            empty = (mass == 0) | (norms.squeeze(2) == 0)
            y_new = torch.where(empty.unsqueeze(2), y, raw / torch.clamp(norms, min=1e-30))
            moved = (y_new - y).norm(dim=2).amax(dim=1)
            out_y[active] = y_new
            done = moved <= MOVE_TOL
            if step == self.iters - 1:
                done = torch.ones_like(done)
            if done.any():
                out_assign[active[done]] = plan_rows(done).argmax(dim=2)
                keep = ~done
                active, xm, mu, nu = active[keep], xm[keep], mu[keep], nu[keep]
                y_new = y_new[keep]
            if active.numel() == 0:
                break
            y = y_new
        return out_y, out_assign

    def _plans(self, xm, y, mu, nu):
        """One E-step: returns ``P^T X`` [B, K, D], each representative's mass indicator [B, K],
        and a function giving, for selected pages, rows whose argmax is the plan's argmax."""
        import torch

        sim_t = torch.bmm(y.to(xm.dtype), xm.transpose(1, 2)).to(torch.float32)  # [B, K, N]
        if self.epsilon < LINEAR_DOMAIN_MIN_EPSILON:
            cost = (1.0 - sim_t).transpose(1, 2)
            plan = sinkhorn_uot_log(cost, mu, nu, self.epsilon, self.rho, self.sinkhorn_iters)
            raw = torch.bmm(plan.transpose(1, 2).to(xm.dtype), xm).to(torch.float32)
            return raw, plan.sum(dim=1), lambda sel: plan[sel]
        kernel_t = sim_t.sub_(1.0).mul_(1.0 / self.epsilon).exp_()
        u, v = sinkhorn_uot_linear(kernel_t, mu, nu, self.epsilon, self.rho, self.sinkhorn_iters)
        weighted = xm * u.unsqueeze(2).to(xm.dtype)
        raw = torch.bmm(kernel_t.to(xm.dtype), weighted).to(torch.float32) * v.unsqueeze(2)
        return raw, v, lambda sel: (kernel_t[sel] * v[sel].unsqueeze(2)).transpose(1, 2)


def _pad(arrays: list[np.ndarray], device):
    """Stack [N_b, D] arrays into a zero-padded [B, N_max, D] float tensor plus its row mask."""
    import torch

    n_max = max(a.shape[0] for a in arrays)
    out = np.zeros((len(arrays), n_max, arrays[0].shape[1]), dtype=np.float32)
    mask = np.zeros((len(arrays), n_max), dtype=bool)
    for b, a in enumerate(arrays):
        out[b, : a.shape[0]] = a
        mask[b, : a.shape[0]] = True
    return torch.from_numpy(out).to(device), torch.from_numpy(mask).to(device)


def _column(values: list[int], device):
    import torch

    return torch.tensor(values, device=device)[:, None]


def _padded_uniforms(seed: int, page: PageEncoding, k: int, k_max: int) -> np.ndarray:
    """The page's k-means++ draws (depend on seed and page only), padded to the batch's K."""
    out = np.zeros(k_max)
    out[:k] = kmeanspp_uniforms(page_seed(seed, page), k)
    return out
