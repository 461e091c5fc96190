"""`vrag mcp`: one index as an MCP server for agents (the ``[mcp]`` extra; docs/mcp.md)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from vrag_compress.cli.app import app
from vrag_compress.cli.common import StoreOpt, fail, open_index

if TYPE_CHECKING:
    from vrag_compress.index import VisualIndex

log = logging.getLogger(__name__)


@app.command()
def mcp(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    http: bool = typer.Option(
        False, "--http", help="Serve streamable HTTP at /mcp instead of stdin/stdout."
    ),
    host: str = typer.Option(
        "127.0.0.1", help="With --http: address to bind; others than loopback need a key."
    ),
    port: int = typer.Option(8765, help="With --http: TCP port."),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="VRAG_API_KEY",
        help="With --http: every request must send 'Authorization: Bearer KEY' (needed on a "
        "non-loopback --host).",
        show_envvar=True,
    ),
    allowed_host: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="With --http: also accept requests for this host name, e.g. a proxy's "
        "(repeatable; the --host value, localhost and IP addresses are always accepted).",
    ),
    device: str = typer.Option("auto", help="auto, cpu, cuda or mps."),
    store: str | None = StoreOpt,
) -> None:
    """Serve an index to agents over the Model Context Protocol: read-only tools (search,
    get_page, list_documents, info) and page images as resources (vrag://pages/DOC/PAGE)."""
    try:
        from vrag_compress.serve import HostError
        from vrag_compress.serve.mcp_server import (
            build_server,
            guarded_http_app,
            run_http,
            run_stdio,
        )
    except ImportError as error:
        from vrag_compress.extras import missing_dependency_message

        fail(f"vrag mcp: {missing_dependency_message(error)}")
    if not http and (allowed_host or host != "127.0.0.1"):
        raise typer.BadParameter(
            "--host and --allowed-host are for --http (stdio has no network side)",
            param_hint="--http",
        )
    index = open_index(index_dir, readonly=True, device=device, store=store)
    server = build_server(index)
    try:
        if not http:
            _preload(index)
            run_stdio(server)
            return
        try:
            app_ = guarded_http_app(
                server, host=host, api_key=api_key or None, allowed_hosts=list(allowed_host)
            )
        except HostError as error:
            raise typer.BadParameter(str(error), param_hint="--host") from error
        _preload(index)
        run_http(app_, host=host, port=port)
    finally:
        index.close()


def _preload(index: VisualIndex) -> None:
    """Load the query encoder in the background, so the first search does not wait for it
    while the client's handshake does not wait either (a failure shows on that search)."""

    def load() -> None:
        try:
            index.query_encoder  # noqa: B018  (a property: loads the model)
        except Exception as error:  # reported again, in the CLI's words, by the first search
            log.warning("the query encoder did not load: %s", error)

    threading.Thread(target=load, name="vrag-mcp-preload", daemon=True).start()
