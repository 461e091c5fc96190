"""Log lines of bounded length: a request path or id of thousands of characters is logged cut.

Uvicorn's access log writes the whole request target; an attacker could otherwise fill the log
(or hide what follows) with one long URL. `shorten_request_logs` installs `ShortArgs` on the
server's loggers once; uvicorn's logging setup keeps logger filters.
"""

from __future__ import annotations

import logging

MAX_LOGGED_CHARS = 200
LOGGERS = ("uvicorn.access", "uvicorn.error", "vrag_compress.serve.app", "vrag_compress.serve.jobs")


def shorten(text: str, limit: int = MAX_LOGGED_CHARS) -> str:
    """``text`` when short, else its start and how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[{len(text):,} characters]"


class ShortArgs(logging.Filter):
    """Cuts every string argument of a log record to `MAX_LOGGED_CHARS` (a message without
    arguments to four times that)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(shorten(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {
                k: shorten(v) if isinstance(v, str) else v for k, v in record.args.items()
            }
        if not record.args and isinstance(record.msg, str):
            record.msg = shorten(record.msg, 4 * MAX_LOGGED_CHARS)
        return True


def shorten_request_logs() -> None:
    """Install `ShortArgs` on the server's loggers (once)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ShortArgs) for f in logger.filters):
            logger.addFilter(ShortArgs())
