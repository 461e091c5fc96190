"""The API of `vrag serve`, one router per resource: the web page (`site`), `search`, `pages`,
`documents` (uploads, deletes and their jobs), the index's `info` and `ask`."""

from __future__ import annotations

from fastapi import APIRouter

from vrag_compress.serve.routes import ask, documents, info, pages, search, site

ROUTERS: tuple[APIRouter, ...] = (
    site.router,
    search.router,
    pages.router,
    documents.router,
    info.router,
    ask.router,
)
