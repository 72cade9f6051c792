"""Tokens, signed session cookies and CSRF tokens for the labeling app (standard library only).

- A *token* is a random secret handed to one labeler (or the admin).  Only its sha256 is
  stored, so a copy of the database does not leak working tokens.
- A *session* cookie is ``v1.<labeler id>.<nonce>.<token tag>.<signature>``: HMAC-SHA256 with
  the database's secret, so it cannot be forged; it names the labeler (0 before sign-in) and a
  tag of their token hash, so replacing or revoking a token ends its sessions.
- The *CSRF token* of a session is an HMAC of its nonce: a page embeds it in its forms (or a
  script sends it as ``X-CSRF-Token``); a cross-site request cannot read it, so it cannot
  send it.  Requests that carry a token in an ``Authorization: Bearer`` header need none
  (browsers never add that header on their own).

    from nlhf.label.security import SessionSigner, new_token, hash_token, is_loopback
    signer = SessionSigner(secret)
    cookie = signer.sign(labeler_id=3, token_tag="ab12")
    session = signer.verify(cookie)                  # None if tampered with
    signer.csrf_token(session) == form["csrf_token"]
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass

LOOPBACK_NAMES = ("localhost", "localhost.")


def new_token() -> str:
    """A fresh random token: 32 URL-safe characters (192 bits)."""
    return secrets.token_urlsafe(24)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


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
