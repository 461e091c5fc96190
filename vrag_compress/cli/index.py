"""`vrag index | search | ask | info | verify | delete | show`: the everyday commands.

Exit codes: 0 success; 1 the command failed (message on stderr); 2 bad usage;
3 `index` finished but some files or pages failed (listed in the report).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vrag_compress.cli.app import app
from vrag_compress.cli.options import (
    build_compressor,
    check_choice,
    check_ratio,
    file_name,
    parse_filter,
    parse_metadata,
    parse_method,
    parse_pairs,
    parse_value,
    resolve_document,
    snippet,
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
from vrag_compress.encoders.errors import EncoderLoadError
from vrag_compress.messages import EMPTY_QUERY
from vrag_compress.progress import counted

if TYPE_CHECKING:
    from vrag_compress.index import VisualIndex
    from vrag_compress.store.base import SearchMode

EXIT_FAILED = 1
EXIT_PARTIAL = 3
EXIT_INTERRUPTED = 130

__all__ = ["parse_pairs", "parse_value", "snippet"]  # kept importable from here

out = Console()
err = Console(stderr=True, soft_wrap=True)  # messages keep whole paths on one line

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON on stdout.")


def fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(EXIT_FAILED)


def emit_json(payload: Any) -> None:
    typer.echo(json.dumps(payload, indent=2, default=str))


StoreOpt = typer.Option(
    None,
    "--store",
    help="Where the vectors live: qdrant://host:port/collection or qdrant+local://PATH "
    "[default: the embedded store in the index folder, or the store it points at].",
)


def open_index(
    path: Path, readonly: bool = False, device: str = "auto", store: str | None = None
) -> VisualIndex:
    from vrag_compress.index import VisualIndex, VisualIndexError
    from vrag_compress.store import StoreError

    try:
        return VisualIndex.open(path, readonly=readonly, device=device, store=store)
    except (VisualIndexError, StoreError) as error:
        fail(str(error))


@app.command()
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
        help="Residual codes the candidate index keeps per vector: none, 4bit or 2bit "
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
    json_out: bool = JsonOpt,
) -> None:
    """Index files into a compressed multi-vector index (re-running skips unchanged files;
    Ctrl-C keeps the committed pages and a re-run resumes)."""
    page_ocr = _page_ocr(ocr)
    if ray_address is not None:
        _check_ray()
    from vrag_compress.encoders import ModelNotFoundError, ReadsPageText
    from vrag_compress.index import VisualIndex
    from vrag_compress.index_config import ImageOptions, IndexOptions

    extra = parse_metadata(metadata)
    check_choice(renderer, RENDERERS, "--renderer")
    if codes is not None:
        check_choice(codes, ("none", "4bit", "2bit"), "--codes")
    if fp16 is False and (codes == "none" or store is not None):
        raise typer.BadParameter(
            "needs --codes 4bit or 2bit and the embedded store (no --store)",
            param_hint="--no-fp16",
        )
    compressor = _compressor(*parse_method(method, param), check_ratio(ratio), profile)
    encoder_options = _encoder_options(dtype, speedup, model)
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise typer.BadParameter(
            f"no such file or folder: {', '.join(missing)}", param_hint="PATHS"
        )
    _require_extras(store, renderer)
    fresh_folder = store is None and not index_dir.exists()
    try:
        if VisualIndex.exists(index_dir):
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
                    paths, metadata=extra, progress=not json_out, ocr=page_ocr, ray=ray_address
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
    except KeyboardInterrupt:  # before any page was committed (loading the model)
        err.print("interrupted: nothing was indexed")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as error:  # surface any pipeline failure as one clear line
        fail(f"{type(error).__name__}: {error}")
    removed = bool(fresh_folder and report.failures and left_empty)
    if removed:  # every file failed: a first run leaves no empty index behind
        shutil.rmtree(index_dir)
    if json_out:
        emit_json({"index": str(index_dir), **report.to_dict(), "index_created": not removed})
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
    for failure in report.failures:
        where = failure["path"] + (f" page {failure['page_no']}" if "page_no" in failure else "")
        err.print(f"[yellow]failed:[/] {escape(where)}: {escape(failure['reason'])}")
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


def _page_ocr(mode: str) -> Any:
    """The `--ocr` choice as a `PageOcr`; `always` without the [ocr] extra fails before indexing."""
    from vrag_compress.ocr import OcrUnavailableError, PageOcr

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


@app.command()
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


@app.command()
def search(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    query: str = typer.Argument(..., metavar="QUERY", help="The question or keywords."),
    k: int = typer.Option(5, "-k", min=1, help="Number of pages to return."),
    filter: list[str] = typer.Option([], "--filter", "-f", help="JSON filter or KEY=VALUE."),
    mode: str = typer.Option(
        "auto",
        help="auto, exact or two_stage (visual: MaxSim); text (BM25 over the page text, no "
        "model loaded); hybrid (both, fused by reciprocal rank, or by --alpha).",
    ),
    alpha: float | None = typer.Option(
        None,
        min=0.0,
        max=1.0,
        help="With --mode hybrid: weigh normalised scores, 0 = text only .. 1 = visual only, "
        "instead of reciprocal rank fusion.",
    ),
    fts_syntax: bool = typer.Option(
        False,
        "--fts-syntax",
        help='Read QUERY as SQLite FTS5 syntax ("exact phrase", NEAR(a b), prefix*, AND/OR/'
        "NOT) in the text and hybrid modes, instead of plain words.",
    ),
    store: str | None = StoreOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Search an index; prints the best pages: score, file, page and a snippet of the text."""
    from vrag_compress.store.validate import SEARCH_MODES  # the store's modes, named once

    check_choice(mode, SEARCH_MODES, "--mode")
    if alpha is not None and mode != "hybrid":
        raise typer.BadParameter("--alpha weighs the sides of --mode hybrid", param_hint="--alpha")
    if fts_syntax and mode not in ("text", "hybrid"):
        raise typer.BadParameter(
            "--fts-syntax reads the query of --mode text or hybrid", param_hint="--fts-syntax"
        )
    if not query.strip():
        raise typer.BadParameter(EMPTY_QUERY, param_hint="QUERY")
    where = parse_filter(filter)
    from vrag_compress.store import StoreError
    from vrag_compress.store.filters import FilterError

    with open_index(index_dir, readonly=True, store=store) as vindex:
        try:
            hits = vindex.search(
                query,
                k=k,
                filter=where,
                mode=cast("SearchMode", mode),  # checked against SEARCH_MODES above
                alpha=alpha,
                fts_syntax=fts_syntax,
            )
        except FilterError as error:  # one the backend cannot run (e.g. a string range on Qdrant)
            raise typer.BadParameter(str(error), param_hint="--filter") from error
        except (ValueError, EncoderLoadError, StoreError) as error:  # a damaged index, no tantivy
            fail(str(error))
    if json_out:
        emit_json({"query": query, "hits": [h.to_dict() for h in hits]})
        return
    fused = mode in ("text", "hybrid")
    table = Table("rank", "score")
    table.add_column("file", overflow="fold", min_width=20)  # the whole name, folded if narrow
    table.add_column("page")
    if fused:
        table.add_column("found by (rank, score)")
    table.add_column("snippet")
    for rank, hit in enumerate(hits, start=1):
        cells = [str(rank), f"{hit.score:.4g}", escape(file_name(hit)), str(hit.page_no)]
        if fused:
            cells.append(found_by(hit.components))
        table.add_row(*cells, escape(snippet(hit.text, query)))
    out.print(table)


