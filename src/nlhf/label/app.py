"""The labeling web app (FastAPI): ``create_app`` wires the guard, error handlers and routes.

    from nlhf.label.app import AppSettings, create_app
    app = create_app(AppSettings(db="labels.sqlite", labels_per_task=3))
    # served by `nlhf label serve` (nlhf.label.serve_cli) or nlhf.web.running_server

Pages and forms are in ``routes_pages`` (``/``, ``/login``, ``/admin``, …), the JSON API in
``routes_api`` (``/api/session``, ``/api/login``, ``/api/next``, ``/api/labels``,
``/api/stats``), the clips of clip tasks in ``routes_media`` (``/media/{sha256}``); each
module lists its routes.  Before any route runs, the ``Guard`` (nlhf.label.security) admits
the request and records who sent it.

Access.  Without ``require_tokens`` (the server listens on loopback) a labeler signs in with
a name, the admin page (counts, export) is open to every local visitor, and requests whose
``Host`` is not a loopback name are refused (a web page cannot reach the app by DNS
rebinding); creating or revoking tokens needs an admin token even there.  With
``require_tokens`` every request, pages, API and static files alike, needs a token: a
sign-in link ``/login?token=…`` (a page whose button signs in and sets a session cookie) or
``Authorization: Bearer …``; otherwise 401.  Admin pages need an admin token (403 for
labelers).  Wrong tokens are counted per client and slow it down (429).

Limits.  A request body is counted as it arrives and refused past ``max_body_bytes`` (413);
a request waits at most ``busy_seconds`` for the database (then 503 with Retry-After).

Forgery.  Cookies are HttpOnly and SameSite=Strict; every state-changing request made with
a session cookie must carry the session's CSRF token (form field ``csrf_token`` or header
``X-CSRF-Token``), else 403; a cross-origin ``Origin`` header is refused as well.  Every
answer carries a Content-Security-Policy that allows only this app's own script and
stylesheet.  Errors (4xx, 503 when the database is busy) are described in nlhf.label.errors.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from nlhf.label import errors, routes_api, routes_media, routes_pages
from nlhf.label.errors import HTTPError, error_response, secured
from nlhf.label.keys import KeyFile
from nlhf.label.security import Guard
from nlhf.label.settings import AppSettings
from nlhf.label.store import LabelError, LabelStore
from nlhf.web import BodyLimit, Throttle

__all__ = ["AppSettings", "create_app"]


def create_app(settings: AppSettings, store: LabelStore | None = None) -> FastAPI:
    """The ASGI app for ``settings`` (opens the database unless a ``store`` is given)."""
    store = store or LabelStore(settings.db, busy_seconds=settings.busy_seconds)
    keys = KeyFile.for_db(store.url, settings.key_file)
    keys.current()  # a missing or unusable key fails here, not on the first request
    guard = Guard(
        store,
        keys,
        require_tokens=settings.require_tokens,
        secure_cookies=settings.secure_cookies,
        session_seconds=settings.session_days * 86400,
        throttle=Throttle(free=settings.free_token_attempts),
    )
    # The routers' routes are mounted as they are, so that ``app.routes`` lists every route
    # with its path and methods (``include_router`` adds one opaque entry per router).
    app = FastAPI(
        title="nlhf label",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        routes=[
            *routes_pages.router.routes,
            *routes_api.router.routes,
            *routes_media.router.routes,
        ],
    )
    app.state.store, app.state.settings, app.state.guard = store, settings, guard

    @app.middleware("http")
    async def admit(request: Request, call_next: Any) -> Response:
        refused = await guard.admit(request)
        if refused is not None:
            return error_response(request, refused.status, refused.message, None, refused.headers)
        return secured(await call_next(request))

    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, refuse=error_response)

    app.add_exception_handler(HTTPError, errors.on_http_error)
    app.add_exception_handler(LabelError, errors.on_label_error)
    app.add_exception_handler(StarletteHTTPException, errors.on_starlette_error)
    app.add_exception_handler(OperationalError, errors.on_database_error)
    app.add_exception_handler(RequestValidationError, errors.on_validation_error)
    app.add_exception_handler(Exception, errors.on_bug)
    return app
