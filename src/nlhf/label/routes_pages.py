"""The labeling app's HTML side: an ``APIRouter`` of pages, their forms, admin pages, static files.

    GET  /                    label the next task (→ /login when not signed in)
    GET  /login               the name form; ``?token=…``: a page whose button signs in
    POST /login, /logout      sign in with a token, or by name (loopback only) / sign out
    POST /submit              a label from the page's form (→ /)
    GET  /admin               counts, agreement, per-labeler table, export and tokens
    GET  /admin/export.jsonl  the preference pairs (``?aggregate=&ties=&min_votes=``)
    POST /admin/tokens        create a token (the page then shows its sign-in link)
    POST /admin/revoke        revoke a labeler's token (→ /admin)
    GET  /static/{name}       app.css, app.js

Every form is ``application/x-www-form-urlencoded`` and carries the page's ``csrf_token``.
A POST is refused in this order: too large (413), wrong content type (415), not form data
(400), missing CSRF token (403), then the role (401 not signed in, 403 not the admin; token
forms need an admin who came with a token).  A sign-in link only shows a page: a link sent
from another site cannot sign anyone in, since the button's form carries the CSRF token.
Pages are rendered by nlhf.label.pages; errors are pages too (see nlhf.label.errors).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from nlhf.label.deps import GuardDep, IdentityDep, SettingsDep, StoreDep, admin_of
from nlhf.label.errors import HTTPError
from nlhf.label.export import ExportOptions, export_rows, to_jsonl
from nlhf.label.pages import render, static_file
from nlhf.label.security import Guard, Identity, media_type
from nlhf.label.stats import summarize
from nlhf.label.store import LabelStore

router = APIRouter()


MAX_FIELDS = 20


async def read_form(request: Request) -> dict[str, str]:
    """The fields of a urlencoded form body (the first value of each); the body's size was
    checked as it arrived (nlhf.web.BodyLimit)."""
    if media_type(request.headers) != "application/x-www-form-urlencoded":
        raise HTTPError(415, "Send the form as application/x-www-form-urlencoded.")
    body = await request.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPError(400, "The form is not valid UTF-8.") from None
    try:
        fields = parse_qs(text, keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except ValueError:
        raise HTTPError(400, f"The form has more than {MAX_FIELDS} fields.") from None
    return {key: values[0] for key, values in fields.items()}


async def checked_form(request: Request, guard: Guard) -> dict[str, str]:
    """:func:`read_form`, then the form's CSRF token checked against the visitor's session."""
    form = await read_form(request)
    guard.check_csrf(request, form.get("csrf_token"))
    return form


def number(raw: str, name: str) -> int:
    """A form field or query holding a whole number in plain ASCII digits, else 400."""
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 40:
        raise HTTPError(400, f"{name} must be a number, got {raw[:40]!r}.", back="/")
    return int(raw)


def flag(form: dict[str, str], name: str) -> bool:
    """A check box: absent is False, ``on``, ``true`` or ``1`` is True, anything else 400."""
    raw = form.get(name)
    if raw is not None and raw not in ("on", "true", "1"):
        raise HTTPError(400, f"{name} must be on, true or 1, got {raw[:40]!r}.", back="/admin")
    return raw is not None


def page(
    request: Request, guard: Guard, ident: Identity, template: str, **context: Any
) -> Response:
    """A rendered page whose forms carry the visitor's CSRF token (a new session if needed)."""
    session, cookie = guard.page_session(ident)
    html = render(
        template,
        user=ident.labeler.name if ident.labeler else None,
        is_admin=ident.admin,
        csrf_token=guard.csrf_token(session) if session else None,
        **context,
    )
    return guard.with_cookie(request, HTMLResponse(html), cookie)


def admin_page(
    request: Request,
    guard: Guard,
    ident: Identity,
    store: LabelStore,
    k: int,
    new_token: dict[str, str] | None,
) -> Response:
    total, complete = store.task_counts(k)
    summary = summarize(store.label_records(), total, complete)
    return page(
        request,
        guard,
        ident,
        "admin.html",
        summary=summary,
        labelers=store.labelers(),
        k=k,
        new_token=new_token,
        manages_tokens=ident.manages_tokens,
    )


def redirect(target: str) -> RedirectResponse:
    return RedirectResponse(target, status_code=303)


@router.get("/static/{name}")
def static(name: str) -> Response:
    found = static_file(name)
    if found is None:
        raise HTTPError(404, f"No static file {name!r}.")
    data, media_type = found
    return Response(data, media_type=media_type, headers={"Cache-Control": "no-cache"})