def found_by(components: dict[str, dict[str, float]] | None) -> str:
    """``visual #2 (12.3), text #1 (4.56)``: where each side ranked and scored a hit."""
    parts = [
        f"{side} #{int(c['rank'])} ({c['score']:.3g})"
        for side, c in sorted((components or {}).items(), reverse=True)
    ]
    return ", ".join(parts)


@app.command()
def ask(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    question: str = typer.Argument(
        ..., metavar="QUESTION", help="The question to answer from the pages."
    ),
    llm: str = typer.Option(
        None, help="PROVIDER:MODEL for LangChain's init_chat_model (or env VRAG_LLM)."
    ),
    k: int = typer.Option(3, "-k", min=1, help="Pages to send to the model."),
    filter: list[str] = typer.Option([], "--filter", "-f", help="JSON filter or KEY=VALUE."),
    json_out: bool = JsonOpt,
) -> None:
    """Answer a question with a multimodal chat model, from the retrieved page images."""
    from vrag_compress import answering
    from vrag_compress.store import StoreError

    spec = llm or os.environ.get("VRAG_LLM")
    if not spec:
        fail(
            "no LLM configured: pass --llm PROVIDER:MODEL (e.g. openai:gpt-4o-mini) or set "
            "VRAG_LLM; needs `pip install langchain langchain-<provider>` and the provider's key"
        )
    try:
        chat_model = answering.load_chat_model(spec)
    except answering.NoChatModelError as error:
        fail(str(error))
    where = parse_filter(filter)
    with open_index(index_dir, readonly=True) as vindex:
        try:
            hits = vindex.search(question, k=k, filter=where)
        except (ValueError, EncoderLoadError, StoreError) as error:
            fail(str(error))
        if not hits:
            fail(f"{index_dir}: the index has no pages to answer from")
        pages = [answering.AnswerPage.from_hit(hit, image_base64=True) for hit in hits]
        try:
            result = answering.answer_pages(question, pages, chat_model)
        except Exception as error:  # provider errors: missing key, network, refused images
            fail(f"the chat model failed: {type(error).__name__}: {error}")
    # `page_no` kept beside `page` for scripts written against earlier versions of this output
    result["citations"] = [{**c, "page_no": c["page"]} for c in result["citations"]]
    result["pages"] = [
        {**answering.page_reference(n, page), "page_no": page.metadata.get("page")}
        for n, page in enumerate(pages, start=1)
    ]
    if json_out:
        emit_json(result)
        return
    out.print(result["answer"], markup=False)
    cited = result["citations"]
    out.print("\n[bold]Sources[/]" if cited else "\n[bold]Pages shown to the model[/]")
    for ref in cited or result["pages"]:
        out.print(f"[{ref['ref']}] {ref['label']}", markup=False)


