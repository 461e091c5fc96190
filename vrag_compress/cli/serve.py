"""`vrag serve`: the REST API and web page over an index folder (the ``[serve]`` extra)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from vrag_compress.cli.app import app
from vrag_compress.cli.common import fail


@app.command()
def serve(
    index_dir: Path = typer.Argument(..., help="Index folder (created when missing, see --model)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind; others than loopback need a key."),
    port: int = typer.Option(8000, help="TCP port."),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="VRAG_API_KEY",
        help="Key for uploads and deletes (and every request on a non-loopback --host).",
        show_envvar=True,
    ),
    llm: str | None = typer.Option(
        None, help="PROVIDER:MODEL for the ask box (LangChain's init_chat_model, or env VRAG_LLM)."
    ),
    model: str | None = typer.Option(
        None,
        help="Model of a new index [default: auto, the best Col* checkpoint here, else minilm]; "
        "an existing index keeps its own.",
    ),
    cors_origin: list[str] = typer.Option(
        [], "--cors-origin", help="Allow browser pages from this origin (repeatable; default none)."
    ),
    allowed_host: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="Also accept requests for this host name, e.g. a proxy's (repeatable; the --host "
        "value, localhost and IP addresses are always accepted).",
    ),
    max_upload_mb: float = typer.Option(50.0, help="Largest accepted upload, in MB."),
    max_pages: int = typer.Option(300, help="Most pages accepted in one uploaded file."),
    ocr: str = typer.Option("auto", help="OCR for uploaded scans: auto, always, never."),
    device: str = typer.Option("auto", help="auto, cpu, cuda or mps."),
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        help="Server processes over the index: one indexes uploads, all answer reads "
        "(each loads the model).",
    ),
    header_timeout: float = typer.Option(
        10.0,
        "--header-timeout",
        min=0.1,
        help="Seconds a client has to send a request's headers (from connecting, or from the "
        "previous answer); slower ones get 408 and are closed.",
    ),
    body_timeout: float = typer.Option(
        30.0,
        "--body-timeout",
        min=0.1,
        help="Seconds a request body (an upload) may go without sending more; then 408.",
    ),
    max_connections: int | None = typer.Option(
        None,
        "--max-connections",
        min=1,
        help="Connections held at once; more are answered 503 and closed [default: the file "
        "descriptor limit less 128].",
    ),
    max_client_connections: int = typer.Option(
        64,
        "--max-client-connections",
        min=0,
        help="Connections one client address may hold at once (0: no limit; raise it or use 0 "
        "behind a proxy, where every client has the proxy's address).",
    ),
) -> None:
    """Serve a REST API (OpenAPI docs at /docs) and a web page to search, explain and upload."""
    try:
        from vrag_compress.serve import HostError, ServeConfig, run
    except ImportError as error:
        fail(f"vrag serve needs the [serve] extra: pip install 'vrag-compress[serve]' ({error})")
    if max_upload_mb <= 0 or max_pages < 1:
        raise typer.BadParameter("must be positive", param_hint="--max-upload-mb/--max-pages")
    config = ServeConfig(
        index_dir=index_dir,
        api_key=api_key or None,
        llm=llm or os.environ.get("VRAG_LLM") or None,
        cors_origins=list(cors_origin),
        allowed_hosts=list(allowed_host),
        max_upload_mb=max_upload_mb,
        max_pages=max_pages,
        ocr=ocr,
        device=device,
        model=model,
        workers=workers,
        header_timeout_s=header_timeout,
        body_timeout_s=body_timeout,
        max_connections=max_connections,
        max_client_connections=max_client_connections,
    )
    try:
        run(config, host=host, port=port)
    except HostError as error:
        raise typer.BadParameter(str(error), param_hint="--host") from error
    except Exception as error:  # index, model or chat model could not be opened
        fail(f"{type(error).__name__}: {error}")
