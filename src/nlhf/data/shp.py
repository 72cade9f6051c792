"""Stanford Human Preferences (SHP) rows → preference pairs.

An SHP row is a Reddit post (``history``) with two top-level comments (``human_ref_A``,
``human_ref_B``) and ``labels``: 1 when A was preferred, 0 when B was.  ``score_ratio`` (score
of the preferred comment over the other, ≥ 1) becomes the pair's ``margin`` when present, and
``domain`` (the subreddit) is appended to the source, e.g. ``"shp/askculinary"``.

    from nlhf.data import SHPRow, from_hf_dataset, load_shp
    pairs = load_shp("askculinary_train.json")        # SHP ships JSON lines per subreddit
    pairs = from_hf_dataset(shp_dataset, SHPRow())     # an in-memory datasets.Dataset
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nlhf.data import fields
from nlhf.data.dataset import PreferenceDataset
from nlhf.data.errors import DataError
from nlhf.data.loader import load_pairs
from nlhf.data.schema import PreferencePair


@dataclass(frozen=True)
class SHPRow:
    """Row adapter for SHP: ``labels`` 1 → A preferred, 0 → B preferred."""

    source: str = "shp"

    @property
    def required_fields(self) -> tuple[str, ...]:
        return ("history", "human_ref_A", "human_ref_B", "labels")

    def __call__(
        self, row: Mapping[str, Any], *, allow_empty_response: bool = False
    ) -> PreferencePair:
        prompt = fields.text(row, "history")
        a = fields.text(row, "human_ref_A", allow_empty=allow_empty_response)
        b = fields.text(row, "human_ref_B", allow_empty=allow_empty_response)
        label = fields.label_text(fields.require(row, "labels"))
        if label == "1":
            chosen, rejected = a, b
        elif label == "0":
            chosen, rejected = b, a
        else:
            raise DataError("bad_label", f"{label!r:.40} is not 0 or 1", field="labels")
        fields.check_distinct(a, b, "human_ref_B")
        domain = fields.optional_text(row, "domain")
        return PreferencePair(
            prompt,
            chosen,
            rejected,
            margin=fields.optional_number(row, "score_ratio"),
            source=f"{self.source}/{domain}" if domain else self.source,
        )


def load_shp(
    path: str | Path, *, skip_bad_rows: bool = False, allow_empty_response: bool = False
) -> PreferenceDataset:
    """Pairs from an SHP file (JSON lines, even when named ``*.json`` as SHP does; or CSV)."""
    return load_pairs(
        path, SHPRow(), skip_bad_rows=skip_bad_rows, allow_empty_response=allow_empty_response
    )
