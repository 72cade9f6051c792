"""``nlhf label serve``: run the labeling web app.

    nlhf label serve --db labels.sqlite                       # http://127.0.0.1:8765, no tokens
    nlhf label serve --db labels.sqlite --labels-per-task 3 --port 9000
    nlhf label serve --db labels.sqlite --host 0.0.0.0        # remote: tokens required
    python -m nlhf.label.serve_cli --db labels.sqlite --port 0  # any free port (printed)

On loopback (the default) labelers sign in with a name.  Listening on any other address
turns tokens on (``--auth auto``): every page and API call then needs a labeler or admin
token; on first start an admin token is created and its sign-in link printed once.  Create
labeler tokens with ``nlhf label tokens --create NAME`` or on the admin page.  Put HTTPS in
front (a reverse proxy) for use across a network and pass ``--secure-cookies`` and
``--forwarded-allow-ips`` with the proxy's address (else clients are told apart by theirs).

Session cookies are signed with a key kept outside the database, in ``<db>.key`` (created
with owner-only permissions; ``--key-file`` elsewhere, or ``NLHF_LABEL_SECRET``);
``nlhf label keys --rotate`` replaces it and signs everyone out.

The first line printed is ``nlhf label: serving on http://HOST:PORT``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Literal

from nlhf.config import Checked, add_config_arguments, config_from_args, option
from nlhf.errors import one_line
from nlhf.label.app import AppSettings, create_app
from nlhf.label.store import LabelStore
from nlhf.web import bind, is_loopback, serve, url_of

DB_HELP = "labeling database: a SQLite file made by `nlhf label add`, or a SQLAlchemy URL"
KEY_HELP = "file of the cookie-signing key; empty: <db>.key (NLHF_LABEL_SECRET overrides it)"


@dataclass
class Config(Checked):
    """Serve the pairwise labeling app: labelers compare two responses to a prompt; the admin
    page shows counts, agreement and the export."""

    db: str = option("labels.sqlite", DB_HELP)
    host: str = option("127.0.0.1", "address to listen on; anything but loopback needs tokens")
    port: int = option(8765, "TCP port; 0 picks a free one")
    labels_per_task: int = option(3, "k: votes collected per task (skips do not count)")
    auth: Literal["auto", "token", "none"] = option(
        "auto",
        "auto: tokens required unless the host is loopback; token: always; none: never "
        "(only allowed on loopback)",
    )
    lease_minutes: float = option(
        30.0, "an assignment left unanswered this long frees its slot for another labeler"
    )
    secure_cookies: bool = option(False, "mark cookies Secure (when served behind HTTPS)")
    key_file: str = option("", KEY_HELP)
    session_days: float = option(14.0, "a signed-in session ends this many days after sign-in")
    forwarded_allow_ips: str = option(
        "", "addresses of your reverse proxy (comma-separated): trust its X-Forwarded-For; "
        "empty: every client is the address it connects from"
    )  # fmt: skip
    log_level: Literal["critical", "error", "warning", "info", "debug"] = option(
        "warning", "uvicorn log level"
    )

    def check(self) -> None:
        if self.auth == "none" and not is_loopback(self.host):
            raise ValueError(
                f"--auth none is refused on {self.host}: beyond loopback, tokens are required"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        self.at_least(1, "labels_per_task")
        if self.lease_minutes <= 0:
            raise ValueError(f"lease_minutes must be > 0, got {self.lease_minutes}")
        if self.session_days <= 0:
            raise ValueError(f"session_days must be > 0, got {self.session_days}")

    @property
    def require_tokens(self) -> bool:
        return self.auth == "token" or (self.auth == "auto" and not is_loopback(self.host))


def run(config: Config) -> int:
    store = LabelStore(config.db, create=False, busy_seconds=AppSettings.busy_seconds)
    settings = AppSettings(
        db=config.db,
        labels_per_task=config.labels_per_task,
        require_tokens=config.require_tokens,
        lease_seconds=config.lease_minutes * 60,
        secure_cookies=config.secure_cookies,
        key_file=config.key_file or None,
        session_days=config.session_days,
    )
    app = create_app(settings, store)
    sock = bind(config.host, config.port)  # a port in use is a one-line error
    url = url_of(sock)
    print(f"nlhf label: serving on {url}", flush=True)
    total, complete = store.task_counts(config.labels_per_task)
    print(f"  {total} tasks ({complete} complete), k={config.labels_per_task}, db {store.url}")
    if config.require_tokens:
        print("  tokens required: every page and API call needs a labeler or admin token")
        if not config.secure_cookies:
            print(
                "  warning: plain HTTP: tokens and session cookies cross the network "
                "unencrypted; put HTTPS in front and pass --secure-cookies",
                file=sys.stderr,
            )
        if not store.has_admin_token():
            token = store.create_token("admin", admin=True, replace=True)
            print(f"  admin sign-in link (shown once): {url}/login?token={token}")
    else:
        print(f"  loopback only: labelers sign in with a name; admin page {url}/admin")
    sys.stdout.flush()
    serve(app, sock, config.log_level, config.forwarded_allow_ips)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m nlhf.label.serve_cli`` (the same options as ``nlhf label serve``)."""
    parser = argparse.ArgumentParser(prog="python -m nlhf.label.serve_cli")
    add_config_arguments(parser, Config)
    args = parser.parse_args(argv)
    try:
        return run(config_from_args(Config, args))
    except Exception as exc:
        message = one_line(exc)
        if message is None:
            raise
        parser.exit(2, f"{parser.prog}: error: {message}\n")


if __name__ == "__main__":
    sys.exit(main())
