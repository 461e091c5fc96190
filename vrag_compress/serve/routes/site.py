"""The web page, its two static files, an empty favicon and the offline Swagger UI; nothing
else is served from disk (no directory listing, no paths taken from the request)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, Response

from vrag_compress.serve.deps import ApiError

STATIC = Path(__file__).parent.parent / "static"
STATIC_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
SWAGGER_FILES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css"}

router = APIRouter(include_in_schema=False)


@router.get("/")
def page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


@router.get("/static/{name}")
def static(name: str) -> FileResponse:
    if name not in STATIC_FILES:
        raise ApiError(404, f"no static file {name!r}")
    return FileResponse(STATIC / name, media_type=STATIC_FILES[name])


@router.get("/favicon.ico")
def favicon() -> Response:
    """No icon: an empty answer, so the browser asks once and logs no 404."""
    return Response(status_code=204)


@router.get("/docs")
def docs() -> Response:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="vrag-compress API",
        swagger_js_url="/docs-assets/swagger-ui-bundle.js",
        swagger_css_url="/docs-assets/swagger-ui.css",
        swagger_favicon_url="data:,",
    )


@router.get("/docs-assets/{name}")
def docs_assets(name: str) -> FileResponse:
    folder = _swagger_folder()
    if name not in SWAGGER_FILES or folder is None:
        raise ApiError(404, "Swagger UI assets are not installed: pip install swagger-ui-bundle-v2")
    return FileResponse(folder / name, media_type=SWAGGER_FILES[name])


def _swagger_folder() -> Path | None:
    try:
        import swagger_ui_bundle
    except ImportError:
        return None
    return Path(swagger_ui_bundle.swagger_ui_path)
