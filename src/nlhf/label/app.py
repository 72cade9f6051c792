"""The labeling web app (FastAPI): labeler page, admin page, JSON API, sign-in and guards.

    from nlhf.label.app import AppSettings, create_app
    app = create_app(AppSettings(db="labels.sqlite", labels_per_task=3))
    # served by `nlhf label serve` (nlhf.label.serve_cli) or nlhf.label.server.running_server

Pages: ``/`` (label the next task), ``/login``, ``/admin`` (counts, agreement, export, tokens),
``/admin/export.jsonl``.  JSON API: ``GET /api/session``, ``POST /api/login`` (loopback
only), ``GET /api/next``, ``POST /api/labels`` (``{"assignment_id", "choice": "left" |
"right" | "tie" | "skip", "comment"}``), ``GET /api/stats`` (admin).

Access.  Without ``require_tokens`` (the server listens on loopback) a labeler signs in with
a name, the admin page is open to every local visitor, and requests whose ``Host`` is not a
loopback name are refused (a web page cannot reach the app by DNS rebinding).  With
``require_tokens`` every request, pages, API and static files alike, needs a token: a
sign-in link ``/login?token=…`` (sets a session cookie) or ``Authorization: Bearer …``;
otherwise 401.  Admin pages need an admin token (403 for labelers).

Forgery.  Cookies are HttpOnly and SameSite=Strict; every state-changing request made with
a session cookie must carry the session's CSRF token (form field ``csrf_token`` or header
``X-CSRF-Token``), else 403; a cross-origin ``Origin`` header is refused as well.  Pages are
sent with a Content-Security-Policy that allows only this app's own script and stylesheet.

Errors are 4xx with a message (JSON ``{"detail": …}`` under ``/api``, a page elsewhere):
400 bad input, 401/403 access, 404 unknown assignment, 409 double or late submission,
413 body too large, 415 wrong content type, 422 malformed JSON; 503 when the database
cannot be reached or stays locked (nothing was saved; retry).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from nlhf.label.export import ExportOptions, export_rows, to_jsonl
from nlhf.label.pages import render, static_file
from nlhf.label.security import Session, SessionSigner, host_of, is_loopback
from nlhf.label.stats import summarize
from nlhf.label.store import MAX_COMMENT, Labeler, LabelError, LabelStore

log = logging.getLogger(__name__)

COOKIE = "nlhf_label_session"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes Chrome send Origin: null
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class AppSettings:
    """How the app runs (``nlhf label serve`` builds this from its command-line config)."""

    db: str
    labels_per_task: int = 3  # k: a task is done after k votes (skips do not count)
    require_tokens: bool = False  # True when listening beyond loopback
    lease_seconds: float = 1800.0  # an unanswered assignment holds its slot this long
    secure_cookies: bool = False  # mark cookies Secure (serve behind HTTPS)
    max_body_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        if self.labels_per_task < 1:
            raise ValueError(f"labels_per_task must be ≥ 1, got {self.labels_per_task}")
        if self.lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be > 0, got {self.lease_seconds}")


@dataclass(frozen=True)
class Identity:
    """Who sent a request: a labeler (or nobody yet), how, and whether they may administer."""

    labeler: Labeler | None
    session: Session | None
    bearer: bool
    admin: bool
    rejected: bool = False  # an Authorization header with an unknown token


class HTTPError(Exception):
    def __init__(self, status: int, message: str, back: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.back = status, message, back


class LabelIn(BaseModel):
    """Body of ``POST /api/labels``."""

    model_config = ConfigDict(extra="forbid")
    assignment_id: int = Field(strict=True)
    choice: Literal["left", "right", "tie", "skip"]
    comment: str = Field("", max_length=MAX_COMMENT)


class LoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=80)


def _jsonable(value: Any) -> Any:
    """Dataclasses to dicts and NaN to None, for JSON responses."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _title(status: int) -> str:
    return {
        400: "Bad request",
        401: "Token required",
        403: "Forbidden",
        404: "Not found",
        405: "Method not allowed",
        409: "Already done",
        413: "Request too large",
        415: "Unsupported content type",
        422: "Malformed request",
        503: "Busy",
    }.get(status, "Error")


