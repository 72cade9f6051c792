"""Row adapters for generic tables (JSONL, CSV, datasets.Dataset) with configurable column names.

A *row adapter* turns one raw row (a mapping) into a record, raising :class:`DataError` that
names the bad field; the loaders add file and row number.  Two shapes of preference table:

- :class:`PairColumns`: the preferred response has its own column (``prompt``, ``chosen``,
  ``rejected``; optional ``weight``, ``margin``, ``source``).  This is also the format that
  ``PreferenceDataset.to_jsonl`` writes, so the defaults read it back.
- :class:`LabelColumns`: two responses and a label saying which one won, e.g.
  ``prompt, response_a, response_b, label`` with ``label`` in ``{"A", "B"}``.

    from nlhf.data import LabelColumns, load_pairs
    pairs = load_pairs("votes.csv", LabelColumns(prompt="question", a_labels=("1",),
                                                 b_labels=("2",)))

Prompts: :class:`PromptColumn`.  SHP and Anthropic HH have their own adapters (``shp.py``,
``hh.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from nlhf.data import fields
from nlhf.data.errors import DataError
from nlhf.data.schema import PreferencePair, Prompt, as_prompt_content


class PairAdapter(Protocol):
    """Turns a raw row into a :class:`PreferencePair`."""

    @property
    def required_fields(self) -> tuple[str, ...]: ...

    def __call__(
        self, row: Mapping[str, Any], *, allow_empty_response: bool = ...
    ) -> PreferencePair: ...


class PromptAdapter(Protocol):
    """Turns a raw row into a :class:`Prompt`."""

    @property
    def required_fields(self) -> tuple[str, ...]: ...

    def __call__(self, row: Mapping[str, Any]) -> Prompt: ...


def _prompt(row: Mapping[str, Any], field: str) -> Any:
    return as_prompt_content(fields.require(row, field), field=field)


@dataclass(frozen=True)
class PairColumns:
    """Rows with the preferred response in its own column.

    The prompt column may hold text or a list of ``{"role", "content"}`` chat turns (JSON).
    ``weight``/``margin``/``source`` columns are optional: absent, null or blank means unset.
    """

    prompt: str = "prompt"
    chosen: str = "chosen"
    rejected: str = "rejected"
    weight: str | None = "weight"
    margin: str | None = "margin"
    source: str | None = "source"

    @property
    def required_fields(self) -> tuple[str, ...]:
        return (self.prompt, self.chosen, self.rejected)

    def __call__(
        self, row: Mapping[str, Any], *, allow_empty_response: bool = False
    ) -> PreferencePair:
        prompt = _prompt(row, self.prompt)
        chosen = fields.text(row, self.chosen, allow_empty=allow_empty_response)
        rejected = fields.text(row, self.rejected, allow_empty=allow_empty_response)
        fields.check_distinct(chosen, rejected, self.rejected)
        weight = fields.optional_number(row, self.weight)
        if weight is not None and weight <= 0:
            raise DataError("bad_value", f"{weight} is not > 0", field=self.weight)
        return PreferencePair(
            prompt,
            chosen,
            rejected,
            weight=1.0 if weight is None else weight,
            margin=fields.optional_number(row, self.margin),
            source=fields.optional_text(row, self.source),
        )


@dataclass(frozen=True)
class LabelColumns:
    """Rows with two responses and a label naming the preferred one.

    Labels are compared as text after stripping (``1``, ``1.0`` and ``"1"`` all read as ``"1"``);
    a label in neither ``a_labels`` nor ``b_labels`` is a ``bad_label`` error.
    """

    prompt: str = "prompt"
    response_a: str = "response_a"
    response_b: str = "response_b"
    label: str = "label"
    a_labels: tuple[str, ...] = ("A", "a")
    b_labels: tuple[str, ...] = ("B", "b")
    margin: str | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        a_labels = tuple(fields.label_text(v) for v in self.a_labels)
        b_labels = tuple(fields.label_text(v) for v in self.b_labels)
        if not a_labels or not b_labels:
            raise ValueError("LabelColumns needs at least one label value for A and one for B")
        both = set(a_labels) & set(b_labels)
        if both:
            raise ValueError(f"label values {sorted(both)} cannot mean both A and B preferred")
        object.__setattr__(self, "a_labels", a_labels)
        object.__setattr__(self, "b_labels", b_labels)

    @property
    def required_fields(self) -> tuple[str, ...]:
        return (self.prompt, self.response_a, self.response_b, self.label)

    def __call__(
        self, row: Mapping[str, Any], *, allow_empty_response: bool = False
    ) -> PreferencePair:
        prompt = _prompt(row, self.prompt)
        a = fields.text(row, self.response_a, allow_empty=allow_empty_response)
        b = fields.text(row, self.response_b, allow_empty=allow_empty_response)
        label = fields.label_text(fields.require(row, self.label))
        if label in self.a_labels:
            chosen, rejected = a, b
        elif label in self.b_labels:
            chosen, rejected = b, a
        else:
            allowed = ", ".join(repr(v) for v in self.a_labels + self.b_labels)
            raise DataError("bad_label", f"{label!r:.40} is not one of {allowed}", field=self.label)
        fields.check_distinct(a, b, self.response_b)
        return PreferencePair(
            prompt,
            chosen,
            rejected,
            margin=fields.optional_number(row, self.margin),
            source=fields.optional_text(row, self.source),
        )


@dataclass(frozen=True)
class PromptColumn:
    """Rows with a prompt (text or chat turns) and an optional source column."""

    prompt: str = "prompt"
    source: str | None = "source"

    @property
    def required_fields(self) -> tuple[str, ...]:
        return (self.prompt,)

    def __call__(self, row: Mapping[str, Any]) -> Prompt:
        return Prompt(_prompt(row, self.prompt), source=fields.optional_text(row, self.source))
