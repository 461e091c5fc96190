"""`vrag index` (with its checks, warnings and report) and `vrag methods`."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from vrag_compress.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_PARTIAL,
    JsonOpt,
    StoreOpt,
    emit_json,
    err,
    fail,
    out,
)
from vrag_compress.cli.options import (
    build_compressor,
    check_choice,
    check_ratio,
    parse_metadata,
    parse_method,
)
from vrag_compress.defaults import (
    COMMAND_MODEL,
    DEFAULT_BATCH_SIZE,
    DEFAULT_DPI,
    DEFAULT_IMAGE_MAX_SIDE,
    DEFAULT_METHOD,
    DEFAULT_RATIO,
    DEFAULT_RENDERER,
    RENDERERS,
)
from vrag_compress.progress import counted


def index(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(
        ..., metavar="PATHS...", help="PDF or image files, or folders of them."
    ),
    index_dir: Path = typer.Option(..., "--index", "-i", help="Index folder (created if missing)."),
    model: str = typer.Option(
        COMMAND_MODEL,
        help="Hub id or local folder of a Col* model; minilm (real offline encoder of the page "
        "text); auto (the best Col* model available here, else minilm); tiny-colqwen2 / "
        "tiny-colpali (random, tests only); st:PATH_OR_ID (a Sentence Transformers "
        "MultiVectorEncoder).",
    ),
    method: str = typer.Option(
        DEFAULT_METHOD,
        help="Compression method (see `vrag methods`), optionally with parameters: "
        "uot:epsilon=0.01:rho=3.",
    ),
    param: list[str] = typer.Option(
        [], "--param", "-p", help="KEY=VALUE parameter of the method (repeat), e.g. epsilon=0.01."
    ),
    ratio: float = typer.Option(
        DEFAULT_RATIO, help="Keep ratio in (0, 1]: 0.1 stores ~10% of the vectors."
    ),
    profile: Path | None = typer.Option(
        None, help="SAP layer-window profile JSON written by `vrag calibrate`."
    ),
    device: str = typer.Option("auto", help="auto, cpu, cuda or mps."),
    dtype: str = typer.Option(
        "auto",
        help="Col* encoder weights: auto (bf16 on GPUs, fp32 on the CPU), fp32 or bf16 "
        "(about 2x faster on CPUs with bf16 support). Recorded in the index.",
    ),
    speedup: str = typer.Option(
        "none",
        help="Col* CPU encoding option: none or int8 (dynamic int8 linear layers, about 2.5x "
        "faster, page vectors within cosine 0.99). Recorded in the index.",
    ),
    batch_size: int = typer.Option(
        DEFAULT_BATCH_SIZE, help="Pages per encode/compress/commit batch."
    ),
    metadata: list[str] = typer.Option([], "--metadata", "-m", help="KEY=VALUE on every page."),
    no_images: bool = typer.Option(
        False, "--no-images", help="Store only references to the source files, not page images."
    ),
    image_max_side: int = typer.Option(
        DEFAULT_IMAGE_MAX_SIDE,
        "--image-max-side",
        min=64,
        help="Longest side of stored page images, in pixels.",
    ),
    dpi: int = typer.Option(
        DEFAULT_DPI, "--dpi", min=36, max=600, help="PDF rendering resolution."
    ),
    renderer: str = typer.Option(DEFAULT_RENDERER, help="PDF renderer: pypdfium2 or pdf2image."),
    store: str | None = StoreOpt,
    ocr: str = typer.Option(
        "auto",
        help="Page text by OCR: auto (pages without a text layer), always, never. "
        "Needs the [ocr] extra.",
    ),
    codes: str | None = typer.Option(
        None,
        "--codes",
        help="Residual codes the candidate index keeps per vector: none, 4bit, 2bit or 1bit "
        "(new index only) [default: 4bit once the index is large, see --fp16].",
    ),
    fp16: bool | None = typer.Option(
        None,
        "--fp16/--no-fp16",
        help="Layout by size when neither is given: fp16 vectors while the index holds fewer "
        "than 500,000 (exact search is fastest there), then only the --codes (4bit unless "
        "given; --codes none keeps fp16). --fp16 keeps fp16 vectors for good; --no-fp16 keeps "
        "only the codes, a smaller index whose searches rerank decoded vectors (the first "
        "65,536 vectors stay fp16 until the codes are trained on them). New embedded index "
        "only; kept in the index.",
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Render, encode and compress on a Ray cluster (the [ray] extra): auto (the "
        "cluster Ray finds, e.g. RAY_ADDRESS), host:port, ray://host:10001, or local (start "
        "one here). Commits stay in this process; see docs/distributed.md.",
    ),
    ray_timeout: float = typer.Option(
        600.0,
        "--ray-timeout",
        min=1.0,
        metavar="SECONDS",
        help="With --ray: stop with an error when no batch comes back for this long (a hung "
        "worker, a stopped node); the committed pages stay and a re-run resumes.",
    ),
    passwords_file: Path | None = typer.Option(
        None,
        "--passwords-file",
        metavar="FILE",
        help="Passwords of protected PDFs, read from FILE (never typed in the command, never "
        'stored): a JSON object {"name.pdf": "password"} or name<TAB>password lines; a name '
        "matches a file's name or path. Default: the file VRAG_PDF_PASSWORDS names, if set.",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Index files into a compressed multi-vector index (re-running skips unchanged files;
    Ctrl-C keeps the committed pages and a re-run resumes)."""
    page_ocr = _page_ocr(ocr)
    passwords = _passwords(passwords_file)
    if ray_address is not None:
        _check_ray()
    from vrag_compress.encoders import ModelNotFoundError, ReadsPageText
    from vrag_compress.encoders.select import is_text_model
    from vrag_compress.index import VisualIndex
    from vrag_compress.index_config import ImageOptions, IndexOptions
    from vrag_compress.ingest.ocr import NeedsOcrError

    extra = parse_metadata(metadata)
    check_choice(renderer, RENDERERS, "--renderer")
    if codes is not None:
        check_choice(codes, ("none", "4bit", "2bit", "1bit"), "--codes")
    if fp16 is False and (codes == "none" or store is not None):
        raise typer.BadParameter(
            "needs --codes 4bit, 2bit or 1bit and the embedded store (no --store)",
            param_hint="--no-fp16",
        )
    _check_model_name(model)
    compressor = _compressor(*parse_method(method, param), check_ratio(ratio), profile)
    encoder_options = _encoder_options(dtype, speedup, model)
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise typer.BadParameter(
            f"no such file or folder: {', '.join(missing)}", param_hint="PATHS"
        )
    _require_extras(store, renderer)
    fresh_folder = store is None and not index_dir.exists()
    existed = VisualIndex.exists(index_dir)
    if not existed and is_text_model(model):  # an existing index checks in `add`, unloaded
        try:
            page_ocr.check_text_sources(paths, model)
        except NeedsOcrError as error:
            fail(str(error))
    try:
        if existed:
            fresh_folder = False
            given = _explicit(ctx, "model") and model != "auto"
            vindex = VisualIndex.open(
                index_dir, model=model if given else None, device=device, store=store
            )
            _warn_ignored(ctx, vindex)
        else:
            encoder = None
            if model == "auto":
                encoder = _auto_encoder(device, batch_size, encoder_options)
            if encoder_options and isinstance(encoder, ReadsPageText):  # auto chose MiniLM
                err.print("[yellow]warning:[/] --dtype/--speedup ignored: MiniLM runs in fp32")
                dtype, speedup = "auto", "none"
            options = IndexOptions(
                batch_size=batch_size,
                dpi=dpi,
                renderer=renderer,
                images=ImageOptions(store=not no_images, max_side=image_max_side),
                dtype=dtype,
                speedup=speedup,
                codes=codes,
                fp16=fp16,
            )
            vindex = VisualIndex.create(
                index_dir,
                model=model,
                encoder=encoder,
                compressor=compressor,
                ratio=ratio,
                device=device,
                store=store,
                options=options,
            )
        with vindex:
            before = vindex.store.count()
            try:
                report = vindex.add(
                    paths,
                    metadata=extra,
                    progress=not json_out,
                    ocr=page_ocr,
                    ray=_ray_options(ray_address, ray_timeout, index_dir, json_out),
                    passwords=passwords,
                )
            except KeyboardInterrupt:
                _interrupted(vindex, vindex.store.count() - before)
            except Exception as error:
                if _disk_full(error):
                    _stopped_by_full_disk(vindex, vindex.store.count() - before, json_out)
                raise
            left_empty = vindex.store.count() == 0
    except typer.Exit:
        raise
    except ModelNotFoundError as error:
        fail(str(error))
    except NeedsOcrError as error:  # scans for a text encoder and no OCR engine: before any work
        if fresh_folder and index_dir.exists():
            shutil.rmtree(index_dir)
        fail(str(error))
    except KeyboardInterrupt:  # before any page was committed (loading the model)
        err.print("interrupted: nothing was indexed")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as error:  # surface any pipeline failure as one clear line
        message = f"{type(error).__name__}: {error}"
        if json_out:  # scripts reading stdout learn why too (a lost Ray cluster, a stall)
            emit_json({"index": str(index_dir), "error": message})
        fail(message)
    removed = bool(fresh_folder and report.failures and left_empty)
    if removed:  # every file failed: a first run leaves no empty index behind
        shutil.rmtree(index_dir)
    if json_out:
        emit_json(
            {
                "index": str(index_dir),
                **report.to_dict(),
                "index_created": not existed and not removed,
            }
        )
    else:
        _print_report(report)
    if removed:
        err.print(f"nothing could be indexed, so no index was created at {index_dir}")
    if report.failures:
        raise typer.Exit(EXIT_PARTIAL)


