"""``/api/documents`` and ``/api/jobs``: list, upload (indexed in the background by the one
writer) and delete documents, and follow an upload's job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, File, Form, UploadFile

from vrag_compress.serve.deps import READS, WRITES, ApiError, server_of
from vrag_compress.serve.guards import public_path, too_large
from vrag_compress.serve.jobs import UploadError
from vrag_compress.serve.server import Server
from vrag_compress.store import StoreError
from vrag_compress.store.filters import check_user_metadata
from vrag_compress.store.user_input import UserInputError, load_json, show
from vrag_compress.store.validate import check_id

router = APIRouter(tags=["documents"])


@router.get("/api/documents", dependencies=READS)
def documents(server: Server = Depends(server_of)) -> dict[str, Any]:
    """Every document: id, file name, pages, whether indexing finished, metadata."""
    return {
        "documents": [
            {
                "doc_id": d.doc_id,
                "filename": Path(d.source).name if d.source else None,
                "source": public_path(d.source, server.root),
                "n_pages": d.n_pages,
                "complete": d.complete,
                "metadata": d.metadata,
            }
            for d in server.reader.documents()
        ]
    }


@router.delete("/api/documents/{doc_id}", dependencies=WRITES)
def delete_document(doc_id: str, server: Server = Depends(server_of)) -> dict[str, Any]:
    """Delete one document's pages, images and upload (as `vrag delete`)."""
    try:
        removed = server.jobs.delete_document(check_id(doc_id, "doc id"))
    except UploadError as error:
        raise ApiError(error.status, str(error)) from error
    except StoreError as error:  # NUL, an over-long id
        raise ApiError(400, str(error)) from error
    if removed == 0:
        raise ApiError(404, f"no document {show(doc_id)} in {server.root.name}")
    return {"doc_id": doc_id, "pages_deleted": removed}


@router.post("/api/documents", dependencies=WRITES, status_code=202)
def upload(
    file: UploadFile = File(..., description="A PDF or page image."),
    metadata: str | None = Form(None, description="JSON object stored on every page."),
    password: str | None = Form(
        None,
        description="The PDF's password when it is protected: used to open it while it is "
        "indexed, never stored (index, job record) nor logged.",
    ),
    server: Server = Depends(server_of),
) -> dict[str, Any]:
    """Index an uploaded file in the background; poll ``GET /api/jobs/{job}``."""
    config = server.config
    extra = _metadata(metadata)
    limit = int(config.max_upload_mb * 2**20)

    def save(path: Path) -> None:
        written = 0
        with open(path, "wb") as out:
            while chunk := file.file.read(1 << 20):
                written += len(chunk)
                if written > limit:
                    raise UploadError(too_large(written, config.max_upload_mb), 413)
                out.write(chunk)

    try:
        job = server.jobs.submit(
            file.filename or "upload", save, extra, config.max_pages, password=password or None
        )
    except UploadError as error:
        raise ApiError(error.status, str(error)) from error
    return {"job": job.id, "doc_id": job.doc_id, "filename": job.filename}


@router.get("/api/jobs/{job_id}", dependencies=READS)
def job_status(job_id: str, server: Server = Depends(server_of)) -> dict[str, Any]:
    """An upload's state (queued, running, done, failed), pages done and failures."""
    job = server.jobs.status(job_id)
    if job is None:
        raise ApiError(404, f"no job {show(job_id)}")
    return job.to_dict()


def _metadata(text: str | None) -> dict[str, Any]:
    """An upload's ``metadata`` form field, refused (422) before the file is read."""
    if not text:
        return {}
    try:
        return check_user_metadata(load_json(text, "metadata"))
    except UserInputError as error:
        raise ApiError(422, str(error)) from error
