"""The error for a model, tokenizer or judge that cannot be loaded from the folder or name given.

    from nlhf.models.errors import ModelError, loading
    with loading("runs/rm/model", "a reward model"):
        model = AutoModelForSequenceClassification.from_pretrained("runs/rm/model")

:class:`ModelError` is a :class:`nlhf.errors.UserError` (the command line prints it on one
line) and an ``OSError``, which is what loading a model raised before, so callers that catch
``OSError`` still do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from os import PathLike
from pathlib import Path

from nlhf.errors import UserError


class ModelError(UserError, OSError):
    """A folder or name that holds no usable model; the message names it and says why."""


@contextmanager
def loading(where: str | PathLike[str], what: str) -> Iterator[None]:
    """Raise what loading ``what`` from ``where`` raises as a :class:`ModelError` naming both.

    transformers reports a folder without ``config.json``, an unknown ``model_type`` or a hub
    name it cannot fetch as ``OSError`` or ``ValueError``; those become "``where``: cannot
    load ``what``: <its message>" (for a folder without ``config.json``: "not a model
    folder").  A :class:`UserError` passes through unchanged.
    """
    try:
        yield
    except UserError:
        raise
    except (OSError, ValueError) as exc:
        folder = Path(where)
        if folder.is_dir() and not (folder / "config.json").exists():
            reason = "not a model folder (no config.json)"  # clearer than transformers' guess
        else:
            reason = str(exc)
        raise ModelError(f"{where}: cannot load {what}: {reason}") from None
