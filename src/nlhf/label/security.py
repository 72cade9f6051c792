"""Signed session cookies, CSRF tokens, and the ``Guard`` that applies them to requests.

- A *token* is a random secret handed to one labeler (or the admin); only its sha256 is
  stored (nlhf.label.tokens).
- A *session* cookie is ``v1.<labeler id>.<nonce>.<token tag>.<signature>``: HMAC-SHA256 with
  the database's secret, so it cannot be forged; it names the labeler (0 before sign-in) and a
  tag of their token hash, so replacing or revoking a token ends its sessions.
- The *CSRF token* of a session is an HMAC of its nonce: a page embeds it in its forms (or a
  script sends it as ``X-CSRF-Token``); a cross-site request cannot read it, so it cannot
  send it.  Requests that carry a token in an ``Authorization: Bearer`` header need none
  (browsers never add that header on their own).
- The ``Guard`` admits requests (size, Host, Origin, token), tells who sent one
  (``Identity``), and checks roles and CSRF for the routes (see ``nlhf.label.deps``).

    signer = SessionSigner(secret)
    session = signer.verify(signer.sign(labeler_id=3, token_tag="ab12"))  # None if forged
    guard = Guard(store, require_tokens=True)
    refused = await guard.admit(request)        # an HTTPError, or None (identity now set)
    labeler = guard.need_labeler(guard.identity(request))   # else HTTPError 401
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from nlhf.label.errors import HTTPError
from nlhf.label.store import Labeler, LabelStore

LOOPBACK_NAMES = ("localhost", "localhost.")
COOKIE = "nlhf_label_session"
COOKIE_MAX_AGE = 14 * 24 * 3600
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``: addresses only this machine can reach."""
    host = host.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


@dataclass(frozen=True)
class Session:
    labeler_id: int  # 0: not signed in yet
    nonce: str
    token_tag: str


