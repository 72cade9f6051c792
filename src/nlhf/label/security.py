"""Signed session cookies, CSRF tokens, and the ``Guard`` that applies them to requests.

- A *token* is a random secret handed to one labeler (or the admin); only its sha256 is
  stored (nlhf.label.tokens).
- A *session* cookie is ``v2.<labeler id>.<mode>.<nonce>.<issued>.<signature>``: HMAC-SHA256
  with a key kept outside the database (nlhf.label.keys), so neither a visitor nor a copy of
  the database can forge one.  ``mode`` says how it was opened: ``token`` (a sign-in link or
  form with a token), ``name`` (a name on a loopback server) or ``-`` (not signed in).  A
  signed-in session is also a row in the database (its nonce hashed): signing out, revoking
  or replacing the token, and ``nlhf label keys --rotate`` end it there, and it expires
  after ``session_seconds`` whatever the browser keeps.  A server that requires tokens
  accepts only ``token`` sessions.
- The *CSRF token* of a session is an HMAC of its nonce: a page embeds it in its forms (or a
  script sends it as ``X-CSRF-Token``); a cross-site request cannot read it, so it cannot
  send it.  Requests that carry a token in an ``Authorization: Bearer`` header need none
  (browsers never add that header on their own).
- The ``Guard`` admits requests (Host, Origin, content type, token), tells who sent one
  (``Identity``), checks roles and CSRF for the routes (see ``nlhf.label.deps``), and slows
  down a client that keeps sending wrong tokens (nlhf.web.Throttle).

    guard = Guard(store, KeyFile.for_db("labels.sqlite"), require_tokens=True)
    refused = await guard.admit(request)        # an HTTPError, or None (identity now set)
    labeler = guard.need_labeler(guard.identity(request))   # else HTTPError 401
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from nlhf.label.errors import HTTPError
from nlhf.label.keys import KeyFile
from nlhf.label.store import LabelerAccount, LabelStore
from nlhf.web import Throttle, is_loopback

log = logging.getLogger(__name__)

COOKIE = "nlhf_label_session"
SESSION_SECONDS = 14 * 24 * 3600
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
MODES = ("token", "name", "-")
JSON_ROUTES = ("/api/login", "/api/labels")  # POST bodies that must be JSON


def host_of(header: str) -> str:
    """The host part of a ``Host`` header value (``[::1]:8765`` → ``::1``)."""
    header = header.strip()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def same_origin(headers: Headers) -> bool:
    """False when an ``Origin`` header names a host other than the one addressed."""
    origin = headers.get("origin")
    if origin is None:
        return True
    hosts = {headers.get("host", ""), headers.get("x-forwarded-host", "")}
    return urlsplit(origin).netloc in hosts - {""}


def media_type(headers: Headers) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


def digest(nonce: str) -> str:
    """What the database keeps of a session's nonce."""
    return hashlib.sha256(nonce.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class Session:
    labeler_id: int  # 0: not signed in yet
    mode: str  # token | name | - (see the module doc)
    nonce: str
    issued: int  # unix seconds


class SessionSigner:
    """Signs and checks session cookies and derives their CSRF tokens."""

    def __init__(self, keys: KeyFile, max_age: float = SESSION_SECONDS) -> None:
        self.keys, self.max_age = keys, max_age

    def _mac(self, message: str) -> str:
        return hmac.new(self.keys.current(), message.encode("utf-8"), hashlib.sha256).hexdigest()

    def sign(self, labeler_id: int = 0, mode: str = "-") -> str:
        """A new session cookie value (a fresh nonce, so a fresh CSRF token)."""
        if mode not in MODES:
            raise ValueError(f"session mode must be one of {MODES}, got {mode!r}")
        body = f"v2.{int(labeler_id)}.{mode}.{secrets.token_hex(16)}.{int(time.time())}"
        return f"{body}.{self._mac(body)}"

    def verify(self, cookie: str | None) -> Session | None:
        """The session in a cookie value, or None if absent, malformed, forged or too old."""
        if not cookie or len(cookie) > 256:
            return None
        parts = cookie.split(".")
        if len(parts) != 6 or parts[0] != "v2" or parts[2] not in MODES:
            return None
        body, signature = ".".join(parts[:5]), parts[5]
        if not hmac.compare_digest(self._mac(body), signature):
            return None
        if not (parts[1].isascii() and parts[1].isdigit() and parts[4].isascii()):
            return None
        if not parts[4].isdigit() or time.time() - int(parts[4]) > self.max_age:
            return None
        return Session(int(parts[1]), parts[2], parts[3], int(parts[4]))

    def csrf_token(self, session: Session) -> str:
        return self._mac(f"csrf.{session.nonce}")[:40]

    def check_csrf(self, session: Session | None, sent: str | None) -> bool:
        """True when ``sent`` is the CSRF token of ``session``."""
        if session is None or not sent:
            return False
        return hmac.compare_digest(self.csrf_token(session), sent)


@dataclass(frozen=True)
class Identity:
    """Who sent a request: a labeler (or nobody yet), how, and what they may do."""

    labeler: LabelerAccount | None
    session: Session | None
    bearer: bool
    admin: bool  # may see the admin pages
    rejected: bool = False  # an Authorization header with an unknown token
    by_token: bool = False  # authenticated by a token (Bearer or a token session)

    @property
    def manages_tokens(self) -> bool:
        """Only an admin who came with a token may create or revoke tokens."""
        return bool(self.by_token and self.labeler and self.labeler.is_admin)


class Guard:
    """Admits requests, identifies their sender, checks roles and CSRF, and issues sessions.

    Without ``require_tokens`` the admin pages (counts, agreement, export) are open to every
    (local) visitor, but creating or revoking tokens needs an admin token, so nothing made on
    loopback gives rights on a server that requires tokens.  With ``require_tokens`` a
    request needs a labeler's token (as a Bearer header or a session opened with one), and
    the admin pages an admin's.  The checks raise ``HTTPError`` (401, 403, 429).
    """

    def __init__(
        self,
        store: LabelStore,
        keys: KeyFile,
        *,
        require_tokens: bool = False,
        secure_cookies: bool = False,
        session_seconds: float = SESSION_SECONDS,
        throttle: Throttle | None = None,
    ) -> None:
        self.store = store
        self.signer = SessionSigner(keys, session_seconds)
        self.require_tokens = require_tokens
        self.secure_cookies = secure_cookies
        self.session_seconds = session_seconds
        self.throttle = throttle or Throttle()

    async def admit(self, request: Request) -> HTTPError | None:
        """Why ``request`` is refused before any route sees it, or None: wrong ``Host`` or
        ``Origin`` (403), wrong or missing token (401, 429), an API body that is not JSON
        (415).  The sender's ``Identity`` is then in ``request.state.ident``."""
        if not self.require_tokens and not is_loopback(host_of(request.headers.get("host", ""))):
            return HTTPError(403, "This server answers only requests addressed to localhost.")
        if request.method not in SAFE_METHODS and not same_origin(request.headers):
            return HTTPError(403, "Cross-origin request refused.")
        try:
            ident = await run_in_threadpool(self.identify, request)
        except HTTPError as refused:
            request.state.ident = Identity(None, None, bearer=True, admin=False, rejected=True)
            return refused
        request.state.ident = ident
        if ident.rejected:
            return HTTPError(401, "Unknown or revoked token.")
        signing_in = request.url.path == "/login" and request.method in ("GET", "POST")
        if self.require_tokens and ident.labeler is None and not signing_in:
            return HTTPError(
                401,
                "A token is required: open the sign-in link your admin gave you "
                "(/login?token=…) or send 'Authorization: Bearer <token>'.",
            )
        if request.method == "POST" and request.url.path in JSON_ROUTES:
            if media_type(request.headers) != "application/json":
                return HTTPError(415, "Send the body as application/json.")
        return None

    def client(self, request: Request) -> str:
        return request.client.host if request.client else "unknown"

    def token_labeler(self, request: Request, token: str) -> LabelerAccount:
        """The labeler whose token this is; a wrong one is counted, logged and refused (401),
        and a client that keeps trying waits (429)."""
        client = self.client(request)
        wait = self.throttle.wait(client)
        if wait > 0:
            raise HTTPError(
                429,
                f"Too many wrong tokens from {client}: try again in {math.ceil(wait)} s.",
                headers={"Retry-After": str(math.ceil(wait))},
            )
        found = self.store.labeler_by_token(token.strip())
        if found is None:
            failures = self.throttle.failed(client)
            log.warning("nlhf label: wrong token from %s (%d in a row)", client, failures)
            raise HTTPError(401, "Unknown or revoked token.")
        self.throttle.succeeded(client)
        return found

    def identify(self, request: Request) -> Identity:
        """The sender, from an ``Authorization: Bearer`` header or else the session cookie."""
        open_admin = not self.require_tokens
        auth = request.headers.get("authorization")
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer":
                return Identity(None, None, bearer=True, admin=False, rejected=True)
            found = self.token_labeler(request, token)
            admin = open_admin or found.is_admin
            return Identity(found, None, bearer=True, admin=admin, by_token=True)
        session = self.signer.verify(request.cookies.get(COOKIE))
        labeler = self._signed_in(session) if session and session.labeler_id else None
        if session is not None and session.labeler_id and labeler is None:
            session = None
        admin = open_admin or bool(labeler and labeler.is_admin)
        by_token = labeler is not None and session is not None and session.mode == "token"
        return Identity(labeler, session, bearer=False, admin=admin, by_token=by_token)

    def _signed_in(self, session: Session) -> LabelerAccount | None:
        """The labeler of a signed-in session that is still valid here, else None."""
        if self.require_tokens and session.mode != "token":
            return None
        record = self.store.session(digest(session.nonce))
        if record is None or record.ended or record.expires_at < time.time():
            return None
        if record.labeler_id != session.labeler_id or record.mode != session.mode:
            return None
        found = self.store.labeler(session.labeler_id)
        if found is None or not found.active:
            return None
        if session.mode == "token":
            return found if found.has_token and found.token_tag == record.token_tag else None
        return None if found.has_token else found  # name sessions: labelers without a token

    @staticmethod
    def identity(request: Request) -> Identity:
        """The identity ``admit`` found for this request."""
        return request.state.ident

    def need_labeler(self, ident: Identity) -> LabelerAccount:
        if ident.labeler is None:
            raise HTTPError(401, "Sign in first (POST /api/login with a name, or use a token).")
        return ident.labeler

    def need_admin(self, ident: Identity) -> Identity:
        if not ident.admin:
            raise HTTPError(403, "This page is for the admin only.", back="/")
        return ident

    def need_token_admin(self, ident: Identity) -> Identity:
        if not ident.manages_tokens:
            raise HTTPError(
                403,
                "Creating and revoking tokens needs an admin token: sign in with one, or use "
                "`nlhf label tokens` on the server.",
                back="/admin",
            )
        return ident

    def check_csrf(self, request: Request, sent: str | None = None) -> None:
        """Refuse a cookie-authenticated request without its session's CSRF token (``sent``
        from a form field, else the ``X-CSRF-Token`` header)."""
        ident = self.identity(request)
        if ident.bearer:
            return
        sent = sent or request.headers.get("x-csrf-token")
        if not self.signer.check_csrf(ident.session, sent):
            raise HTTPError(
                403,
                "Missing or wrong CSRF token: reload the page and try again "
                "(API clients: send the X-CSRF-Token header from GET /api/session).",
                back="/",
            )

    def csrf_token(self, session: Session) -> str:
        return self.signer.csrf_token(session)

    def new_session(self, labeler: LabelerAccount | None, mode: str = "-") -> tuple[Session, str]:
        """A fresh session (recorded in the database when signed in) and its cookie value:
        ``mode`` ``token`` or ``name`` for ``labeler``, ``-`` for a visitor not signed in."""
        value = self.signer.sign(labeler.id if labeler else 0, mode if labeler else "-")
        session = self.signer.verify(value)
        assert session is not None
        if labeler is not None:
            self.store.open_session(digest(session.nonce), labeler, mode, self.session_seconds)
        return session, value

    def end_session(self, ident: Identity) -> None:
        """Sign out: the session stops working on the server, whatever the browser keeps."""
        if ident.session is not None and ident.session.labeler_id:
            self.store.end_session(digest(ident.session.nonce))

    def page_session(self, ident: Identity) -> tuple[Session | None, str | None]:
        """The session a page's forms use: the visitor's, or a new anonymous one (and its
        cookie value, to set).  Requests authenticated by a Bearer header need none."""
        if ident.bearer:
            return None, None
        if ident.session is not None:
            return ident.session, None
        return self.new_session(None)

    def with_cookie(self, request: Request, response: Response, value: str | None) -> Response:
        """``response`` setting the session cookie to ``value`` (unchanged for None); Secure
        when asked for or when the request came over HTTPS."""
        if value is not None:
            response.set_cookie(
                COOKIE,
                value,
                max_age=int(self.session_seconds),
                httponly=True,
                samesite="strict",
                secure=self.secure_cookies or request.url.scheme == "https",
                path="/",
            )
        return response

    def without_cookie(self, request: Request, response: Response) -> Response:
        """``response`` deleting the session cookie (signing out), with the same attributes."""
        response.delete_cookie(
            COOKIE,
            path="/",
            httponly=True,
            samesite="strict",
            secure=self.secure_cookies or request.url.scheme == "https",
        )
        return response
