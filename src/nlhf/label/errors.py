"""How the labeling app answers a refused or failed request, and the headers every answer gets.

    from nlhf.label.errors import HTTPError, error_response, secured
    raise HTTPError(403, "This page is for the admin only.", back="/")   # from a route
    return error_response(request, 413, "Request body too large.")      # from middleware

Errors are 4xx with a message: JSON ``{"detail": …}`` under ``/api``, an HTML page (with a
"back" link when one is given) elsewhere; a 401 page carries ``WWW-Authenticate: Bearer``.
The ``on_*`` functions are the exception handlers ``create_app`` installs: ``HTTPError``
from routes and the guard, ``LabelError`` from the store (404 unknown assignment, 409
double or late submission, 400 bad input, 503 busy), Starlette's own HTTP errors (404, 405),
validation errors (422), database errors (503: nothing was saved; retry) and, for a bug,
anything else (500, logged, with the same headers as every page).  A 503 carries
``Retry-After``; so does a 429 (too many wrong tokens).

``secured`` adds the Content-Security-Policy and the other security headers to a response
(the app's middleware applies it to every answer).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from nlhf.label.pages import render

if TYPE_CHECKING:
    from nlhf.label.security import Identity
    from nlhf.label.store import LabelError

log = logging.getLogger(__name__)

RETRY_AFTER_BUSY = 1  # seconds a client is asked to wait after a 503

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "media-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes Chrome send Origin: null
    "Cache-Control": "no-store",
}

TITLES = {
    400: "Bad request",
    401: "Token required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Already done",
    413: "Request too large",
    415: "Unsupported content type",
    422: "Malformed request",
    429: "Too many attempts",
    500: "Server error",
    503: "Busy",
}


class HTTPError(Exception):
    """A refusal with its status, message and (for pages) the link back."""

    def __init__(
        self,
        status: int,
        message: str,
        back: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.back = status, message, back
        self.headers = headers or {}


def secured(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def error_response(
    request: Request,
    status: int,
    message: str,
    back: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """JSON under ``/api/``, an error page elsewhere (naming the visitor when known)."""
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if status == 503:
        headers.setdefault("Retry-After", str(RETRY_AFTER_BUSY))
    if request.url.path.startswith("/api/"):
        return secured(JSONResponse({"detail": message}, status_code=status, headers=headers))
    ident: Identity | None = getattr(request.state, "ident", None)
    html = render(
        "error.html",
        status=status,
        title=TITLES.get(status, "Error"),
        message=message,
        back=back,
        user=ident.labeler.name if ident and ident.labeler else None,
        is_admin=bool(ident and ident.admin and ident.labeler),
        csrf_token=None,
    )
    return secured(HTMLResponse(html, status_code=status, headers=headers))


async def on_http_error(request: Request, exc: HTTPError) -> Response:
    return error_response(request, exc.status, exc.message, exc.back, exc.headers)


async def on_label_error(request: Request, exc: LabelError) -> Response:
    return error_response(request, exc.status, str(exc), back="/")


async def on_starlette_error(request: Request, exc: StarletteHTTPException) -> Response:
    return error_response(request, exc.status_code, str(exc.detail))


async def on_database_error(request: Request, exc: OperationalError) -> Response:
    log.warning("database error on %s %s: %s", request.method, request.url.path, exc)
    return error_response(
        request, 503, "The database is busy or unavailable; nothing was saved. Try again."
    )


async def on_bug(request: Request, exc: Exception) -> Response:
    log.error("error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(request, 500, "Something went wrong on the server; nothing was saved.")


async def on_validation_error(request: Request, exc: RequestValidationError) -> Response:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
        for e in exc.errors()
    )
    return error_response(request, 422, f"Malformed request: {problems}")
