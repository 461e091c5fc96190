"""Shared fixtures: the real data folder (fail loudly when missing, never skip)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from vrag_compress.testing import shared_data  # noqa: E402, F401
