"""Anthropic HH-RLHF rows (full ``chosen``/``rejected`` dialogues) → prompt turns + two replies.

Each HH row holds two whole dialogues written as ``"\\n\\nHuman: …\\n\\nAssistant: …"`` that
share every turn but the last reply.  The prompt ends at the *last* ``"\\n\\nAssistant:"`` that
lies entirely before the first character where the two dialogues differ, not at the last one in
the text: some replies contain invented ``Human:``/``Assistant:`` turns of their own, which stay
part of that reply (it is what the labeller judged).  The prompt is kept as chat turns
(``Human`` → ``user``, ``Assistant`` → ``assistant``, text stripped); the replies are stripped.

Empty replies are allowed by default here (``allow_empty_response=True``): in the shipped
harmless-base test file four rows (0-based indices 86, 516, 925, 1103; file lines 87, 517, 926,
1104) prefer an empty reply, i.e. saying nothing, and they are kept.  Pass
``allow_empty_response=False`` to treat them as bad rows instead.

    from nlhf.data import load_hh_harmless
    pairs = load_hh_harmless()          # 2,312 pairs, packaged with nlhf
    python -m nlhf.data                 # counts and length statistics of the packaged file
"""

from __future__ import annotations

import errno
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from nlhf.data import fields
from nlhf.data.dataset import PreferenceDataset
from nlhf.data.errors import DataError
from nlhf.data.loader import load_pairs
from nlhf.data.schema import PreferencePair, Turn

ASSISTANT = "\n\nAssistant:"
_TURN = re.compile(r"\n\n(Human|Assistant):")
_ROLE = {"Human": "user", "Assistant": "assistant"}
HH_HARMLESS_FILE = "hh-rlhf-harmless-base-test.jsonl.gz"
HH_HARMLESS_SOURCE = "hh-rlhf/harmless-base/test"


def _common_prefix_length(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low] and a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid
    return low


def split_hh_dialogue(chosen: str, rejected: str) -> tuple[str, str, str]:
    """Split two HH dialogues into (shared prompt text, chosen reply, rejected reply), unstripped.

    ``prompt + ASSISTANT + reply`` gives back each dialogue exactly.
    """
    if chosen == rejected:
        raise DataError("identical", "chosen and rejected are the same dialogue", field="rejected")
    differ = _common_prefix_length(chosen, rejected)
    cut = chosen.rfind(ASSISTANT, 0, differ)
    if cut < 0:
        raise DataError(
            "bad_value",
            "no '\\n\\nAssistant:' turn before the point where chosen and rejected differ "
            f"(character {differ})",
            field="chosen",
        )
    start = cut + len(ASSISTANT)
    return chosen[:cut], chosen[start:], rejected[start:]


def parse_hh_turns(text: str, field: str = "chosen") -> tuple[Turn, ...]:
    """``"\\n\\nHuman: a\\n\\nAssistant: b"`` → user/assistant turns with stripped text."""
    parts = _TURN.split(text)
    if parts[0].strip():
        raise DataError(
            "bad_value",
            f"text before the first 'Human:' turn: {parts[0].strip()!r:.60}",
            field=field,
        )
    if len(parts) == 1:
        raise DataError("bad_value", "the dialogue has no 'Human:' turn", field=field)
    return tuple(
        Turn(_ROLE[role], content.strip())
        for role, content in zip(parts[1::2], parts[2::2], strict=True)
    )


@dataclass(frozen=True)
class HHRow:
    """Row adapter for HH-RLHF ``{"chosen": dialogue, "rejected": dialogue}`` rows."""

    chosen: str = "chosen"
    rejected: str = "rejected"
    source: str = "hh-rlhf"

    @property
    def required_fields(self) -> tuple[str, ...]:
        return (self.chosen, self.rejected)

    def __call__(
        self, row: Mapping[str, Any], *, allow_empty_response: bool = True
    ) -> PreferencePair:
        chosen_text = fields.text(row, self.chosen)
        rejected_text = fields.text(row, self.rejected)
        try:
            prompt, chosen, rejected = split_hh_dialogue(chosen_text, rejected_text)
        except DataError as err:
            field = self.rejected if err.kind == "identical" else self.chosen
            raise DataError(err.kind, err.reason, field=field) from None
        turns = parse_hh_turns(prompt, field=self.chosen)
        chosen, rejected = chosen.strip(), rejected.strip()
        for name, reply in ((self.chosen, chosen), (self.rejected, rejected)):
            if not allow_empty_response and not reply:
                raise DataError("empty_text", "empty final reply", field=name)
        fields.check_distinct(chosen, rejected, self.rejected)
        return PreferencePair(turns, chosen, rejected, source=self.source)


def load_hh(
    path: str | Path,
    *,
    skip_bad_rows: bool = False,
    allow_empty_response: bool = True,
    source: str = "hh-rlhf",
) -> PreferenceDataset:
    """Pairs from an HH-RLHF JSONL file (``.jsonl`` or ``.jsonl.gz``)."""
    return load_pairs(
        path,
        HHRow(source=source),
        skip_bad_rows=skip_bad_rows,
        allow_empty_response=allow_empty_response,
    )


def hh_harmless_path() -> Path:
    """The packaged HH-RLHF harmless-base test file (2,312 rows; see data/README.md)."""
    path = Path(str(resources.files("nlhf.data") / "files" / HH_HARMLESS_FILE))
    if not path.is_file():
        raise FileNotFoundError(
            errno.ENOENT,
            "the packaged HH file is missing (reinstall nlhf, or check that pyproject.toml "
            "ships nlhf/data/files/*.gz as package data)",
            str(path),
        )
    return path


def load_hh_harmless(
    *, skip_bad_rows: bool = False, allow_empty_response: bool = True
) -> PreferenceDataset:
    """The 2,312 Anthropic HH-RLHF harmless-base test pairs that ship with nlhf."""
    return load_hh(
        hh_harmless_path(),
        skip_bad_rows=skip_bad_rows,
        allow_empty_response=allow_empty_response,
        source=HH_HARMLESS_SOURCE,
    )
