"""The key that signs the labeling app's session cookies, kept outside the database.

    from nlhf.label.keys import KeyFile
    keys = KeyFile.for_db("labels.sqlite")     # labels.sqlite.key, created (mode 600) if missing
    secret = keys.current()                   # re-read when the file changes (rotation)
    keys.rotate()                             # `nlhf label keys --rotate`

The database holds the token hashes; if it held the signing key too, a read-only copy of it
would be enough to forge an admin's cookie.  So the key lives in a file of its own, readable
by its owner only (``<database>.key`` next to a SQLite file; ``--key-file`` for other
databases), or in the environment variable ``NLHF_LABEL_SECRET`` (at least 32 characters),
which takes precedence.  Rotating the key (and ending the sessions in the database) signs
everyone out; a running server picks up the new key within a second.
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
import time
from pathlib import Path

from nlhf.label.store import LabelError

ENV = "NLHF_LABEL_SECRET"
MIN_ENV_CHARS = 32
RECHECK_SECONDS = 1.0


def default_key_file(url: str) -> Path | None:
    """``<file>.key`` for a SQLite database file, None for any other database."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url[len(prefix) :] in ("", ":memory:"):
        return None
    return Path(url[len(prefix) :] + ".key")


def write_key(path: Path) -> None:
    """A fresh random key in ``path`` (owner read/write only), replaced atomically; its folder
    must exist."""
    if not path.parent.is_dir():
        raise LabelError(f"{path}: no folder {path.parent} for the session key file")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_hex(32).encode("ascii") + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_key(path: Path) -> bytes:
    """The key in ``path``; refuses a file that others may read, or one too short."""
    info = path.stat()
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise LabelError(
            f"{path}: the session key file is readable by others; run `chmod 600 {path}`"
        )
    text = path.read_text(encoding="ascii", errors="replace").strip()
    if len(text) < MIN_ENV_CHARS:
        raise LabelError(f"{path}: the session key file holds {len(text)} characters, need 32+")
    return text.encode("ascii", errors="replace")


class KeyFile:
    """Where the signing key lives, and the key itself (re-read after a rotation)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._key: bytes | None = None
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0

    @classmethod
    def for_db(cls, url: str, key_file: str | None = None) -> KeyFile:
        """The key of the database at ``url``: ``key_file`` if given, else ``<file>.key``."""
        if os.environ.get(ENV):
            return cls(None)
        path = Path(key_file).expanduser() if key_file else default_key_file(url)
        if path is None:
            raise LabelError(
                f"{url}: give --key-file (a file for the session key, outside the database) "
                f"or set {ENV}"
            )
        if path.is_dir():
            raise LabelError(f"{path}: the session key file is a folder; name a file")
        return cls(path)

    def current(self) -> bytes:
        """The key, created on first use when its file is missing."""
        if self.path is None:
            value = os.environ.get(ENV, "")
            if len(value) < MIN_ENV_CHARS:
                raise LabelError(f"{ENV} holds {len(value)} characters; give at least 32")
            return value.encode("utf-8")
        now = time.monotonic()
        if self._key is not None and now - self._checked < RECHECK_SECONDS:
            return self._key
        self._checked = now
        if not self.path.exists():
            write_key(self.path)
        info = self.path.stat()
        stamp = (info.st_mtime_ns, info.st_ino)
        if self._key is None or stamp != self._stamp:
            self._key, self._stamp = read_key(self.path), stamp
        return self._key

    def rotate(self) -> None:
        """A new key: every cookie signed with the old one stops working."""
        if self.path is None:
            raise LabelError(f"the session key comes from {ENV}: change it there to rotate")
        write_key(self.path)
        self._key = None
