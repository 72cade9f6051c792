"""``nlhf label keys``: where the cookie-signing key of a labeling database lives; rotate it.

    nlhf label keys --db labels.sqlite              # the key file, and the open sessions
    nlhf label keys --db labels.sqlite --rotate     # a new key; every session ends

Rotating signs everyone out at once: the sessions recorded in the database end, and cookies
signed with the old key stop working (a running server reads the new key within a second).
Tokens stay valid: labelers sign in again with their links.  See nlhf.label.keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from nlhf.config import option
from nlhf.label.keys import ENV, KeyFile
from nlhf.label.serve_cli import DB_HELP, KEY_HELP
from nlhf.label.store import LabelStore


@dataclass
class Config:
    """Show or rotate the key that signs the labeling app's session cookies."""

    db: str = option("labels.sqlite", DB_HELP)
    key_file: str = option("", KEY_HELP)
    rotate: bool = option(False, "replace the key and end every session (everyone signs out)")


def run(config: Config) -> int:
    store = LabelStore(config.db, create=False)
    try:
        keys = KeyFile.for_db(store.url, config.key_file or None)
        where = str(keys.path) if keys.path else f"${ENV}"
        if config.rotate:
            keys.rotate()
            ended = store.end_all_sessions()
            print(f"nlhf label keys: new key in {where}; {ended} sessions ended")
        else:
            state = "present" if keys.path is None or keys.path.exists() else "not created yet"
            print(f"nlhf label keys: key in {where} ({state})")
    finally:
        store.close()
    return 0
