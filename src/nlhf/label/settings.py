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
- ``secure_cookies``: mark the session cookie Secure (serve behind HTTPS).
- ``max_body_bytes``: larger request bodies are refused with 413.
"""

from __future__ import annotations

from dataclasses import dataclass


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