def create_app(settings: AppSettings, store: LabelStore | None = None) -> FastAPI:
    """The ASGI app for ``settings`` (opens the database unless a ``store`` is given)."""
    store = store or LabelStore(settings.db)
    signer = SessionSigner(store.secret())
    k = settings.labels_per_task
    app = FastAPI(title="nlhf label", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.store = store
    app.state.settings = settings

    # ------------------------------------------------------------------ helpers
    def wants_json(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    def secured(response: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    def error_response(
        request: Request, status: int, message: str, back: str | None = None
    ) -> Response:
        if wants_json(request):
            return secured(JSONResponse({"detail": message}, status_code=status))
        ident: Identity | None = getattr(request.state, "ident", None)
        html = render(
            "error.html",
            status=status,
            title=_title(status),
            message=message,
            back=back,
            user=ident.labeler.name if ident and ident.labeler else None,
            is_admin=bool(ident and ident.admin and ident.labeler),
            csrf_token=None,
        )
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return secured(HTMLResponse(html, status_code=status, headers=headers))

    def identify(request: Request) -> Identity:
        open_admin = not settings.require_tokens
        auth = request.headers.get("authorization")
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            labeler = store.labeler_by_token(token.strip()) if scheme.lower() == "bearer" else None
            if labeler is None:
                return Identity(None, None, bearer=True, admin=False, rejected=True)
            return Identity(labeler, None, bearer=True, admin=open_admin or labeler.is_admin)
        session = signer.verify(request.cookies.get(COOKIE))
        labeler = None
        if session is not None and session.labeler_id:
            found = store.labeler(session.labeler_id)
            valid = (
                found is not None
                and found.active
                and found.token_tag == session.token_tag
                and (found.has_token or not settings.require_tokens)
            )
            if valid:
                labeler = found
            else:
                session = None
        admin = open_admin or bool(labeler and labeler.is_admin)
        return Identity(labeler, session, bearer=False, admin=admin)

    def ident_of(request: Request) -> Identity:
        return request.state.ident

    def need_labeler(request: Request) -> Labeler:
        ident = ident_of(request)
        if ident.labeler is None:
            raise HTTPError(401, "Sign in first (POST /api/login with a name, or use a token).")
        return ident.labeler

    def need_admin(request: Request) -> Identity:
        ident = ident_of(request)
        if not ident.admin:
            raise HTTPError(403, "This page is for the admin only.", back="/")
        return ident

    def check_csrf(request: Request, sent: str | None) -> None:
        ident = ident_of(request)
        if ident.bearer:
            return
        sent = sent or request.headers.get("x-csrf-token")
        if not signer.check_csrf(ident.session, sent):
            raise HTTPError(
                403,
                "Missing or wrong CSRF token: reload the page and try again "
                "(API clients: send the X-CSRF-Token header from GET /api/session).",
                back="/",
            )

    def new_session(labeler: Labeler | None) -> tuple[Session, str]:
        """A fresh session for ``labeler`` (None: not signed in yet) and its cookie value."""
        value = signer.sign(labeler.id if labeler else 0, labeler.token_tag if labeler else "-")
        session = signer.verify(value)
        assert session is not None
        return session, value

    def with_cookie(response: Response, value: str | None) -> Response:
        if value is not None:
            response.set_cookie(
                COOKIE,
                value,
                max_age=14 * 24 * 3600,
                httponly=True,
                samesite="strict",
                secure=settings.secure_cookies,
                path="/",
            )
        return response

    def page_session(request: Request) -> tuple[Session | None, str | None]:
        """The session a page's forms use: the visitor's, or a new anonymous one (and its
        cookie value, to set).  Requests authenticated by a Bearer header need none."""
        ident = ident_of(request)
        if ident.bearer:
            return None, None
        if ident.session is not None:
            return ident.session, None
        return new_session(None)

    async def read_form(request: Request) -> dict[str, str]:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            raise HTTPError(415, "Send the form as application/x-www-form-urlencoded.")
        body = await request.body()
        if len(body) > settings.max_body_bytes:
            raise HTTPError(413, "The form is too large.")
        try:
            fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
        except (UnicodeDecodeError, ValueError):
            raise HTTPError(400, "The form is not valid UTF-8 form data.") from None
        return {key: values[0] for key, values in fields.items()}

    def page(request: Request, template: str, **context: Any) -> Response:
        ident = ident_of(request)
        session, cookie = page_session(request)
        html = render(
            template,
            user=ident.labeler.name if ident.labeler else None,
            is_admin=ident.admin,
            csrf_token=signer.csrf_token(session) if session else None,
            **context,
        )
        return with_cookie(HTMLResponse(html), cookie)

    def same_origin(request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is None:
            return True
        hosts = {request.headers.get("host", ""), request.headers.get("x-forwarded-host", "")}
        return urlsplit(origin).netloc in hosts - {""}

    # ------------------------------------------------------------------ guards
    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return error_response(request, 400, "Bad Content-Length header.")
            if int(length) > settings.max_body_bytes:
                return error_response(request, 413, "Request body too large.")
        if not settings.require_tokens and not is_loopback(
            host_of(request.headers.get("host", ""))
        ):
            return error_response(
                request, 403, "This server answers only requests addressed to localhost."
            )
        if request.method not in SAFE_METHODS and not same_origin(request):
            return error_response(request, 403, "Cross-origin request refused.")
        ident = await run_in_threadpool(identify, request)
        request.state.ident = ident
        if ident.rejected:
            return error_response(request, 401, "Unknown or revoked token.")
        signing_in = request.method == "GET" and request.url.path == "/login"
        if settings.require_tokens and ident.labeler is None and not signing_in:
            return error_response(
                request,
                401,
                "A token is required: open the sign-in link your admin gave you "
                "(/login?token=…) or send 'Authorization: Bearer <token>'.",
            )
        return secured(await call_next(request))

    @app.exception_handler(HTTPError)
    async def _http_error(request: Request, exc: HTTPError) -> Response:
        return error_response(request, exc.status, exc.message, exc.back)

    @app.exception_handler(LabelError)
    async def _label_error(request: Request, exc: LabelError) -> Response:
        return error_response(request, exc.status, str(exc), back="/")

    @app.exception_handler(StarletteHTTPException)
    async def _starlette_error(request: Request, exc: StarletteHTTPException) -> Response:
        return error_response(request, exc.status_code, str(exc.detail))

    @app.exception_handler(OperationalError)
    async def _database_busy(request: Request, exc: OperationalError) -> Response:
        log.warning("database error on %s %s: %s", request.method, request.url.path, exc)
        return error_response(
            request, 503, "The database is busy or unavailable; nothing was saved. Try again."
        )

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}"
            for e in exc.errors()
        )
        return error_response(request, 422, f"Malformed request: {problems}")

    # ------------------------------------------------------------------ static files
    @app.get("/static/{name}")
    def static(name: str) -> Response:
        found = static_file(name)
        if found is None:
            raise HTTPError(404, f"No static file {name!r}.")
        data, media_type = found
        return Response(data, media_type=media_type, headers={"Cache-Control": "no-cache"})

    # ------------------------------------------------------------------ sign-in
    @app.get("/login")
    def login_page(request: Request, token: str | None = None) -> Response:
        if token is not None:
            labeler = store.labeler_by_token(token)
            if labeler is None:
                raise HTTPError(401, "Unknown or revoked token.")
            target = "/admin" if labeler.is_admin else "/"
            return with_cookie(RedirectResponse(target, status_code=303), new_session(labeler)[1])
        if settings.require_tokens:
            if ident_of(request).labeler is not None:
                return RedirectResponse("/", status_code=303)
            raise HTTPError(401, "Open the sign-in link with your token (/login?token=…).")
        if ident_of(request).labeler is not None:
            return RedirectResponse("/", status_code=303)
        return page(request, "login.html")

    @app.post("/login")
    async def login_form(request: Request) -> Response:
        if settings.require_tokens:
            raise HTTPError(403, "This server needs a token: open your sign-in link.")
        form = await read_form(request)
        check_csrf(request, form.get("csrf_token"))
        labeler = await run_in_threadpool(store.labeler_for_name, form.get("name", ""))
        return with_cookie(RedirectResponse("/", status_code=303), new_session(labeler)[1])

    @app.post("/logout")
    async def logout(request: Request) -> Response:
        form = await read_form(request)
        check_csrf(request, form.get("csrf_token"))
        target = "/login" if not settings.require_tokens else None
        if target:
            out: Response = RedirectResponse(target, status_code=303)
        else:
            out = HTMLResponse(
                render(
                    "error.html",
                    status=200,
                    title="Signed out",
                    message="You are signed out. Open your sign-in link to come back.",
                    back=None,
                    user=None,
                    is_admin=False,
                    csrf_token=None,
                )
            )
        out.delete_cookie(COOKIE, path="/")
        return out

    @app.get("/api/session")
    def api_session(request: Request) -> Response:
        ident = ident_of(request)
        body: dict[str, Any] = {
            "labeler": ident.labeler.name if ident.labeler else None,
            "admin": ident.admin,
            "labels_per_task": k,
            "csrf_token": None,
        }
        session, cookie = page_session(request)
        if session is not None:
            body["csrf_token"] = signer.csrf_token(session)
        return with_cookie(JSONResponse(body), cookie)

    @app.post("/api/login")
    def api_login(request: Request, body: LoginIn) -> Response:
        if settings.require_tokens:
            raise HTTPError(403, "This server needs a token: send 'Authorization: Bearer <token>'.")
        check_csrf(request, None)
        labeler = store.labeler_for_name(body.name)
        session, cookie = new_session(labeler)
        body = {"labeler": labeler.name, "csrf_token": signer.csrf_token(session)}
        return with_cookie(JSONResponse(body), cookie)

    # ------------------------------------------------------------------ labelling
    @app.get("/")
    def label_page(request: Request) -> Response:
        ident = ident_of(request)
        if ident.labeler is None:
            return RedirectResponse("/login", status_code=303)
        job = store.next_assignment(ident.labeler.id, k, settings.lease_seconds)
        progress = store.progress(ident.labeler.id, k)
        return page(request, "label.html", job=job, progress=progress)

    @app.post("/submit")
    async def submit_form(request: Request) -> Response:
        form = await read_form(request)
        check_csrf(request, form.get("csrf_token"))
        labeler = need_labeler(request)
        raw_id = form.get("assignment_id", "")
        if not raw_id.isdigit():
            raise HTTPError(400, f"assignment_id must be a number, got {raw_id[:40]!r}.", back="/")
        choice = form.get("choice")
        if not choice:
            raise HTTPError(400, "Choose A, B, tie or skip before submitting.", back="/")
        await run_in_threadpool(
            lambda: store.submit(labeler.id, int(raw_id), choice, form.get("comment", ""), k=k)
        )
        return RedirectResponse("/", status_code=303)

    @app.get("/api/next")
    def api_next(request: Request) -> Response:
        labeler = need_labeler(request)
        job = store.next_assignment(labeler.id, k, settings.lease_seconds)
        progress = dataclasses.asdict(store.progress(labeler.id, k))
        if job is None:
            return JSONResponse({"assignment_id": None, "progress": progress})
        return JSONResponse(
            {
                "assignment_id": job.id,
                "task_id": job.task.id,
                "prompt": job.task.prompt,
                "left": job.left,
                "right": job.right,
                "progress": progress,
            }
        )

    @app.post("/api/labels")
    def api_label(request: Request, body: LabelIn) -> Response:
        check_csrf(request, None)
        labeler = need_labeler(request)
        result = store.submit(labeler.id, body.assignment_id, body.choice, body.comment, k=k)
        return JSONResponse(
            {"label_id": result.label_id, "choice": result.choice, "duplicate": result.duplicate},
            status_code=200 if result.duplicate else 201,
        )

    # ------------------------------------------------------------------ admin
    def admin_page(request: Request, new_token: dict[str, str] | None = None) -> Response:
        need_admin(request)
        total, complete = store.task_counts(k)
        summary = summarize(store.label_records(), total, complete)
        return page(
            request,
            "admin.html",
            summary=summary,
            labelers=store.labelers(),
            k=k,
            new_token=new_token,
        )

    @app.get("/admin")
    def admin(request: Request) -> Response:
        return admin_page(request)

    @app.get("/api/stats")
    def api_stats(request: Request) -> Response:
        need_admin(request)
        total, complete = store.task_counts(k)
        summary = summarize(store.label_records(), total, complete)
        return JSONResponse(_jsonable(summary))

    @app.get("/admin/export.jsonl")
    def export(
        request: Request, aggregate: str = "majority", ties: str = "drop", min_votes: int = 1
    ) -> Response:
        need_admin(request)
        try:
            options = ExportOptions(aggregate, ties, min_votes)  # type: ignore[arg-type]
        except ValueError as exc:
            raise HTTPError(400, str(exc), back="/admin") from None
        return Response(
            to_jsonl(export_rows(store, options)),
            media_type="application/jsonl; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="preferences.jsonl"'},
        )

    @app.post("/admin/tokens")
    async def create_token(request: Request) -> Response:
        form = await read_form(request)
        check_csrf(request, form.get("csrf_token"))
        need_admin(request)
        name = form.get("name", "")
        token = await run_in_threadpool(
            lambda: store.create_token(
                name, admin=bool(form.get("admin")), replace=bool(form.get("replace"))
            )
        )
        url = f"{str(request.base_url).rstrip('/')}/login?token={token}"
        return await run_in_threadpool(
            admin_page, request, {"name": name.strip(), "url": url, "token": token}
        )

    @app.post("/admin/revoke")
    async def revoke(request: Request) -> Response:
        form = await read_form(request)
        check_csrf(request, form.get("csrf_token"))
        ident = need_admin(request)
        name = form.get("name", "")
        if ident.labeler is not None and ident.labeler.name == name:
            raise HTTPError(400, "You cannot revoke your own token.", back="/admin")
        await run_in_threadpool(store.revoke, name)
        return RedirectResponse("/admin", status_code=303)

    return app
