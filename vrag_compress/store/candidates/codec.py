"""Residual codes (PLAID-style): each token kept as its centroid id plus its residual to that
centroid quantised per dimension to 4, 2 or 1 bits (per-dimension quantile buckets, each decoded to
the mean of its bucket), so vectors can be rebuilt approximately for the rerank without fp16
copies. The compiled decode of the same packing is `kernels.decode_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vrag_compress.store.candidates.cells import assign, choose_k, train_centroids, training_sample

_ENCODE_CHUNK = 1 << 17  # tokens encoded per pass (bounds the temporary fp32 residuals)


@dataclass(frozen=True)
class ResidualCodec:
    """Per-dimension quantile buckets of residuals: ``cutoffs[D, 2^b - 1]``, ``weights[D, 2^b]``."""

    nbits: int
    cutoffs: np.ndarray
    weights: np.ndarray

    @classmethod
    def fit(cls, residuals: np.ndarray, nbits: int) -> ResidualCodec:
        """Buckets of equal mass per dimension, each decoded to the mean residual inside it."""
        if nbits not in (1, 2, 4):
            raise ValueError(f"residual codes need 1, 2 or 4 bits, got {nbits}")
        r = np.asarray(residuals, dtype=np.float32)
        if r.ndim != 2 or len(r) == 0 or r.shape[1] % (8 // nbits):
            raise ValueError(
                f"{nbits}-bit residual codes need [T ≥ 1, D] residuals with D a multiple of "
                f"{8 // nbits}, got shape {r.shape}"
            )
        levels = 1 << nbits
        qs = np.arange(1, levels) / levels
        cutoffs = np.quantile(r, qs, axis=0).T.astype(np.float32)  # [D, levels-1]
        buckets = _bucketise(r, cutoffs)
        dims = np.broadcast_to(np.arange(r.shape[1]), r.shape)
        sums = np.zeros((r.shape[1], levels), dtype=np.float64)
        counts = np.zeros((r.shape[1], levels), dtype=np.float64)
        np.add.at(sums, (dims.ravel(), buckets.ravel()), r.ravel())
        np.add.at(counts, (dims.ravel(), buckets.ravel()), 1.0)
        mids = np.concatenate(
            [cutoffs[:, :1], (cutoffs[:, 1:] + cutoffs[:, :-1]) / 2, cutoffs[:, -1:]], axis=1
        )
        weights = np.where(counts > 0, sums / np.maximum(counts, 1), mids).astype(np.float32)
        return cls(nbits, cutoffs, weights)

    @property
    def bytes_per_token(self) -> int:
        return self.cutoffs.shape[0] * self.nbits // 8

    def encode(self, tokens: np.ndarray, codes: np.ndarray, centroids: np.ndarray) -> np.ndarray:
        """Packed residual buckets ``[T, D·b/8]`` (uint8) of tokens against their centroids."""
        out = np.empty((len(tokens), self.bytes_per_token), dtype=np.uint8)
        for start in range(0, len(tokens), _ENCODE_CHUNK):
            part = np.asarray(tokens[start : start + _ENCODE_CHUNK], dtype=np.float32)
            resid = part - centroids[codes[start : start + len(part)].astype(np.int64)]
            out[start : start + len(part)] = _pack(_bucketise(resid, self.cutoffs), self.nbits)
        return out

    def decode(self, packed: np.ndarray, codes: np.ndarray, centroids: np.ndarray) -> np.ndarray:
        """Approximate tokens ``[T, D]`` float32: centroid plus each dimension's bucket mean,
        rounded to fp16 like stored vectors (so a copy into an fp16 store scores the same)."""
        buckets = _unpack(np.asarray(packed), self.nbits, self.cutoffs.shape[0])
        dims = np.arange(self.cutoffs.shape[0])
        out = centroids[codes.astype(np.int64)] + self.weights[dims, buckets]
        return out.astype(np.float16).astype(np.float32)


def code_roundtrip(tokens: np.ndarray, codes: str, *, seed: int = 0) -> tuple[np.ndarray, float]:
    """What a store keeping only centroid + residual codes would rerank with: the tokens after
    encoding with ``codes`` ("4bit"/"2bit"/"1bit"; "fp16" rounds to half precision), and the bytes
    stored per token."""
    x = np.asarray(tokens, dtype=np.float32)
    if codes == "fp16":
        return x.astype(np.float16).astype(np.float32), 2.0 * x.shape[1]
    nbits = {"4bit": 4, "2bit": 2, "1bit": 1}.get(codes)
    if nbits is None:
        raise ValueError(f"codes must be fp16, 4bit, 2bit or 1bit, got {codes!r}")
    k = choose_k(len(x))
    centroids = train_centroids(x[training_sample(len(x), k, seed=seed)], k, seed=seed)
    ids = assign(x, centroids)
    codec = ResidualCodec.fit(x - centroids[ids.astype(np.int64)], nbits)
    decoded = codec.decode(codec.encode(x, ids, centroids), ids, centroids)
    overhead = centroids.nbytes / len(x)  # the centroid table, shared by all tokens
    return decoded, codec.bytes_per_token + ids.dtype.itemsize + overhead


def _bucketise(r: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """Bucket index per value: how many of its dimension's cutoffs it exceeds."""
    out = np.zeros(r.shape, dtype=np.uint8)
    for j in range(cutoffs.shape[1]):  # 1, 3 or 15 thresholds: a loop over levels, not tokens
        out += r > cutoffs[:, j]
    return out


def _pack(buckets: np.ndarray, nbits: int) -> np.ndarray:
    per = 8 // nbits
    b = buckets.reshape(len(buckets), -1, per).astype(np.uint8)
    shifts = (np.arange(per, dtype=np.uint8) * nbits)[None, None, :]
    return np.bitwise_or.reduce(b << shifts, axis=2).astype(np.uint8)


def _unpack(packed: np.ndarray, nbits: int, dim: int) -> np.ndarray:
    per = 8 // nbits
    shifts = (np.arange(per, dtype=np.uint8) * nbits)[None, None, :]
    vals = (packed[:, :, None] >> shifts) & np.uint8((1 << nbits) - 1)
    return vals.reshape(len(packed), dim)
