"""The clips of clip tasks, served from the database: ``GET /media/{sha256}``.

    GET /media/<64 hex digits>    the GIF or WebM bytes (the label page's <img> / <video>)

Only a signed-in labeler gets a clip, under the same rules as labeling (401 otherwise; a
token server accepts only token sessions), and only one shown in a task they were assigned:
any other hash, or anything that is not 64 lowercase hex digits, is 404.  The bytes come from the
``media`` table, never from a file, so nothing a visitor sends reaches the filesystem.  The
``Content-Type`` is the kind stored with the clip (found from its magic bytes when it was
added), and like every answer this one carries ``X-Content-Type-Options: nosniff``, the
Content-Security-Policy and ``Cache-Control: no-store``; ``Cross-Origin-Resource-Policy:
same-origin`` keeps other sites from embedding it.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from nlhf.label.deps import LabelerDep, StoreDep
from nlhf.label.errors import HTTPError

router = APIRouter()


@router.get("/media/{sha256}")
async def clip(sha256: str, labeler: LabelerDep, store: StoreDep) -> Response:
    found = await run_in_threadpool(store.media_for, labeler.id, sha256)
    if found is None:
        raise HTTPError(404, "No such clip in your tasks.", back="/")
    kind, data = found
    return Response(
        data,
        media_type=kind,
        headers={
            "X-Content-Type-Options": "nosniff",
            "Cross-Origin-Resource-Policy": "same-origin",
            "Content-Disposition": "inline",
        },
    )
