"""Processes the tests launch: the same environment and signal handling however pytest started.

    proc = subprocess.Popen(cmd, env=children.env(tmp_path), preexec_fn=children.default_signals)

- :func:`env`: this process's environment with the child's temp folder inside the test's
  folder (``TMPDIR``: what a child or its launcher leaves there, such as torchrun's
  ``torchelastic_*`` log folders, goes away with the test's folder, not into the system temp
  folder) and UTF-8 on its standard streams whatever the locale.
- :func:`default_signals`: for a child the test signals.  A job started in the background by a
  non-interactive shell (``make test &``, a CI step, ``nohup``) ignores SIGINT, and an ignored
  signal stays ignored across ``exec``: Python then installs no KeyboardInterrupt handler and
  the test's Ctrl-C does nothing.  The child restores the defaults itself before ``exec``.
"""

import os
import signal
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def tmpdir(folder: Path) -> Path:
    """``folder/tmp``, created: the temp folder of the processes a test launches."""
    path = Path(folder) / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def env(folder: Path, **extra: str) -> dict[str, str]:
    """``os.environ`` for a child, with ``TMPDIR`` = :func:`tmpdir` ``(folder)``, UTF-8 stdio and
    ``extra`` on top."""
    return {**os.environ, "TMPDIR": str(tmpdir(folder)), "PYTHONIOENCODING": "utf-8", **extra}


def default_signals() -> None:
    """``preexec_fn``: SIGINT and SIGTERM back to their defaults in the child (only
    ``sigaction`` between fork and exec), so Python turns SIGINT into KeyboardInterrupt."""
    for number in SIGNALS:
        signal.signal(number, signal.SIG_DFL)
