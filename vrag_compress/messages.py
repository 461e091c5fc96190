"""Words the CLI and the server both use for the same bad input, so they say the same thing."""

from __future__ import annotations

EMPTY_QUERY = "the query is empty"
