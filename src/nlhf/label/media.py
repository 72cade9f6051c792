"""Clips for comparison tasks: GIF or WebM bytes, recognized by their first bytes, size-limited.

    from nlhf.label.media import Clip, read_clip
    clip = Clip.of(gif_data)                        # kind "image/gif", sha256 of the bytes
    clip = read_clip("clips/ep3.gif", base=Path("tasks"))   # relative to the task file

A clip's kind comes from its magic bytes, never from a file name: ``GIF87a``/``GIF89a`` is
``image/gif``; an EBML header whose DocType is ``webm`` is ``video/webm`` (other Matroska
files are refused).  A clip holds at most ``MAX_CLIP_BYTES`` (8 MB).  The database keeps each
clip once, keyed by its sha256 (table ``media``); the app serves it by that hash, so no path
from a visitor ever reaches the filesystem.  Bad clips raise :class:`ClipError`, a one-line
:class:`~nlhf.data.DataError` that the task reader locates (file, line, field).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from nlhf.data import DataError

MAX_CLIP_BYTES = 8 * 1000 * 1000
SHA256 = re.compile(r"[0-9a-f]{64}")
EBML = b"\x1a\x45\xdf\xa3"
WEBM_DOCTYPE = b"\x42\x82\x84webm"  # DocType element, size 4, "webm"


class ClipError(DataError):
    def __init__(self, reason: str, *, field: str | None = None) -> None:
        super().__init__("bad_value", reason, field=field)


def sniff(data: bytes) -> str | None:
    """``image/gif`` or ``video/webm`` from the first bytes of ``data``, else None."""
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == EBML and WEBM_DOCTYPE in data[4:64]:
        return "video/webm"
    return None


def _too_large(name: str, size: int) -> str:
    limit = f"{MAX_CLIP_BYTES // 1_000_000} MB ({MAX_CLIP_BYTES:,} bytes)"
    return f"{name} has {size:,} bytes; a clip may hold at most {limit}"


@dataclass(frozen=True)
class Clip:
    """Clip bytes with their kind and sha256 (equal bytes, equal clip)."""

    data: bytes = field(repr=False)
    kind: str
    sha256: str

    @classmethod
    def of(cls, data: bytes, *, name: str = "the clip", field: str | None = None) -> Clip:
        """Check ``data`` (size, magic bytes); ``name`` and ``field`` go into the error."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ClipError(f"{name}: expected bytes, got {type(data).__name__}", field=field)
        data = bytes(data)
        if len(data) > MAX_CLIP_BYTES:
            raise ClipError(_too_large(name, len(data)), field=field)
        kind = sniff(data)
        if kind is None:
            raise ClipError(
                f"{name} is neither a GIF nor a WebM video (checked by its first bytes)",
                field=field,
            )
        return cls(data, kind, hashlib.sha256(data).hexdigest())


@dataclass(frozen=True)
class ClipRef:
    """A stored clip as a page needs it: its hash (the URL) and its kind."""

    sha256: str
    kind: str

    @property
    def url(self) -> str:
        return f"/media/{self.sha256}"

    @property
    def is_video(self) -> bool:
        return self.kind == "video/webm"


def read_clip(path: str, base: Path, *, field: str | None = None) -> Clip:
    """The clip at ``path`` (relative to ``base`` unless absolute), checked by :meth:`Clip.of`."""
    if not isinstance(path, str) or not path.strip():
        raise ClipError("expected the path of a GIF or WebM file", field=field)
    file = base / Path(path).expanduser()
    if not file.is_file():
        raise ClipError(f"no clip file {path!r} (looked in {file.parent})", field=field)
    size = file.stat().st_size
    if size > MAX_CLIP_BYTES:  # refuse before reading it
        raise ClipError(_too_large(path, size), field=field)
    return Clip.of(file.read_bytes(), name=path, field=field)
