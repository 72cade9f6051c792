"""The error a user can fix, and the one line the command line prints for it.

    from nlhf.errors import UserError
    raise UserError(f"{path}: not a judge folder (no config.json)")

Bad input (a data row, an option, a path, a port, a database) raises :class:`UserError` or a
subclass of it: ``DataError`` (rows of a data file), ``ConfigError`` (options and config
files), ``AssetError`` (embedded models), ``LabelError`` (the labeling database).  The
command line (``nlhf.cli``) prints ``nlhf <command>: error: <message>`` on one line and exits
with status 2; so does a missing or unreadable file (an ``OSError`` that names its file).
Anything else is a bug and keeps its traceback.  ``nlhf --debug <command>`` (or
``NLHF_DEBUG=1``) shows the traceback of a user error too.
"""

from __future__ import annotations

#: Exit status of a command stopped by a user error (argparse uses the same for bad options).
USAGE_EXIT = 2

#: OSErrors that mean a path the user gave is wrong, not that the program is.
PATH_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


class UserError(Exception):
    """Input the user can fix; the message names the file, row, field or option."""


def one_line(exc: BaseException) -> str | None:
    """The message to print for ``exc`` when it is a user error, else None (a bug)."""
    if isinstance(exc, UserError):
        text = str(exc)
    elif isinstance(exc, PATH_ERRORS) and exc.filename is not None:
        text = f"{exc.strerror or exc}: {exc.filename}"
    else:
        return None
    return " ".join(text.split()) or type(exc).__name__
