"""Streaming capture of decoder attention statistics during the embedding forward pass.

Why streaming: ``output_attentions=True`` keeps every layer's [B, H, S, S] map alive until the
forward ends, O(L·H·S²) memory, which runs out at a few thousand visual tokens. Here a custom
attention function (registered with transformers' ``AttentionInterface``, installed on the
decoder only; the vision tower keeps SDPA) produces each layer's output with the stock SDPA
kernel and, when a capture is active, recomputes softmax probabilities for just the rows the
statistics need (visual query rows, in chunks, and the last real token's row), reduces them at
once to per-layer [B, S] float32 vectors and drops them before the next layer runs.

The active capture lives in a ``ContextVar`` set by `capture_attention` around one forward call,
so encoders in other threads or other models in the same thread never see each other's data.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

import vrag_compress.compat  # noqa: F401  (must run before transformers imports torchvision)

# isort: split
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

STREAMING_ATTENTION = "vrag_streaming"
"""Name under which the streaming attention function is registered with transformers."""

DEFAULT_CHUNK_BYTES = 4 * 2**20
"""Upper bound on one chunk's float32 probability block (heads × rows × keys × 4 bytes)."""

_ACTIVE: contextvars.ContextVar[AttentionCapture | None] = contextvars.ContextVar(
    "vrag_attention_capture", default=None
)


class CaptureError(RuntimeError):
    """The model cannot be instrumented for attention capture, or a capture came back incomplete."""