@app.command()
def info(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    recall: bool = typer.Option(
        False,
        "--recall",
        help="Also measure the candidate index's recall@10 against exact search, with a "
        "sample of stored pages as queries (seconds to minutes on large indexes).",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Show the model, compressor, counts and size of an index, and list its documents."""
    with open_index(index_dir, readonly=True) as vindex:
        details = vindex.info(measure_recall=recall)
        docs: list[dict[str, Any]] = [
            {"doc_id": d.doc_id, "source": d.source, "n_pages": d.n_pages, "complete": d.complete}
            for d in vindex.documents()
        ]
    if json_out:
        emit_json({**details, "document_list": docs})
        return
    for key, value in details.items():
        out.print(f"[bold]{key}[/]: {escape(str(value))}")
    table = Table(title="documents", title_justify="left")
    table.add_column("file", overflow="fold", min_width=20)
    for column in ("pages", "doc id", "status"):
        table.add_column(column)
    for doc in docs:
        name = Path(doc["source"]).name if doc["source"] else "-"
        status = "complete" if doc["complete"] else "incomplete (re-run `vrag index` to resume)"
        table.add_row(escape(name), str(doc["n_pages"] or "?"), doc["doc_id"], status)
    out.print(table)


def _document(vindex: Any, name: str) -> str:
    """The doc id for a doc id, file name or source path given on the command line."""
    try:
        return resolve_document(vindex.documents(), name)
    except LookupError as error:
        fail(f"{vindex.path}: {error}")


@app.command()
def optimize(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    codes: str | None = typer.Option(
        None,
        "--codes",
        help="Residual codes kept per vector by the candidate index: none, 4bit or 2bit "
        "[default: keep the index's setting].",
    ),
    fp16: bool | None = typer.Option(
        None,
        "--fp16/--no-fp16",
        help="--no-fp16 converts the index in place to keep only its --codes (4bit unless "
        "given or kept in the index), dropping the fp16 vectors; crash-safe (a kill leaves the "
        "old layout or the new one). --fp16 keeps the fp16 vectors for good (an index whose "
        "vectors are already codes cannot get them back) [default: the index's layout].",
    ),
    retrain: bool = typer.Option(
        False,
        "--retrain",
        help="Retrain the codes of an index without fp16 vectors even when its size does not "
        "call for it (re-encodes decoded vectors: a little precision is lost each time).",
    ),
    recall_target: float | None = typer.Option(
        None,
        "--recall-target",
        min=0.0,
        max=1.0,
        help="recall@10 against exact search the candidate index tunes its probes and rerank "
        "depth for, measured on pseudo-queries of the collection; kept in the index "
        "[default: the index's setting, 0.97]; 0: the fixed size rule.",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Compact an index and retrain its centroid candidate index (searches keep working).

    An index without fp16 vectors only compacts once its codes exist, unless it grew 4× since
    they were trained, --codes changes or --retrain asks. An index with the default layout
    switches to codes here once it holds 500,000 vectors."""
    if codes is not None and codes not in ("none", "4bit", "2bit"):
        raise typer.BadParameter("use none, 4bit or 2bit", param_hint="--codes")
    from vrag_compress.index import VisualIndexError
    from vrag_compress.store import StoreError

    with open_index(index_dir) as vindex:
        try:
            details = vindex.optimize(
                codes=codes, retrain=retrain, recall_target=recall_target, fp16=fp16
            )
        except (VisualIndexError, StoreError) as error:
            fail(str(error))
    if json_out:
        emit_json(details)
        return
    for key, value in details.items():
        out.print(f"[bold]{key}[/]: {escape(str(value))}")


@app.command()
def verify(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    json_out: bool = JsonOpt,
) -> None:
    """Check checksums and catalog/segment agreement; exit 1 when a problem is found."""
    from vrag_compress.store import StoreError

    with open_index(index_dir, readonly=True) as vindex:
        try:
            report = vindex.verify()
        except StoreError as error:
            fail(str(error))
    payload = {"ok": report.ok, "pages": report.pages, "problems": list(report.problems)}
    if json_out:
        emit_json(payload)
    elif report.ok:
        out.print(f"[green]ok[/]: {report.pages} pages verified")
    else:
        for problem in report.problems:
            err.print(f"[red]problem:[/] {escape(problem)}")
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def delete(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    document: str = typer.Argument(
        ..., metavar="DOCUMENT", help="File name, source path or doc id (see `vrag info`)."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Delete one document's pages from an index."""
    with open_index(index_dir) as vindex:
        doc_id = _document(vindex, document)
        removed = vindex.delete(doc_id)
    if removed == 0:
        if json_out:
            emit_json({"doc_id": doc_id, "pages_deleted": 0})
        fail(f"no document {doc_id!r} in {index_dir}")
    if json_out:
        emit_json({"doc_id": doc_id, "pages_deleted": removed})
    else:
        out.print(f"deleted {removed} pages of {doc_id}", markup=False, soft_wrap=True)


@app.command()
def show(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    document: str = typer.Argument(
        ..., metavar="DOCUMENT", help="File name, source path or doc id (see `vrag info`)."
    ),
    page: int = typer.Argument(..., metavar="PAGE", min=1, help="Page number (1-based)."),
    out_path: Path = typer.Option(Path("page.png"), "--out", "-o", help="PNG to write."),
    query: str | None = typer.Option(
        None, "--query", "-q", help="Draw where this query matched the page (a heatmap)."
    ),
    overlay: bool = typer.Option(
        False, "--overlay", help="With --query: also draw the kept/merged patches."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Draw a page with the patches compression kept (SAP) or merged (UOT), or with --query the
    heatmap of each patch's share of the match score and the matched regions."""
    from vrag_compress.visualize import (
        draw_heatmap,
        draw_layout,
        layout_legend_text,
        with_layout_legend,
    )

    with open_index(index_dir, readonly=True) as vindex:
        doc_id = _document(vindex, document)
        summary: dict[str, Any] = {"out": str(out_path), "doc_id": doc_id, "page_no": page}
        try:
            image = vindex.page_image(doc_id, page)
            explanation = vindex.explain(query, doc_id, page) if query else None
        except (KeyError, FileNotFoundError) as error:
            fail(str(error).strip("'\""))
        except (ValueError, EncoderLoadError) as error:
            fail(str(error))
        layout = vindex.page_layout(doc_id, page)
    summary["layout"] = None if layout is None else ("kept" if "kept" in layout else "assignment")
    if explanation is None and layout is None:
        drawn = image
        summary["note"] = (
            "no patch layout is stored for this page (text encoders such as minilm, or models "
            "without a patch grid); wrote the page image as is"
        )
        if not json_out:
            err.print(f"note: {summary['note']}", markup=False)
    elif explanation is None:
        assert layout is not None  # the branch above took the page without either
        drawn = with_layout_legend(draw_layout(image, layout), layout)
        summary["legend"] = layout_legend_text(layout)
    elif explanation.heat is None:
        fail(f"page {page} of {doc_id} has no patch layout to draw a heatmap on")
    else:
        drawn = draw_heatmap(
            image, explanation.heat, layout=layout if overlay else None, regions=explanation.regions
        )
        summary.update(
            query=query,
            score=explanation.score,
            regions=[r.to_dict() for r in explanation.regions],
        )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    drawn.save(out_path)
    if json_out:
        emit_json(summary)
    else:
        out.print(f"wrote {out_path}", markup=False, soft_wrap=True)
