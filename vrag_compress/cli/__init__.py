"""The `vrag` command. The everyday verbs (`indexing`, `searching`, `maintenance`) are registered
below; each other sibling module registers its commands on `app`. `vrag bench ...` comes from the
vrag-compress-bench distribution through an entry point (`cli.plugins`), imported only when it runs.

Heavy imports (torch, transformers, faiss) happen inside the command functions.
"""

from __future__ import annotations

import sys

from vrag_compress.cli import (  # noqa: F401  (importing calibrate, estimate registers them)
    calibrate,
    estimate,
    indexing,
    maintenance,
    searching,
)
from vrag_compress.cli.app import app

# The everyday verbs, registered here in the order `vrag --help` lists them.
for _verb in (
    indexing.index,
    indexing.methods,
    searching.search,
    searching.ask,
    maintenance.info,
    maintenance.optimize,
    maintenance.verify,
    maintenance.delete,
    searching.show,
):
    app.command()(_verb)

from vrag_compress.cli import mcp, migrate, onnx, serve  # noqa: E402, F401  (listed after the verbs)


def main() -> None:
    """The `vrag` entry point: a missing optional dependency is one `error:` line and exit 1,
    whichever command met it, never a traceback."""
    try:
        app()
    except ImportError as error:
        from vrag_compress.extras import missing_dependency_message

        print(f"error: {missing_dependency_message(error)}", file=sys.stderr)
        sys.exit(1)