def _require_extras(store: str | None, renderer: str) -> None:
    """The optional packages `--store URL` and `--renderer pdf2image` need, checked before any
    model loads: a missing one is one line naming the extra (exit 1), not a failure per file."""
    from vrag_compress.extras import missing_dependency_message
    from vrag_compress.store.open import backend, is_store_url

    try:
        if store is not None and is_store_url(store):
            backend(store)  # imports the backend's client library
        if renderer == "pdf2image":
            import pdf2image  # noqa: F401
    except ImportError as error:
        fail(missing_dependency_message(error))


def _ray_options(address: str | None, timeout_s: float, index_dir: Path, json_out: bool) -> Any:
    """`RayOptions` for ``--ray ADDRESS`` (None without it: index in this process). Under
    ``--json`` a lost head node, which Ray ends the driver for without a Python error, still
    gives the ``{"index", "error"}`` object on stdout (printed by the driver's watchdog)."""
    if address is None:
        return None
    from vrag_compress.distributed import RayOptions

    report = {"index": str(index_dir)} if json_out else None
    return RayOptions(address=address, stall_timeout_s=timeout_s, json_report=report)


def _check_ray() -> None:
    """`--ray` without Ray installed: one line naming the extra, before any index is made."""
    from vrag_compress.distributed import RayUnavailableError, import_ray

    try:
        import_ray()
    except RayUnavailableError as error:
        fail(str(error))


