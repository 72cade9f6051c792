"""What a route of the labeling app can ask FastAPI for (``Depends``), as annotated types.

    from nlhf.label.deps import GuardDep, LabelerDep, SettingsDep, StoreDep, admin_of

    @router.get("/api/next")
    def next_task(labeler: LabelerDep, store: StoreDep, settings: SettingsDep) -> Response: ...

``StoreDep``, ``SettingsDep`` and ``GuardDep`` are the app's ``LabelStore``, ``AppSettings``
and ``Guard`` (``create_app`` keeps them in ``app.state``); ``IdentityDep`` is who sent the
request (found by the guard's middleware before any route runs).  ``LabelerDep`` is the
signed-in labeler (401 otherwise); ``admin_of`` refuses everyone but the admin (403), as in
``@router.get("/admin", dependencies=[Depends(admin_of)])``.

FastAPI runs dependencies before it validates a route's own parameters and body, so a route
whose refusals must come in a set order (malformed input, then CSRF, then the role) calls
``guard.check_csrf`` / ``guard.need_labeler`` / ``guard.need_admin`` in its body instead.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from nlhf.label.security import Guard, Identity
from nlhf.label.settings import AppSettings
from nlhf.label.store import LabelerAccount, LabelStore


async def store_of(request: Request) -> LabelStore:
    return request.app.state.store


async def settings_of(request: Request) -> AppSettings:
    return request.app.state.settings


async def guard_of(request: Request) -> Guard:
    return request.app.state.guard


async def identity_of(request: Request) -> Identity:
    return Guard.identity(request)


StoreDep = Annotated[LabelStore, Depends(store_of)]
SettingsDep = Annotated[AppSettings, Depends(settings_of)]
GuardDep = Annotated[Guard, Depends(guard_of)]
IdentityDep = Annotated[Identity, Depends(identity_of)]


async def labeler_of(guard: GuardDep, ident: IdentityDep) -> LabelerAccount:
    return guard.need_labeler(ident)


async def admin_of(guard: GuardDep, ident: IdentityDep) -> Identity:
    return guard.need_admin(ident)


LabelerDep = Annotated[LabelerAccount, Depends(labeler_of)]
