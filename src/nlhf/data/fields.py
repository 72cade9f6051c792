"""Reading one field of a raw row (a dict from JSON, CSV or a datasets.Dataset), with checks.

Each helper raises :class:`DataError` naming the field; the loader adds file and row number.
Values from CSV are always text, so numbers and labels are accepted as text as well.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from nlhf.data.errors import DataError


def require(row: Mapping[str, Any], field: str) -> Any:
    """The value of ``field``; a missing or null field is an error listing the fields present."""
    if field not in row:
        present = ", ".join(map(str, row)) or "none"
        raise DataError("missing_field", f"missing (the row has: {present})", field=field)
    value = row[field]
    if value is None:
        raise DataError("missing_field", "is null", field=field)
    return value


def encodable(value: str, field: str) -> str:
    """``value``, which must be writable as UTF-8: a lone surrogate (JSON ``"\\ud800"``) is a
    ``bad_value`` error naming the character's position."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise DataError(
            "bad_value",
            f"not valid Unicode text (lone surrogate {value[err.start]!r} at character "
            f"{err.start})",
            field=field,
        ) from None
    return value


def text(row: Mapping[str, Any], field: str, *, allow_empty: bool = False) -> str:
    """A text field; whitespace-only text is ``empty_text`` unless ``allow_empty``."""
    value = require(row, field)
    if not isinstance(value, str):
        raise DataError("bad_value", f"expected text, got {type(value).__name__}", field=field)
    encodable(value, field)
    if not allow_empty and not value.strip():
        raise DataError("empty_text", "empty text", field=field)
    return value


def optional_number(row: Mapping[str, Any], field: str | None) -> float | None:
    """A finite number, or None when the field is unset, absent, null or blank."""
    if field is None or row.get(field) is None:
        return None
    value = row[field]
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = float(value)
        except ValueError:
            raise DataError("bad_value", f"{value!r:.40} is not a number", field=field) from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DataError("bad_value", f"{value!r:.40} is not a finite number", field=field)
    return float(value)


def optional_text(row: Mapping[str, Any], field: str | None) -> str | None:
    """A text field that may be unset, absent, null or blank (then None)."""
    if field is None or row.get(field) is None:
        return None
    value = row[field]
    if not isinstance(value, str):
        raise DataError("bad_value", f"expected text, got {type(value).__name__}", field=field)
    return encodable(value, field) if value.strip() else None


def label_text(value: Any) -> str:
    """A label as text for comparison with an allowed set: ``1``, ``1.0`` and ``"1"`` → ``"1"``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def check_distinct(chosen: str, rejected: str, field: str) -> None:
    """Chosen and rejected must differ (ignoring surrounding whitespace)."""
    if chosen.strip() == rejected.strip():
        raise DataError("identical", "chosen and rejected are the same text", field=field)
