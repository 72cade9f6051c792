"""How the labeling app runs: the settings ``create_app`` is built from.

    from nlhf.label.settings import AppSettings
    settings = AppSettings(db="labels.sqlite", labels_per_task=3, require_tokens=True)

``nlhf label serve`` (nlhf.label.serve_cli) builds them from its command-line config; the
routes read them through ``nlhf.label.deps.SettingsDep``.  ``nlhf.label.app`` re-exports
the class, so ``from nlhf.label.app import AppSettings`` works as well.

- ``labels_per_task`` (k): a task is done after k votes; skips do not count.
- ``require_tokens``: every request needs a labeler or admin token (on when the server
  listens beyond loopback); without it labelers sign in with a name.
- ``lease_seconds``: how long an unanswered assignment holds its slot.
- ``secure_cookies``: mark the session cookie Secure (serve behind HTTPS; requests that
  arrive over HTTPS get it anyway).
- ``max_body_bytes``: larger request bodies are refused with 413 (counted as read).
- ``key_file``: where the cookie-signing key lives (default ``<db>.key``; nlhf.label.keys).
- ``session_days``: a signed-in session ends this long after sign-in.
- ``busy_seconds``: how long a request waits for the database before a 503.
- ``free_token_attempts``: wrong tokens a client may send before it is slowed down.
"""

from __future__ import annotations

from dataclasses import dataclass

from nlhf.config import Checked


@dataclass(frozen=True)
class AppSettings(Checked):
    """How the app runs (``nlhf label serve`` builds this from its command-line config)."""

    db: str
    labels_per_task: int = 3  # k: a task is done after k votes (skips do not count)
    require_tokens: bool = False  # True when listening beyond loopback
    lease_seconds: float = 1800.0  # an unanswered assignment holds its slot this long
    secure_cookies: bool = False  # mark cookies Secure (serve behind HTTPS)
    max_body_bytes: int = 64 * 1024
    key_file: str | None = None  # the cookie-signing key (default: <db>.key)
    session_days: float = 14.0  # a signed-in session ends this long after sign-in
    busy_seconds: float = 2.0  # a request waits this long for the database, then 503
    free_token_attempts: int = 5  # wrong tokens per client before each costs a growing pause

    def check(self) -> None:
        if self.session_days <= 0 or self.busy_seconds <= 0:
            raise ValueError("session_days and busy_seconds must be > 0")
        self.at_least(1, "labels_per_task")
        if self.lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be > 0, got {self.lease_seconds}")
