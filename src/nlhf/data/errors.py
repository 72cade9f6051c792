"""Bad input rows: the error that names file, row and field, and the count of rows skipped.

Every loader in ``nlhf.data`` either raises :class:`DataError` at the first bad row, or, with
``skip_bad_rows=True``, skips the row and records it in a :class:`Skipped` tally that the
returned dataset carries as ``.skipped``.  A bad row is never dropped without a trace.

    from nlhf.data import DataError, load_pairs
    try:
        pairs = load_pairs("prefs.jsonl")
    except DataError as err:   # "prefs.jsonl, line 7, field 'chosen': empty text"
        print(err.kind, err.location, err.field)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from nlhf.errors import UserError

KINDS = (
    "malformed",  # the row itself cannot be read: bad JSON, wrong number of CSV fields
    "missing_field",  # a required field is absent (or null)
    "empty_text",  # a prompt or response is empty or whitespace only
    "bad_label",  # a preference label outside the allowed set
    "identical",  # chosen and rejected are the same text
    "bad_value",  # a field of the wrong type or an unusable value (a weight of -1, a role "bot")
    "no_rows",  # a file or collection with no usable row at all
)


class DataError(UserError, ValueError):
    """One bad input row (or file); the message says where (source, row) and what (field, why)."""

    def __init__(
        self,
        kind: str,
        reason: str,
        *,
        field: str | None = None,
        source: str | None = None,
        location: str | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown DataError kind {kind!r}; expected one of {KINDS}")
        self.kind = kind
        self.reason = reason
        self.field = field
        self.source = source
        self.location = location
        parts = [p for p in (source, location) if p]
        if field is not None:
            parts.append(f"field {field!r}")
        where = ", ".join(parts)
        super().__init__(f"{where}: {reason}" if where else reason)

    def located(self, source: str | None, location: str | None) -> DataError:
        """The same error with the file (or collection) name and the row position filled in."""
        return DataError(
            self.kind,
            self.reason,
            field=self.field,
            source=self.source if source is None else source,
            location=self.location if location is None else location,
        )

    def __reduce__(self):  # keep the keyword-only fields when pickled (e.g. across processes)
        return (_rebuild, (self.kind, self.reason, self.field, self.source, self.location))


def _rebuild(kind: str, reason: str, field_: str | None, source: str | None, location: str | None):
    return DataError(kind, reason, field=field_, source=source, location=location)


@dataclass
class Skipped:
    """Rows left out with ``skip_bad_rows=True``: counts per kind and the first messages."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    keep_examples: int = 3

    def add(self, error: DataError) -> None:
        self.counts[error.kind] += 1
        shown = self.examples.setdefault(error.kind, [])
        if len(shown) < self.keep_examples:
            shown.append(str(error))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __bool__(self) -> bool:
        return self.total > 0

    def summary(self) -> str:
        """E.g. ``"3 rows skipped: 2 empty_text, 1 malformed"`` or ``"no rows skipped"``."""
        if not self:
            return "no rows skipped"
        kinds = ", ".join(f"{n} {kind}" for kind, n in self.counts.most_common())
        return f"{self.total} row{'s' if self.total != 1 else ''} skipped: {kinds}"
