"""Loaders: files, in-memory records and datasets.Dataset objects → validated datasets.

One driver (:func:`collect`) runs a row adapter over located rows; every loader goes through
it, so every format reports bad rows the same way: a :class:`DataError` naming file, row and
field, or, with ``skip_bad_rows=True``, a skipped row counted by kind in ``dataset.skipped``
(and a warning in the log).  A source with no usable row at all is always an error.

    from nlhf.data import LabelColumns, load_pairs, load_prompts
    pairs = load_pairs("prefs.jsonl")                          # prompt/chosen/rejected
    pairs = load_pairs("votes.csv", LabelColumns(), skip_bad_rows=True)
    print(pairs.skipped.summary())                             # "2 rows skipped: 2 bad_label"
    prompts = load_prompts("prompts.jsonl")

``allow_empty_response=None`` keeps the adapter's own default: False for the generic adapters
and SHP, True for Anthropic HH (where an empty chosen reply means "say nothing" was preferred).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from nlhf.config import ConfigError
from nlhf.data.columns import PairAdapter, PairColumns, PromptAdapter, PromptColumn
from nlhf.data.dataset import PreferenceDataset, PromptDataset
from nlhf.data.errors import DataError, Skipped
from nlhf.data.rows import RawRow, enumerate_records, read_rows

log = logging.getLogger(__name__)

R = TypeVar("R")


def collect(
    rows: Iterable[RawRow],
    convert: Callable[[Mapping[str, Any]], R],
    *,
    source: str,
    skip_bad_rows: bool = False,
) -> tuple[list[R], Skipped]:
    """Convert every row; raise the first error (located), or skip and count bad rows."""
    records: list[R] = []
    skipped = Skipped()
    for location, row in rows:
        try:
            if isinstance(row, DataError):
                raise row
            records.append(convert(row))
        except DataError as err:
            located = err.located(source, location)
            if not skip_bad_rows:
                raise located from None
            skipped.add(located)
    if not records:
        detail = f" ({skipped.summary()}; first: {_first_example(skipped)})" if skipped else ""
        raise DataError("no_rows", f"no usable rows{detail}", source=source)
    if skipped:
        log.warning("%s: %s", source, skipped.summary())
    return records, skipped


def check_source(option: str, value: str, keywords: Sequence[str]) -> None:
    """An option that names a packaged data set (one of ``keywords``) or a file: anything else,
    a typo such as ``--data hhh``, is a :class:`ConfigError` naming the option."""
    if value not in keywords and not Path(value).exists():
        known = ", ".join(keywords)
        raise ConfigError(f"{option}: {value!r} is neither a file nor one of {known}")


def _first_example(skipped: Skipped) -> str:
    return next(iter(skipped.examples.values()))[0]


def _pair_converter(
    adapter: PairAdapter, allow_empty_response: bool | None
) -> Callable[[Mapping[str, Any]], Any]:
    if allow_empty_response is None:
        return adapter
    return functools.partial(adapter, allow_empty_response=allow_empty_response)


def load_pairs(
    path: str | Path,
    adapter: PairAdapter | None = None,
    *,
    skip_bad_rows: bool = False,
    allow_empty_response: bool | None = None,
    delimiter: str | None = None,
) -> PreferenceDataset:
    """Preference pairs from a ``.jsonl``/``.csv``/``.tsv`` file (optionally ``.gz``)."""
    adapter = adapter or PairColumns()
    records, skipped = collect(
        read_rows(path, delimiter=delimiter),
        _pair_converter(adapter, allow_empty_response),
        source=str(path),
        skip_bad_rows=skip_bad_rows,
    )
    return PreferenceDataset(records, name=Path(path).name, skipped=skipped)


def load_prompts(
    path: str | Path,
    adapter: PromptAdapter | None = None,
    *,
    skip_bad_rows: bool = False,
    delimiter: str | None = None,
) -> PromptDataset:
    """Prompts from a ``.jsonl``/``.csv``/``.tsv`` file (optionally ``.gz``)."""
    records, skipped = collect(
        read_rows(path, delimiter=delimiter),
        adapter or PromptColumn(),
        source=str(path),
        skip_bad_rows=skip_bad_rows,
    )
    return PromptDataset(records, name=Path(path).name, skipped=skipped)


def pairs_from_records(
    records: Iterable[Mapping[str, Any]],
    adapter: PairAdapter | None = None,
    *,
    name: str = "records",
    skip_bad_rows: bool = False,
    allow_empty_response: bool | None = None,
) -> PreferenceDataset:
    """Preference pairs from in-memory rows (dicts); errors say ``row i`` (0-based)."""
    pairs, skipped = collect(
        enumerate_records(records),
        _pair_converter(adapter or PairColumns(), allow_empty_response),
        source=name,
        skip_bad_rows=skip_bad_rows,
    )
    return PreferenceDataset(pairs, name=name, skipped=skipped)


def prompts_from_records(
    records: Iterable[Mapping[str, Any]],
    adapter: PromptAdapter | None = None,
    *,
    name: str = "records",
    skip_bad_rows: bool = False,
) -> PromptDataset:
    """Prompts from in-memory rows (dicts, or a datasets.Dataset); errors say ``row i``."""
    prompts, skipped = collect(
        enumerate_records(records),
        adapter or PromptColumn(),
        source=name,
        skip_bad_rows=skip_bad_rows,
    )
    return PromptDataset(prompts, name=name, skipped=skipped)


def from_hf_dataset(
    dataset: Any,
    adapter: PairAdapter | None = None,
    *,
    name: str | None = None,
    skip_bad_rows: bool = False,
    allow_empty_response: bool | None = None,
) -> PreferenceDataset:
    """Preference pairs from an in-memory ``datasets.Dataset`` (nothing is downloaded).

    Missing columns are reported once, up front, with the columns the dataset has.
    Works with any adapter: ``PairColumns``, ``LabelColumns``, ``SHPRow``, ``HHRow``.
    """
    adapter = adapter or PairColumns()
    columns = getattr(dataset, "column_names", None)
    if not isinstance(columns, list):
        raise TypeError(
            f"expected a datasets.Dataset (with .column_names), got {type(dataset).__name__}"
        )
    name = name or _dataset_name(dataset)
    missing = [f for f in adapter.required_fields if f not in columns]
    if missing:
        raise DataError(
            "missing_field",
            f"the dataset has no column {missing[0]!r} (columns: {', '.join(columns)})",
            field=missing[0],
            source=name,
        )
    return pairs_from_records(
        dataset,
        adapter,
        name=name,
        skip_bad_rows=skip_bad_rows,
        allow_empty_response=allow_empty_response,
    )


def _dataset_name(dataset: Any) -> str:
    info = getattr(dataset, "info", None)
    label = getattr(info, "dataset_name", None) or getattr(info, "builder_name", None)
    return f"datasets.Dataset {label}" if label else "datasets.Dataset"
