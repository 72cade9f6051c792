"""Labeler and admin tokens: random secrets, kept in the database only as their sha256.

    from nlhf.label.tokens import hash_token, new_token
    token = new_token()          # handed to one labeler once (a sign-in link or a header)
    digest = hash_token(token)   # what the store keeps and looks tokens up by

A copy of the database therefore holds no working token.  The store (nlhf.label.store)
creates, looks up and revokes tokens; the guard (nlhf.label.security) accepts them as
``Authorization: Bearer <token>`` or, once, in a ``/login?token=…`` link that sets a
session cookie.  Standard library only, so the store needs nothing of the web stack.
"""

from __future__ import annotations

import hashlib
import secrets


def new_token() -> str:
    """A fresh random token: 32 URL-safe characters (192 bits)."""
    return secrets.token_urlsafe(24)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
