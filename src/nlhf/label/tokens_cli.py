"""``nlhf label tokens``: list, create and revoke the tokens labelers sign in with.

    nlhf label tokens --db labels.sqlite                          # list labelers and tokens
    nlhf label tokens --db labels.sqlite --create alice           # prints alice's sign-in link
    nlhf label tokens --db labels.sqlite --create boss --admin    # an admin token
    nlhf label tokens --db labels.sqlite --create alice --replace # a new token; the old one dies
    nlhf label tokens --db labels.sqlite --revoke alice

A token is shown once; the database keeps only its sha256.  Tokens are needed when the server
listens beyond loopback (see ``nlhf label serve``); on loopback they work too.
"""

from __future__ import annotations

from dataclasses import dataclass

from nlhf.config import Checked, option
from nlhf.label.serve_cli import DB_HELP
from nlhf.label.store import LabelStore


@dataclass
class Config(Checked):
    """Manage labeler and admin tokens: --create NAME, --revoke NAME, or list them."""

    db: str = option("labels.sqlite", DB_HELP)
    create: str = option("", "create a token for this labeler (created if new) and print it")
    admin: bool = option(False, "with --create: the token may open the admin page")
    replace: bool = option(False, "with --create: replace the labeler's existing token")
    revoke: str = option("", "revoke this labeler's token (their labels stay)")
    url: str = option("http://127.0.0.1:8765", "the server's address, for printed sign-in links")

    def check(self) -> None:
        if self.create and self.revoke:
            raise ValueError("give --create or --revoke, not both")


def run(config: Config) -> int:
    store = LabelStore(config.db, create=False)
    try:
        if config.create:
            token = store.create_token(config.create, admin=config.admin, replace=config.replace)
            role = "admin" if config.admin else "labeler"
            print(f"{role} token for {config.create.strip()} (shown once): {token}")
            print(f"sign-in link: {config.url.rstrip('/')}/login?token={token}")
        elif config.revoke:
            store.revoke(config.revoke)
            print(f"revoked {config.revoke}")
        else:
            rows = store.labelers()
            if not rows:
                print("no labelers yet")
            for lab in rows:
                role = "admin" if lab.is_admin else "labeler"
                state = "revoked" if not lab.active else ("token" if lab.has_token else "no token")
                print(f"{lab.name}\t{role}\t{state}")
    finally:
        store.close()
    return 0
