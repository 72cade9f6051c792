"""The labeling app's JSON API under ``/api``: an ``APIRouter`` whose routes ``create_app`` mounts.

    GET  /api/session   {"labeler", "admin", "labels_per_task", "csrf_token"} (sets a cookie)
    POST /api/login     {"name"} → {"labeler", "csrf_token"}   (name sign-in, loopback only)
    GET  /api/next      the next assignment {"assignment_id", "task_id", "prompt", "left",
                        "right", "clips", "progress"}; "assignment_id": null when nothing is
                        left; a clip task has "clips": {"left"|"right": {"url", "type"}}
                        (else null), its instruction as "prompt" and no texts (null)
    POST /api/labels    {"assignment_id", "choice": "left"|"right"|"tie"|"unclear"|"skip",
                        "comment"} → 201 {"label_id", "choice", "duplicate": false}; 200 for
                        a repeat ("unclear": can't tell)
    GET  /api/stats     the admin numbers (counts, agreement, per-labeler), NaN as null

A script signs in with ``GET /api/session`` (its ``csrf_token``) then ``POST /api/login``
with ``X-CSRF-Token``, keeping the cookie; or sends ``Authorization: Bearer <token>`` and
needs no CSRF token.  A POST is refused in this order: too large (413), not
``application/json`` (415), malformed body (422), missing CSRF token (403), not signed in
(401).  Errors are ``{"detail": …}`` (see nlhf.label.errors).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from nlhf.label.deps import (
    GuardDep,
    IdentityDep,
    LabelerDep,
    SettingsDep,
    StoreDep,
    admin_of,
)
from nlhf.label.errors import HTTPError
from nlhf.label.stats import summarize
from nlhf.label.store import MAX_COMMENT

router = APIRouter()


class LabelIn(BaseModel):
    """Body of ``POST /api/labels``."""

    model_config = ConfigDict(extra="forbid")
    assignment_id: int = Field(strict=True)
    choice: Literal["left", "right", "tie", "unclear", "skip"]
    comment: str = Field("", max_length=MAX_COMMENT)


class LoginIn(BaseModel):
    """Body of ``POST /api/login``."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=80)


def jsonable(value: Any) -> Any:
    """Dataclasses to dicts and NaN to None, for JSON responses."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@router.get("/api/session")
def session(
    request: Request, guard: GuardDep, ident: IdentityDep, settings: SettingsDep
) -> Response:
    body: dict[str, Any] = {
        "labeler": ident.labeler.name if ident.labeler else None,
        "admin": ident.admin,
        "labels_per_task": settings.labels_per_task,
        "csrf_token": None,
    }
    current, cookie = guard.page_session(ident)
    if current is not None:
        body["csrf_token"] = guard.csrf_token(current)
    return guard.with_cookie(request, JSONResponse(body), cookie)


@router.post("/api/login")
def login(
    request: Request, body: LoginIn, guard: GuardDep, store: StoreDep, settings: SettingsDep
) -> Response:
    if settings.require_tokens:
        raise HTTPError(403, "This server needs a token: send 'Authorization: Bearer <token>'.")
    guard.check_csrf(request)
    labeler = store.labeler_for_name(body.name)
    new, cookie = guard.new_session(labeler, "name")
    answer = {"labeler": labeler.name, "csrf_token": guard.csrf_token(new)}
    return guard.with_cookie(request, JSONResponse(answer), cookie)


@router.get("/api/next")
def next_assignment(labeler: LabelerDep, store: StoreDep, settings: SettingsDep) -> Response:
    k = settings.labels_per_task
    job = store.next_assignment(labeler.id, k, settings.lease_seconds)
    progress = dataclasses.asdict(store.progress(labeler.id, k))
    if job is None:
        return JSONResponse({"assignment_id": None, "progress": progress})
    shown = {"left": job.left_clip, "right": job.right_clip}
    clips = {side: {"url": c.url, "type": c.kind} for side, c in shown.items() if c}
    return JSONResponse(
        {
            "assignment_id": job.id,
            "task_id": job.task.id,
            "prompt": job.task.prompt,
            "left": None if clips else job.left,  # a clip's name could tell A from B
            "right": None if clips else job.right,
            "clips": clips or None,
            "progress": progress,
        }
    )


@router.post("/api/labels")
def label(
    request: Request, body: LabelIn, guard: GuardDep, store: StoreDep, settings: SettingsDep
) -> Response:
    guard.check_csrf(request)
    labeler = guard.need_labeler(guard.identity(request))
    result = store.submit(
        labeler.id, body.assignment_id, body.choice, body.comment, k=settings.labels_per_task
    )
    return JSONResponse(
        {"label_id": result.label_id, "choice": result.choice, "duplicate": result.duplicate},
        status_code=200 if result.duplicate else 201,
    )


@router.get("/api/stats", dependencies=[Depends(admin_of)])
def stats(store: StoreDep, settings: SettingsDep) -> Response:
    total, complete = store.task_counts(settings.labels_per_task)
    return JSONResponse(jsonable(summarize(store.label_records(), total, complete)))