def _interrupted(vindex: Any, committed: int) -> None:
    """Ctrl-C during `add`: every finished batch is already committed; say so and exit 130."""
    err.print(
        f"interrupted: {committed} pages committed to {vindex.path} "
        f"({vindex.store.count()} in the index); run the same command again to resume "
        "(indexed pages are not redone)"
    )
    raise typer.Exit(EXIT_INTERRUPTED)


def _disk_full(error: BaseException | None) -> bool:
    """Whether ``error`` (or what caused it) is a full disk or an exhausted quota."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "database or disk is full" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def _stopped_by_full_disk(vindex: Any, committed: int, json_out: bool) -> None:
    """Say what is full and what was committed (every committed batch is consistent); exit 1."""
    free = shutil.disk_usage(vindex.path).free
    message = (
        f"disk full: no space left on the device holding {vindex.path} ({free:,} bytes free). "
        f"{committed} pages were committed before it ({vindex.store.count()} in the index, all "
        "consistent); free some space and run the same command again to resume"
    )
    if json_out:
        emit_json({"index": str(vindex.path), "error": message, "pages_committed": committed})
    fail(message)


def _auto_encoder(device: str, batch_size: int, options: dict[str, str]) -> Any:
    """`--model auto`: load the best encoder available here and say which one and why."""
    from vrag_compress.encoders import load_auto_encoder

    encoder, reason = load_auto_encoder(device=device, batch_size=batch_size, **options)
    err.print(f"[bold]encoder:[/] {escape(encoder.model_id)} ({escape(reason)})")
    return encoder


def _check_model_name(model: str) -> None:
    """A typo in --model (exit 2, with the closest known name) before any model loads."""
    from vrag_compress.encoders.select import unknown_model_hint

    hint = unknown_model_hint(model)
    if hint is not None:
        raise typer.BadParameter(hint, param_hint="--model")


def _encoder_options(dtype: str, speedup: str, model: str) -> dict[str, str]:
    """--dtype/--speedup checked as usage (exit 2) before any model loads."""
    from vrag_compress.encoders.select import is_text_model
    from vrag_compress.encoders.speedups import encoder_options

    try:
        options = encoder_options(dtype, speedup)
    except ValueError as error:
        hint = "--speedup" if "speedup" in str(error) else "--dtype"
        raise typer.BadParameter(str(error), param_hint=hint) from error
    if options and is_text_model(model):
        raise typer.BadParameter(
            f"--dtype/--speedup apply to Col* models; {model} runs in fp32", param_hint="--model"
        )
    return options


def _explicit(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _warn_ignored(ctx: typer.Context, vindex: Any) -> None:
    """Creation options given for an index that already exists have no effect: say so."""
    ignored = [
        f"--{name.replace('_', '-')}"
        for name in (
            "method",
            "param",
            "ratio",
            "profile",
            "batch_size",
            "no_images",
            "image_max_side",
            "dpi",
            "renderer",
            "dtype",
            "speedup",
            "codes",
            "fp16",
        )
        if _explicit(ctx, name)
    ]
    if ignored:
        config = vindex.config
        err.print(
            f"[yellow]warning:[/] {', '.join(ignored)} ignored: {vindex.path} already exists and "
            f"uses {config.compressor} {escape(json.dumps(config.compressor_params))}; "
            "index into a new folder to change them"
        )


def _print_report(report: Any) -> None:
    out.print(
        f"indexed {counted(report.pages_indexed, 'page')} from "
        f"{counted(len(report.documents_indexed), 'document')}, skipped "
        f"{counted(len(report.documents_skipped), 'unchanged document')} "
        f"({counted(report.pages_skipped, 'page')}) in {report.seconds:.1f}s",
        soft_wrap=True,  # one line however narrow the terminal (scripts read it)
    )
    if report.unsupported_files:
        kinds = sorted(report.unsupported_files.items(), key=lambda kind: (-kind[1], kind[0]))
        out.print(
            f"skipped {counted(sum(report.unsupported_files.values()), 'unsupported file')} "
            f"in the folders ({', '.join(f'{n} {suffix}' for suffix, n in kinds)}): not PDFs "
            "or images",
            markup=False,
            soft_wrap=True,
        )
    for failure in report.failures:
        where = failure["path"] + (f" page {failure['page_no']}" if "page_no" in failure else "")
        fix = f" ({cli_fix(failure['fix'])})" if failure.get("fix") else ""
        err.print(f"[yellow]failed:[/] {escape(where)}: {escape(failure['reason'] + fix)}")
    ocr = report.ocr_summary()
    if ocr["pages"]:
        share = ocr["seconds"] / report.seconds if report.seconds else 0.0
        out.print(
            f"OCR: {ocr['pages']} pages in {ocr['seconds']:.1f}s "
            f"({ocr['seconds'] / ocr['pages']:.2f}s/page, {share:.0%} of indexing time)",
            soft_wrap=True,
        )
    for failure in ocr["failures"]:
        err.print(
            f"[yellow]OCR failed (page indexed without text):[/] {escape(failure['path'])} "
            f"page {failure['page_no']}: {escape(failure['reason'])}"
        )


def cli_fix(fix: str) -> str:
    """A failure's "how to fix" as this command takes it: a protected PDF's password goes in
    the passwords file, not in a ``password=`` argument."""
    return fix.replace(
        "pass password=...", "give its password with --passwords-file FILE (or VRAG_PDF_PASSWORDS)"
    ).replace("pass the right password=...", "correct its password in the passwords file")


def _passwords(path: Path | None) -> dict[str, str] | None:
    """``--passwords-file`` (else the file VRAG_PDF_PASSWORDS names), read before any work; a bad
    file is a usage error naming the file and line, never a password."""
    from vrag_compress.ingest.passwords import (
        PASSWORDS_ENV,
        PasswordFileError,
        load_passwords,
        passwords_from_env,
    )

    try:
        return load_passwords(path) if path is not None else passwords_from_env()
    except PasswordFileError as error:
        hint = "--passwords-file" if path is not None else PASSWORDS_ENV
        raise typer.BadParameter(str(error), param_hint=hint) from None


def _page_ocr(mode: str) -> Any:
    """The `--ocr` choice as a `PageOcr`; `always` without the [ocr] extra fails before indexing."""
    from vrag_compress.ingest.ocr import OcrUnavailableError, PageOcr

    try:
        page_ocr = PageOcr(mode)
        page_ocr.prepare()
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--ocr") from error
    except OcrUnavailableError as error:
        fail(f"--ocr always: {error}")
    return page_ocr


def _compressor(method: str, params: dict[str, Any], ratio: float, profile: Path | None) -> Any:
    """The compressor for `--method/--param/--ratio/--profile`, checked now (exit 2 when bad);
    the model's layer window (without a profile) is filled in when the index is created."""
    from vrag_compress.compress import ProfileError

    try:
        return build_compressor(method, params, ratio, profile)
    except ProfileError as error:
        fail(f"--profile {profile}: {error}")


def methods(json_out: bool = JsonOpt) -> None:
    """List the compression methods `--method` accepts, with their parameters."""
    from vrag_compress.compress import capabilities, get_compressor, list_compressors

    rows = []
    for name in list_compressors():
        try:
            params = get_compressor(name).params
        except ValueError:
            params = {}
        rows.append({"name": name, "params": params, "needs": capabilities(name).to_dict()})
    if json_out:
        emit_json(rows)
        return
    for row in rows:
        out.print(f"[bold]{row['name']}[/]  {json.dumps(row['params'])}")
    out.print(
        "Methods with a ratio (except pool and adaptive-eos) also take budget=fixed|adaptive, "
        "e.g. --method uot:budget=adaptive (the same total budget, spread by page content)."
    )