@dataclass
class AttentionCapture:
    """Collects per-layer statistics for one forward call over a batch of B sequences of length S.

    visual_mask: [B, S] bool, the visual (image) token positions whose rows and columns count.
    last_index: [B] long, the position of each sequence's last non-padding token (EOS row).
    centrality[l]: [B, S] float32, Σ over visual rows of the head-mean attention to each key.
    eos_attention[l]: [B, S] float32, head-mean attention of the last token to each key.
    """

    layer_of: dict[int, int]
    visual_mask: torch.Tensor
    last_index: torch.Tensor
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    centrality: list[torch.Tensor | None] = field(default_factory=list)
    eos_attention: list[torch.Tensor | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        n_layers = len(self.layer_of)
        self.centrality = [None] * n_layers
        self.eos_attention = [None] * n_layers
        self._rows = [torch.nonzero(row).flatten() for row in self.visual_mask]

    def record(
        self, module: torch.nn.Module, query, key, attention_mask, scaling, is_causal
    ) -> None:
        """Reduce one layer's attention to its statistics (called from the attention function)."""
        layer = self.layer_of.get(id(module))
        if layer is None:
            return
        batch, heads, q_len, _ = query.shape
        if q_len != self.visual_mask.shape[1]:
            raise CaptureError(
                f"capture expected sequences of length {self.visual_mask.shape[1]}, "
                f"layer {layer} saw {q_len} (was a KV cache used?)"
            )
        key = repeat_kv(key, heads // key.shape[1]).float()
        query = query.float()
        scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
        cent = torch.zeros(batch, key.shape[2], dtype=torch.float32, device=query.device)
        eos = torch.zeros_like(cent)
        for b in range(batch):
            probs = _RowProbs(query[b], key[b], _mask_for(attention_mask, b), scale, is_causal)
            cent[b] = self._visual_in_degree(probs, self._rows[b])
            eos[b] = probs.rows(self.last_index[b : b + 1]).mean(dim=0)[0]
        self.centrality[layer] = cent
        self.eos_attention[layer] = eos

    def _visual_in_degree(self, probs: _RowProbs, rows: torch.Tensor) -> torch.Tensor:
        heads, kv_len = probs.key.shape[0], probs.key.shape[1]
        chunk = max(1, self.chunk_bytes // (4 * heads * kv_len))
        total = torch.zeros(kv_len, dtype=torch.float32, device=probs.key.device)
        for start in range(0, rows.numel(), chunk):
            total += probs.rows(rows[start : start + chunk]).sum(dim=1).mean(dim=0)
        return total

    def results(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Stacked [L, B, S] centrality and EOS attention; raises if some layer never ran."""
        missing = [i for i, c in enumerate(self.centrality) if c is None]
        if missing:
            raise CaptureError(
                f"no attention was captured for decoder layers {missing}; is the decoder using "
                f"the {STREAMING_ATTENTION!r} attention implementation?"
            )
        eos = [e for e in self.eos_attention if e is not None]
        return torch.stack([c for c in self.centrality if c is not None]), torch.stack(eos)


@dataclass
class _RowProbs:
    """Softmax attention probabilities of one sequence, computed on demand for chosen rows."""

    query: torch.Tensor  # [H, Q, d] float32
    key: torch.Tensor  # [H, K, d] float32
    mask: torch.Tensor | None  # [H or 1, Q, K] bool (True = attend) or additive float
    scale: float
    is_causal: bool

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        """[H, len(index), K] probabilities for the query rows ``index``."""
        scores = torch.matmul(self.query[:, index], self.key.transpose(1, 2))
        scores.mul_(self.scale)  # in place: one [H, rows, K] block plus the softmax output
        if self.mask is not None:
            mask = self.mask[:, index]
            if mask.dtype == torch.bool:
                scores.masked_fill_(~mask, float("-inf"))
            else:
                scores.add_(mask.float())
        elif self.is_causal:
            offset = self.key.shape[1] - self.query.shape[1]
            keys = torch.arange(self.key.shape[1], device=scores.device)
            future = keys[None, None, :] > (index[None, :, None] + offset)
            scores.masked_fill_(future, float("-inf"))
        return torch.softmax(scores, dim=-1)


def _mask_for(attention_mask: torch.Tensor | None, b: int) -> torch.Tensor | None:
    """One sequence's [H or 1, Q, K] slice of a 4-D mask that may broadcast over the batch."""
    if attention_mask is None:
        return None
    if attention_mask.ndim != 4:
        raise CaptureError(
            f"expected a 4-D attention mask, got shape {tuple(attention_mask.shape)}"
        )
    return attention_mask[b if attention_mask.shape[0] > 1 else 0]


def streaming_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """SDPA output, plus statistics into the active capture (if any) for this module's layer."""
    output, _ = sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )
    capture = _ACTIVE.get()
    if capture is not None:
        flag = kwargs.get("is_causal")
        causal = getattr(module, "is_causal", True) if flag is None else flag
        causal = bool(causal and attention_mask is None and query.shape[2] > 1)
        with torch.no_grad():
            capture.record(module, query, key, attention_mask, scaling, causal)
    return output, None


def padding_safe_sdpa_mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
    """transformers' SDPA mask, with fully masked rows (left-padding positions) opened up.

    Why: a query row that may attend to nothing gives NaN in CPU SDPA; at the next layer those
    NaN values meet a zero probability in ``probs @ V`` and turn real tokens into NaN too (seen
    with left-padded ColQwen2 batches). Letting padded rows attend everywhere keeps them finite;
    they are dropped by the attention mask afterwards and real rows are unchanged.
    """
    mask = sdpa_mask(*args, **kwargs)
    if mask is None or mask.dtype != torch.bool:
        return mask
    return mask | ~mask.any(dim=-1, keepdim=True)


AttentionInterface.register(STREAMING_ATTENTION, streaming_attention_forward)
AttentionMaskInterface.register(STREAMING_ATTENTION, padding_safe_sdpa_mask)


def text_model(model: Any) -> Any:
    """The language model (decoder, or ModernVBERT's bidirectional encoder) holding ``layers``."""
    candidates = [model.get_decoder() if hasattr(model, "get_decoder") else None]
    inner = getattr(model, "model", None)
    candidates += [getattr(model, "language_model", None), getattr(inner, "text_model", None)]
    for candidate in candidates:
        if candidate is not None and hasattr(candidate, "layers"):
            return candidate
    raise CaptureError(f"cannot find the language model layers of {type(model).__name__}")


def decoder_attention_modules(model: Any) -> list[torch.nn.Module]:
    """The softmax self-attention module of every language-model layer, in layer order.

    Layers without one (Qwen3.5's Gated DeltaNet linear-attention layers) have no attention map
    and are skipped: statistics row ``l`` is the ``l``-th softmax-attention layer.
    """
    modules = []
    for layer in text_model(model).layers:
        attention = getattr(layer, "self_attn", None) or getattr(layer, "attn", None)
        if attention is not None:
            modules.append(attention)
    if not modules:
        raise CaptureError(f"{type(model).__name__} has no softmax attention layers to capture")
    return modules


def use_streaming_attention(model: Any) -> None:
    """Switch only the decoder to the streaming attention function; the vision tower keeps SDPA."""
    config = model.config
    if getattr(config, "text_config", None) is None:
        raise CaptureError(f"{type(model).__name__} has no text_config; cannot target its decoder")
    decoder_attention_modules(model)  # fails early when there is nothing to capture
    if config.text_config._attn_implementation == STREAMING_ATTENTION:
        return
    model.set_attn_implementation({"text_config": STREAMING_ATTENTION, "vision_config": "sdpa"})


@contextmanager
def capture_attention(
    model: Any,
    visual_mask: torch.Tensor,
    last_index: torch.Tensor,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Iterator[AttentionCapture]:
    """Capture statistics for the forward calls made inside the ``with`` block (one forward)."""
    modules = decoder_attention_modules(model)
    capture = AttentionCapture(
        layer_of={id(m): i for i, m in enumerate(modules)},
        visual_mask=visual_mask.bool(),
        last_index=last_index.long(),
        chunk_bytes=chunk_bytes,
    )
    token = _ACTIVE.set(capture)
    try:
        yield capture
    finally:
        _ACTIVE.reset(token)


@contextmanager
def decoder_attention(model: Any, implementation: str) -> Iterator[None]:
    """Run the decoder with another attention implementation inside the block, then restore."""
    config = model.config
    previous = {
        "text_config": config.text_config._attn_implementation,
        "vision_config": config.vision_config._attn_implementation,
    }
    model.set_attn_implementation({**previous, "text_config": implementation})
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def forward_with_attention_maps(
    model: Any, batch: dict
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """The naive reference: eager decoder with ``output_attentions=True``, all L maps kept.

    Used by the tests (ground truth) and the capture benchmark (what streaming replaces).
    """
    kept: dict[str, tuple[torch.Tensor, ...]] = {}

    def keep(_module: torch.nn.Module, _args: object, output: Any) -> None:
        kept["maps"] = output.attentions

    handle = text_model(model).register_forward_hook(keep)
    try:
        with decoder_attention(model, "eager"), torch.inference_mode():
            embeddings = model(**batch, output_attentions=True)
    finally:
        handle.remove()
    if not kept.get("maps"):
        raise CaptureError(f"{type(model).__name__} returned no attention maps")
    return embeddings, kept["maps"]


def stats_from_attention_maps(
    maps: list[torch.Tensor] | tuple[torch.Tensor, ...],
    visual_mask: torch.Tensor,
    last_index: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same [L, B, S] statistics from full [B, H, S, S] eager maps (the naive reference)."""
    cents, eoss = [], []
    rows = visual_mask.float()
    batch = torch.arange(visual_mask.shape[0], device=visual_mask.device)
    for layer_map in maps:
        probs = layer_map.float().mean(dim=1)  # [B, S, S]
        cents.append(torch.einsum("bi,bij->bj", rows, probs))
        eoss.append(probs[batch, last_index])
    return torch.stack(cents), torch.stack(eoss)