@router.get("/login")
def login_page(
    request: Request,
    guard: GuardDep,
    ident: IdentityDep,
    store: StoreDep,
    settings: SettingsDep,
    token: str | None = None,
) -> Response:
    if token is not None:
        labeler = guard.token_labeler(request, token)
        return page(request, guard, ident, "login.html", token=token, token_name=labeler.name)
    if ident.labeler is not None:
        return redirect("/")
    if settings.require_tokens:
        raise HTTPError(401, "Open the sign-in link with your token (/login?token=…).")
    return page(request, guard, ident, "login.html", token=None, token_name=None)


@router.post("/login")
async def login_form(
    request: Request, guard: GuardDep, store: StoreDep, settings: SettingsDep
) -> Response:
    form = await checked_form(request, guard)
    if form.get("token"):
        labeler = await run_in_threadpool(guard.token_labeler, request, form["token"])
        mode, target = "token", "/admin" if labeler.is_admin else "/"
    elif settings.require_tokens:
        raise HTTPError(403, "This server needs a token: open your sign-in link.")
    else:
        labeler = await run_in_threadpool(store.labeler_for_name, form.get("name", ""))
        mode, target = "name", "/"
    _, cookie = await run_in_threadpool(guard.new_session, labeler, mode)
    return guard.with_cookie(request, redirect(target), cookie)


@router.post("/logout")
async def logout(request: Request, guard: GuardDep, settings: SettingsDep) -> Response:
    await checked_form(request, guard)
    await run_in_threadpool(guard.end_session, guard.identity(request))
    if not settings.require_tokens:
        return guard.without_cookie(request, redirect("/login"))
    html = render(
        "error.html",
        status=200,
        title="Signed out",
        message="You are signed out. Open your sign-in link to come back.",
        back=None,
        user=None,
        is_admin=False,
        csrf_token=None,
    )
    return guard.without_cookie(request, HTMLResponse(html))


@router.get("/")
def label_page(
    request: Request, guard: GuardDep, ident: IdentityDep, store: StoreDep, settings: SettingsDep
) -> Response:
    if ident.labeler is None:
        return redirect("/login")
    k = settings.labels_per_task
    job = store.next_assignment(ident.labeler.id, k, settings.lease_seconds)
    progress = store.progress(ident.labeler.id, k)
    return page(request, guard, ident, "label.html", job=job, progress=progress)


@router.post("/submit")
async def submit_form(
    request: Request, guard: GuardDep, store: StoreDep, settings: SettingsDep
) -> Response:
    form = await checked_form(request, guard)
    labeler = guard.need_labeler(guard.identity(request))
    assignment = number(form.get("assignment_id", ""), "assignment_id")
    choice = form.get("choice")
    if not choice:
        raise HTTPError(400, "Choose A, B, tie or skip before submitting.", back="/")
    comment, k = form.get("comment", ""), settings.labels_per_task
    await run_in_threadpool(lambda: store.submit(labeler.id, assignment, choice, comment, k=k))
    return redirect("/")


@router.get("/admin", dependencies=[Depends(admin_of)])
def admin(
    request: Request, guard: GuardDep, ident: IdentityDep, store: StoreDep, settings: SettingsDep
) -> Response:
    return admin_page(request, guard, ident, store, settings.labels_per_task, None)


@router.get("/admin/export.jsonl", dependencies=[Depends(admin_of)])
def export(
    store: StoreDep, aggregate: str = "majority", ties: str = "drop", min_votes: str = "1"
) -> Response:
    votes = number(min_votes, "min_votes")
    try:
        options = ExportOptions(aggregate, ties, votes)  # type: ignore[arg-type]
    except ValueError as exc:
        raise HTTPError(400, str(exc), back="/admin") from None
    return Response(
        to_jsonl(export_rows(store, options)),
        media_type="application/jsonl; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="preferences.jsonl"'},
    )


@router.post("/admin/tokens")
async def create_token(
    request: Request, guard: GuardDep, store: StoreDep, settings: SettingsDep
) -> Response:
    form = await checked_form(request, guard)
    ident = guard.need_token_admin(guard.need_admin(guard.identity(request)))
    name = form.get("name", "")
    admin, replace = flag(form, "admin"), flag(form, "replace")
    token = await run_in_threadpool(lambda: store.create_token(name, admin=admin, replace=replace))
    url = f"{str(request.base_url).rstrip('/')}/login?token={token}"
    new_token = {"name": name.strip(), "url": url, "token": token}
    k = settings.labels_per_task
    return await run_in_threadpool(admin_page, request, guard, ident, store, k, new_token)


@router.post("/admin/revoke")
async def revoke(
    request: Request, guard: GuardDep, store: StoreDep, settings: SettingsDep
) -> Response:
    form = await checked_form(request, guard)
    ident = guard.need_token_admin(guard.need_admin(guard.identity(request)))
    name = form.get("name", "")
    if ident.labeler is not None and ident.labeler.name == name:
        raise HTTPError(400, "You cannot revoke your own token.", back="/admin")
    await run_in_threadpool(store.revoke, name)
    return redirect("/admin")
