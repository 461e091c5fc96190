"""How an embedded store lays out its vectors, and the size rule of the default ("auto") layout.

Three layouts, recorded in the store config (``fp16``, ``codes`` and ``layout``):

* **fp16** (``fp16`` true, no ``layout``): fp16 rows in segments, optionally with residual
  ``codes`` beside them in the candidate index; every store made before the auto layout;
* **codes only** (``fp16`` false): the candidate index's centroid + residual codes are the only
  copy of the vectors (pages are staged as fp16 rows until ``codes_min_tokens``);
* **auto** (``layout: "auto"``, the default of `VisualIndex.create` and ``vrag index``): fp16
  rows while the store is small, where exact search is fastest and size does not matter; once
  it holds `codes_threshold` vectors -- the size at which the store trains its candidate index
  by itself (``centroid_min_tokens``, 500,000 vectors by default) -- the training that builds
  the index also turns every page into ``codes`` (4-bit by default, `AUTO_CODES`) and drops the
  fp16 rows in the same commit. After that the store is a codes-only store (``fp16`` false),
  still marked ``layout: "auto"``.

`optimize(fp16=False)` converts any fp16 store the same way at any size; going back to fp16 is
impossible once the rows are gone (the codes are a lossy copy), which `fp16_gone` says.
"""

from __future__ import annotations

from typing import Any

AUTO = "auto"
# 4-bit residuals: retention@10 0.993 of the fp16 result on Cranfield with SAP, where 2-bit
# kept 0.957 (docs/retention.md); 66 B a vector at D = 128, within the 9,000 B/page target
AUTO_CODES = "4bit"
# the default of `StoreOptions.centroid_min_tokens`, used when that option turns the
# automatic training off (``optimize`` then still converts an auto store past this size)
DEFAULT_THRESHOLD = 500_000


def is_auto(config: dict[str, Any]) -> bool:
    """Whether the store picks its layout by size."""
    return config.get("layout") == AUTO


def keeps_fp16(config: dict[str, Any]) -> bool:
    """Whether the store (still) keeps fp16 rows beside its index."""
    return config.get("fp16", True) is not False


def codes_threshold(centroid_min_tokens: int) -> int:
    """Vectors from which an auto store keeps codes instead of fp16 rows: where the candidate
    index gets trained automatically (``centroid_min_tokens``; its default when that is off)."""
    return centroid_min_tokens if centroid_min_tokens > 0 else DEFAULT_THRESHOLD


def converts(config: dict[str, Any], n_tokens: int, centroid_min_tokens: int) -> bool:
    """The size rule: an auto store that still keeps fp16 rows and holds at least
    `codes_threshold` vectors turns them into codes at its next (re)training."""
    return (
        is_auto(config) and keeps_fp16(config) and n_tokens >= codes_threshold(centroid_min_tokens)
    )


def codes_only(config: dict[str, Any], codes: str | None) -> dict[str, Any]:
    """``config`` after a conversion to codes only (``codes`` or the config's, else 4-bit)."""
    chosen = codes or config.get("codes") or "none"
    return {**config, "fp16": False, "codes": AUTO_CODES if chosen == "none" else chosen}


def fp16_gone(root: Any, codes: str) -> str:
    """Why a codes-only store cannot get fp16 vectors back."""
    return (
        f"{root} keeps only its {codes} codes: the fp16 vectors were dropped when it switched to "
        "codes and cannot be rebuilt from them (the codes are a lossy copy). Index the documents "
        "again into a new index with --fp16 to have them"
    )


def describe(config: dict[str, Any]) -> dict[str, Any]:
    """The layout as `vrag info` shows it."""
    return {
        "rule": AUTO if is_auto(config) else "fixed",
        "fp16": keeps_fp16(config),
        "codes": str(config.get("codes", "none")),
    }


def choose_layout(
    codes: str | None, fp16: bool | None, *, embedded: bool = True
) -> tuple[str, bool, str]:
    """``(codes, fp16, rule)`` of a new index from what the user asked (None: not asked):
    neither -> auto with `AUTO_CODES`; ``codes="none"`` or ``fp16=True`` -> fp16 rows for good;
    ``fp16=False`` -> codes only. A Qdrant store holds full vectors: always fixed fp16."""
    if codes is not None and codes not in ("none", "4bit", "2bit", "1bit"):
        raise ValueError(f"codes must be none, 4bit, 2bit or 1bit, got {codes!r}")
    if fp16 is False:
        if not embedded or codes == "none":
            raise ValueError(
                "fp16=False keeps the vectors only as residual codes: it needs codes 4bit, "
                f"2bit or 1bit and the embedded store (got codes={codes!r}"
                + ("" if embedded else ", a remote store")
                + ")"
            )
        return codes or AUTO_CODES, False, "fixed"
    if fp16 is True or not embedded or codes == "none":
        return codes or "none", True, "fixed"
    return codes or AUTO_CODES, True, AUTO
