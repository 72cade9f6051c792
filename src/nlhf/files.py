"""Atomic file output: write to a temporary file beside the target, then rename.

A reader (or a resumed run) never sees a half-written file, even if the process is killed.

    from nlhf.files import atomic_write_text, atomic_write_json
    atomic_write_json("runs/x/summary.json", {"ok": True})
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def temp_dir_beside(target: Path) -> Path:
    """A new folder next to ``target`` (same filesystem, so it can be renamed onto it), with
    the permissions of a normal ``mkdir`` rather than mkdtemp's owner-only 0700."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)
    return tmp


def write_folder_atomically(save: Callable[[Path], Any], folder: str | Path) -> Path:
    """Call ``save(tmp)`` on a fresh folder beside ``folder``, then rename it into place."""
    folder = Path(folder)
    tmp = temp_dir_beside(folder)
    try:
        save(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def check_folder_option(name: str, folder: str | Path) -> None:
    """Refuse an output folder that cannot be made: the path, or a folder above it, is an
    existing file.  Raises ``ValueError`` naming the option ``name`` (a config's
    ``check()``, which the command line reports on one line)."""
    path = Path(folder)
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            return
        if candidate.exists():
            raise ValueError(f"{name}: {candidate} is a file, not a folder")


def atomic_write_text(path: str | Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def atomic_write_json(path: str | Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