class SessionSigner:
    """Signs and checks session cookies and derives their CSRF tokens."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the session secret needs at least 16 bytes")
        self._secret = secret

    def _mac(self, message: str) -> str:
        return hmac.new(self._secret, message.encode("utf-8"), hashlib.sha256).hexdigest()

    def sign(self, labeler_id: int = 0, token_tag: str = "-") -> str:
        """A new session cookie value (a fresh nonce, so a fresh CSRF token)."""
        body = f"v1.{int(labeler_id)}.{secrets.token_hex(16)}.{token_tag}"
        return f"{body}.{self._mac(body)}"

    def verify(self, cookie: str | None) -> Session | None:
        """The session in a cookie value, or None if it is absent, malformed or forged."""
        if not cookie or len(cookie) > 256:
            return None
        parts = cookie.split(".")
        if len(parts) != 5 or parts[0] != "v1":
            return None
        body, signature = ".".join(parts[:4]), parts[4]
        if not hmac.compare_digest(self._mac(body), signature):
            return None
        try:
            labeler_id = int(parts[1])
        except ValueError:
            return None
        return Session(labeler_id=labeler_id, nonce=parts[2], token_tag=parts[3])

    def csrf_token(self, session: Session) -> str:
        return self._mac(f"csrf.{session.nonce}")[:40]

    def check_csrf(self, session: Session | None, sent: str | None) -> bool:
        """True when ``sent`` is the CSRF token of ``session``."""
        if session is None or not sent:
            return False
        return hmac.compare_digest(self.csrf_token(session), sent)


@dataclass(frozen=True)
class Identity:
    """Who sent a request: a labeler (or nobody yet), how, and whether they may administer."""

    labeler: Labeler | None
    session: Session | None
    bearer: bool
    admin: bool
    rejected: bool = False  # an Authorization header with an unknown token


class Guard:
    """Admits requests, identifies their sender, checks roles and CSRF, and issues sessions.

    Without ``require_tokens`` the admin pages are open to every (local) visitor; with it a
    request needs a labeler's token (as a Bearer header or a session cookie from a sign-in
    link), and the admin pages an admin's.  The checks raise ``HTTPError`` (401, 403).
    """

    def __init__(
        self,
        store: LabelStore,
        *,
        require_tokens: bool = False,
        secure_cookies: bool = False,
        max_body_bytes: int = 64 * 1024,
    ) -> None:
        self.store = store
        self.signer = SessionSigner(store.secret())
        self.require_tokens = require_tokens
        self.secure_cookies = secure_cookies
        self.max_body_bytes = max_body_bytes

    async def admit(self, request: Request) -> HTTPError | None:
        """Why ``request`` is refused before any route sees it, or None.  Once the body size,
        ``Host`` and ``Origin`` checks pass, the sender's ``Identity`` is in
        ``request.state.ident``."""
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return HTTPError(400, "Bad Content-Length header.")
            if int(length) > self.max_body_bytes:
                return HTTPError(413, "Request body too large.")
        if not self.require_tokens and not is_loopback(host_of(request.headers.get("host", ""))):
            return HTTPError(403, "This server answers only requests addressed to localhost.")
        if request.method not in SAFE_METHODS and not same_origin(request.headers):
            return HTTPError(403, "Cross-origin request refused.")
        ident = await run_in_threadpool(self.identify, request)
        request.state.ident = ident
        if ident.rejected:
            return HTTPError(401, "Unknown or revoked token.")
        signing_in = request.method == "GET" and request.url.path == "/login"
        if self.require_tokens and ident.labeler is None and not signing_in:
            return HTTPError(
                401,
                "A token is required: open the sign-in link your admin gave you "
                "(/login?token=…) or send 'Authorization: Bearer <token>'.",
            )
        return None

    def identify(self, request: Request) -> Identity:
        """The sender, from an ``Authorization: Bearer`` header or else the session cookie."""
        open_admin = not self.require_tokens
        auth = request.headers.get("authorization")
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            found = (
                self.store.labeler_by_token(token.strip()) if scheme.lower() == "bearer" else None
            )
            if found is None:
                return Identity(None, None, bearer=True, admin=False, rejected=True)
            return Identity(found, None, bearer=True, admin=open_admin or found.is_admin)
        session = self.signer.verify(request.cookies.get(COOKIE))
        labeler = None
        if session is not None and session.labeler_id:
            found = self.store.labeler(session.labeler_id)
            valid = (
                found is not None
                and found.active
                and found.token_tag == session.token_tag
                and (found.has_token or not self.require_tokens)
            )
            if valid:
                labeler = found
            else:
                session = None
        admin = open_admin or bool(labeler and labeler.is_admin)
        return Identity(labeler, session, bearer=False, admin=admin)

    @staticmethod
    def identity(request: Request) -> Identity:
        """The identity ``admit`` found for this request."""
        return request.state.ident

    def need_labeler(self, ident: Identity) -> Labeler:
        if ident.labeler is None:
            raise HTTPError(401, "Sign in first (POST /api/login with a name, or use a token).")
        return ident.labeler

    def need_admin(self, ident: Identity) -> Identity:
        if not ident.admin:
            raise HTTPError(403, "This page is for the admin only.", back="/")
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

    def new_session(self, labeler: Labeler | None) -> tuple[Session, str]:
        """A fresh session for ``labeler`` (None: not signed in yet) and its cookie value."""
        value = self.signer.sign(
            labeler.id if labeler else 0, labeler.token_tag if labeler else "-"
        )
        session = self.signer.verify(value)
        assert session is not None
        return session, value

    def page_session(self, ident: Identity) -> tuple[Session | None, str | None]:
        """The session a page's forms use: the visitor's, or a new anonymous one (and its
        cookie value, to set).  Requests authenticated by a Bearer header need none."""
        if ident.bearer:
            return None, None
        if ident.session is not None:
            return ident.session, None
        return self.new_session(None)

    def with_cookie(self, response: Response, value: str | None) -> Response:
        """``response`` setting the session cookie to ``value`` (unchanged for None)."""
        if value is not None:
            response.set_cookie(
                COOKIE,
                value,
                max_age=COOKIE_MAX_AGE,
                httponly=True,
                samesite="strict",
                secure=self.secure_cookies,
                path="/",
            )
        return response

    @staticmethod
    def without_cookie(response: Response) -> Response:
        """``response`` deleting the session cookie (signing out)."""
        response.delete_cookie(COOKIE, path="/")
        return response
