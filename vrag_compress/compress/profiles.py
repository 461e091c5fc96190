"""SAP layer-window profiles: the built-in paper windows and calibrated JSON files.

Lives under `compress` (not `calibrate`) because SAP reads profiles and calibration uses SAP;
`vrag_compress.calibrate` re-exports these names.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vrag_compress.compress.base import CompressionError

PROFILE_FORMAT = 1


class ProfileError(CompressionError):
    """A calibration profile is missing, unreadable or inconsistent."""


class UncalibratedWindowWarning(UserWarning):
    """SAP uses the uncalibrated fallback layer window: the model has no calibration profile."""


@dataclass(frozen=True)
class CalibrationProfile:
    """Which decoder layers SAP averages for one backbone, and the evidence for that choice.

    window: 0-based decoder layer indices (contiguous, ascending), all < n_layers.
    sr_curve: per-layer Score Retention (length n_layers) when calibrated here, else None.
    """

    model_id: str
    n_layers: int
    window: tuple[int, ...]
    sr_curve: tuple[float, ...] | None = None
    gamma: float = 0.1
    rho: float = 0.2
    n_pairs: int = 0
    source: str = "calibrated"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "window", tuple(int(layer) for layer in self.window))
        if self.sr_curve is not None:
            object.__setattr__(self, "sr_curve", tuple(float(v) for v in self.sr_curve))
        where = f"profile for {self.model_id!r}"
        if self.n_layers < 1:
            raise ProfileError(f"{where}: n_layers must be >= 1, got {self.n_layers}")
        if not self.window:
            raise ProfileError(f"{where}: empty layer window")
        if min(self.window) < 0 or max(self.window) >= self.n_layers:
            raise ProfileError(
                f"{where}: window {list(self.window)} is outside layers 0..{self.n_layers - 1}"
            )
        if self.sr_curve is not None and len(self.sr_curve) != self.n_layers:
            raise ProfileError(
                f"{where}: sr_curve has {len(self.sr_curve)} values for {self.n_layers} layers"
            )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["window"] = list(self.window)
        data["sr_curve"] = None if self.sr_curve is None else list(self.sr_curve)
        data["format"] = PROFILE_FORMAT
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CalibrationProfile:
        required = {"model_id", "n_layers", "window"}
        missing = required - set(data)
        if missing:
            raise ProfileError(f"profile is missing {sorted(missing)}; got keys {sorted(data)}")
        known = {"model_id", "n_layers", "window", "sr_curve", "gamma", "rho", "n_pairs", "source"}
        extra = {k: v for k, v in data.items() if k not in known and k != "format"}
        kwargs = {k: v for k, v in data.items() if k in known}
        try:
            return cls(**kwargs, extra={**data.get("extra", {}), **extra})
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ProfileError):
                raise
            raise ProfileError(f"invalid profile: {exc}") from exc

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> CalibrationProfile:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise ProfileError(f"profile file not found: {path}") from exc
        except json.JSONDecodeError as exc:
            raise ProfileError(f"profile {path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ProfileError(f"profile {path} must hold a JSON object")
        return cls.from_dict(data)


def _paper(model_id: str, n_layers: int, start: int, end: int) -> CalibrationProfile:
    return CalibrationProfile(
        model_id=model_id,
        n_layers=n_layers,
        window=tuple(range(start, end)),
        gamma=0.1,
        rho=0.2,
        n_pairs=500,
        source="SAP paper (arXiv 2601.20107)",
    )


# Paper windows. Patterns are tried in order; ColQwen2.5 shares Jina v4's 36-layer
# backbone but the paper calibrated only Jina v4, so it gets no built-in window.
BUILTIN_PROFILES: dict[str, CalibrationProfile] = {
    "colpali": _paper("vidore/colpali-v1.3", 18, 11, 15),
    "colqwen2": _paper("vidore/colqwen2-v1.0", 28, 18, 24),
    "jina-v4": _paper("jinaai/jina-embeddings-v4", 36, 26, 34),
    # the page-text encoder: calibrated here on Cranfield (docs/retention.md, 45 held-out queries)
    "minilm": CalibrationProfile(
        model_id="minilm",
        n_layers=6,
        window=(2, 3),
        sr_curve=(0.663, 0.707, 0.712, 0.738, 0.707, 0.621),
        n_pairs=45,
        source="calibrated on Cranfield (SR-guided, gamma 0.1)",
    ),
}
_PATTERNS = [
    ("jina-v4", re.compile(r"jina[-_]?embeddings[-_]?v4|jina[-_]?v4", re.I)),
    ("colqwen2", re.compile(r"colqwen2(?![._]?\d)", re.I)),  # not colqwen2.5 / colqwen2_5
    ("colpali", re.compile(r"colpali", re.I)),
]


def builtin_profile(model_id: str) -> CalibrationProfile | None:
    """The paper's profile for a model id or family name ("vidore/colqwen2-v1.0", "colpali"),
    or None when this backbone has none (calibrate it with `vrag calibrate`)."""
    if model_id in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[model_id]
    for key, pattern in _PATTERNS:
        if pattern.search(model_id):
            return BUILTIN_PROFILES[key]
    return None


def resolve_profile(profile: str | Path | dict | CalibrationProfile) -> CalibrationProfile:
    """A profile from a built-in name or model id, a JSON file path, a dict, or a profile."""
    if isinstance(profile, CalibrationProfile):
        return profile
    if isinstance(profile, dict):
        return CalibrationProfile.from_dict(profile)
    if isinstance(profile, (str, Path)):
        text = str(profile)
        if text.endswith(".json") or Path(text).is_file():
            return CalibrationProfile.load(text)
        found = builtin_profile(text)
        if found is not None:
            return found
        raise ProfileError(
            f"no built-in SAP profile for {text!r} (built-ins: {sorted(BUILTIN_PROFILES)}); "
            "pass layers=[...] or a profile JSON from `vrag calibrate`"
        )
    raise ProfileError(f"profile must be a name, path, dict or CalibrationProfile, got {profile!r}")


def fallback_window(n_layers: int, rho: float = 0.2) -> tuple[int, ...]:
    """The uncalibrated window: ceil(rho*L) layers ending 2 layers before the last.

    For backbones with fewer than 3 layers the window ends at layer 0 (the only choice left).
    """
    if n_layers < 1:
        raise ProfileError(f"cannot pick a layer window for {n_layers} layers")
    width = math.ceil(rho * n_layers)
    end = max(1, n_layers - 2)
    return tuple(range(max(0, end - width), end))


def profile_to_window(name: str, cls: type, params: dict[str, Any]) -> dict[str, Any]:
    """``profile=`` -> ``layers`` (+ ``n_layers``), checked against explicit values."""
    params = dict(params)
    profile = params.pop("profile")
    if profile is None:
        return params
    if not getattr(cls, "uses_window", False):
        raise CompressionError(f"{name} takes no SAP layer-window profile")
    found = resolve_profile(profile)
    layers = params.get("layers")
    if layers is not None and tuple(layers) != found.window:
        raise ProfileError(
            f"{name}: layers {list(layers)} disagree with the profile window "
            f"{list(found.window)}; pass one of them"
        )
    n_layers = params.get("n_layers")
    if n_layers is not None and n_layers != found.n_layers:
        raise ProfileError(
            f"{name}: n_layers={n_layers} disagrees with the profile ({found.n_layers})"
        )
    params["layers"] = list(found.window)
    if takes_param(cls, "n_layers"):
        params["n_layers"] = found.n_layers
    return params


def takes_param(cls: type, param: str) -> bool:
    """Whether the class's constructor has a parameter named ``param``."""
    return param in inspect.signature(cls).parameters
