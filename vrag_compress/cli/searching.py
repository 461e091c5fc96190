"""`vrag search`, `vrag ask` and `vrag show`: finding pages, answering from them, drawing one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from vrag_compress.cli.common import (
    JsonOpt,
    StoreOpt,
    document_label,
    emit_json,
    err,
    fail,
    find_document,
    open_index,
    out,
)
from vrag_compress.cli.hit_table import print_hits
from vrag_compress.cli.options import check_choice, image_out, parse_filter
from vrag_compress.encoders.errors import EncoderLoadError
from vrag_compress.messages import EMPTY_QUERY
from vrag_compress.progress import counted

if TYPE_CHECKING:
    from vrag_compress.store.base import SearchMode


def search(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    query: str | None = typer.Argument(
        None, metavar="QUERY", help="The question or keywords (or search with --image)."
    ),
    k: int = typer.Option(5, "-k", min=1, help="Number of pages to return."),
    image: Path | None = typer.Option(
        None,
        "--image",
        help="Search with a picture instead of words: pages like this one. A Col* index "
        "encodes it as a page; a text-encoder index (minilm) reads its words by OCR.",
    ),
    neighbours: int = typer.Option(
        0, "--neighbours", min=0, help="Also list the N pages before and after each hit."
    ),
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
    """Search an index; prints the best pages: score, file, page and a snippet of the text.

    With --image FILE, the pages most like a picture (a page, a photo of a form, a figure)."""
    from vrag_compress.store.validate import SEARCH_MODES  # the store's modes, named once

    check_choice(mode, SEARCH_MODES, "--mode")
    if alpha is not None and mode != "hybrid":
        raise typer.BadParameter("--alpha weighs the sides of --mode hybrid", param_hint="--alpha")
    if fts_syntax and mode not in ("text", "hybrid"):
        raise typer.BadParameter(
            "--fts-syntax reads the query of --mode text or hybrid", param_hint="--fts-syntax"
        )
    if image is not None and query is not None:
        raise typer.BadParameter("give QUERY or --image, not both", param_hint="--image")
    if image is None and (query is None or not query.strip()):
        raise typer.BadParameter(
            EMPTY_QUERY if query is not None else "give QUERY, or --image FILE",
            param_hint="QUERY",
        )
    where = parse_filter(filter)
    from vrag_compress.store import StoreError
    from vrag_compress.store.filters import FilterError

    read = None
    with open_index(index_dir, readonly=True, store=store) as vindex:
        try:
            read = read_query_image(vindex, image) if image is not None else None
            hits = vindex.search(
                query,
                k=k,
                image=read,
                filter=where,
                mode=cast("SearchMode", mode),  # checked against SEARCH_MODES above
                alpha=alpha,
                fts_syntax=fts_syntax,
                neighbours=neighbours,
            )
        except FilterError as error:  # one the backend cannot run (e.g. a string range on Qdrant)
            raise typer.BadParameter(str(error), param_hint="--filter") from error
        except (ValueError, EncoderLoadError, StoreError) as error:  # a damaged index, no tantivy
            fail(str(error))
    if json_out:
        shown: dict[str, Any] = {"query": query, "hits": [h.to_dict() for h in hits]}
        if read is not None:
            shown["image_query"] = {"image": str(image), **read.to_dict()}
        emit_json(shown)
        return
    if read is not None and read.read_by == "ocr":
        out.print(
            f"read by OCR (this index's text encoder searches words): {read.text!r}",
            markup=False,
            soft_wrap=True,
        )
    words = query or (read.text if read is not None else None) or ""
    print_hits(out, hits, words, fused=mode in ("text", "hybrid"))


def read_query_image(vindex: Any, image: Path) -> Any:
    """``--image``: the picture read for searching (an `ImageQuery`); a bad file is a usage
    error naming it."""
    from vrag_compress.image_query import ImageQueryError

    try:
        return vindex.read_image(image)
    except ImageQueryError as error:
        raise typer.BadParameter(str(error), param_hint="--image") from error


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
    neighbours: int = typer.Option(
        0,
        "--neighbours",
        min=0,
        help="Also send the N pages before and after each retrieved page, for answers that "
        "run over a page break (a table continued on the next page).",
    ),
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
            hits = vindex.search(question, k=k, filter=where, neighbours=neighbours)
        except (ValueError, EncoderLoadError, StoreError) as error:
            fail(str(error))
        if not hits:
            fail(f"{index_dir}: the index has no pages to answer from")
        pages = answering.hit_pages(hits, image_base64=True)
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


def show(
    index_dir: Path = typer.Argument(..., metavar="INDEX", help="Index folder."),
    document: str = typer.Argument(
        ..., metavar="DOCUMENT", help="File name, source path or doc id (see `vrag info`)."
    ),
    page: int = typer.Argument(..., metavar="PAGE", min=1, help="Page number (1-based)."),
    out_path: Path = typer.Option(
        Path("page.png"), "--out", "-o", callback=image_out, help="PNG to write."
    ),
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
        if query and vindex.reads_page_text:  # before the model loads: nothing to draw on
            fail(
                f"{index_dir} uses the text encoder {vindex.model_id}, which reads page text, so "
                "its pages have no patches to draw a heatmap on. Drop --query to write the page "
                f"image, or see the words that matched with `vrag search {index_dir} QUERY "
                "--mode text` (or the web viewer, which highlights them)"
            )
        doc_id = find_document(vindex, document)
        summary: dict[str, Any] = {"out": str(out_path), "doc_id": doc_id, "page_no": page}
        try:
            image = vindex.page_image(doc_id, page)
            explanation = vindex.explain(query, doc_id, page) if query else None
        except KeyError:
            fail(_no_page(vindex, doc_id, document, page))
        except FileNotFoundError as error:
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


def _no_page(vindex: Any, doc_id: str, typed: str, page: int) -> str:
    """`vrag show` of a page the document does not have, naming the file the user typed."""
    pages = next((d.n_pages for d in vindex.documents() if d.doc_id == doc_id), None)
    has = f" (it has {counted(pages, 'page')})" if pages else ""
    return f"no page {page} of {document_label(vindex, doc_id, typed)} in {vindex.path}{has}"
