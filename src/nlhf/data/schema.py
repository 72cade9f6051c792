"""The two record types of the data package: a prompt, and a preference pair over two responses.

A prompt is either plain text or a chat: a tuple of :class:`Turn` (role ``system``, ``user`` or
``assistant``).  Lists of ``{"role", "content"}`` dicts are accepted wherever a prompt is and
turned into turns, so records stay frozen and hashable (pairs can be grouped by prompt).

    from nlhf.data import PreferencePair, Prompt
    pair = PreferencePair([{"role": "user", "content": "Hi"}], chosen="Hello!", rejected="Go away.")
    pair.prompt            # (Turn(role='user', content='Hi'),)
    pair.to_dict()         # JSON-ready; PreferenceDataset.to_jsonl writes one per line

The records check types and values on construction (raising :class:`DataError` naming the
field; every text must be writable as UTF-8, so no lone surrogates).  An empty *response* is
allowed by the record itself: loaders reject it unless asked not to
(``allow_empty_response``), because in Anthropic HH "say nothing" is a real preference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nlhf.data.errors import DataError
from nlhf.data.fields import encodable

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Turn:
    """One chat message."""

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise DataError("bad_value", f"role {self.role!r} is not one of {ROLES}", field="role")
        if not isinstance(self.content, str):
            raise DataError(
                "bad_value", f"expected text, got {type(self.content).__name__}", field="content"
            )
        encodable(self.content, "content")

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


PromptContent = str | tuple[Turn, ...]
"""Plain prompt text, or the chat turns before the response."""


def as_prompt_content(value: Any, field: str = "prompt") -> PromptContent:
    """Normalize ``value`` (text, turns, or ``{"role", "content"}`` dicts) to a prompt.

    Raises :class:`DataError` (kind ``empty_text``) when there is no text at all, and
    (``bad_value``) for anything that is neither text nor a sequence of chat turns.
    """
    if isinstance(value, Prompt):
        value = value.content
    if isinstance(value, str):
        if not value.strip():
            raise DataError("empty_text", "empty prompt", field=field)
        return encodable(value, field)
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        turns = []
        for i, item in enumerate(value):
            if isinstance(item, Turn):
                turns.append(item)
                continue
            if not isinstance(item, Mapping) or "role" not in item or "content" not in item:
                raise DataError(
                    "bad_value",
                    f"chat turn {i} must be a mapping with 'role' and 'content', got {item!r:.80}",
                    field=field,
                )
            try:
                turns.append(Turn(item["role"], item["content"]))
            except DataError as err:
                raise DataError("bad_value", f"chat turn {i}: {err.reason}", field=field) from None
        if not any(turn.content.strip() for turn in turns):
            raise DataError("empty_text", "empty prompt (no turn has text)", field=field)
        return tuple(turns)
    raise DataError(
        "bad_value",
        f"expected text or a list of chat turns, got {type(value).__name__}",
        field=field,
    )


def prompt_messages(prompt: PromptContent) -> list[dict[str, str]]:
    """The prompt as chat messages; plain text becomes a single user turn."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [turn.to_dict() for turn in prompt]


def prompt_to_json(prompt: PromptContent) -> str | list[dict[str, str]]:
    """The prompt as stored in JSONL: text as is, turns as a list of dicts."""
    return prompt if isinstance(prompt, str) else [turn.to_dict() for turn in prompt]


def _check_number(value: Any, field: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError("bad_value", f"expected a number, got {value!r:.40}", field=field)
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        need = "a finite number > 0" if positive else "a finite number"
        raise DataError("bad_value", f"{value} is not {need}", field=field)
    return value


def _check_source(value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise DataError("bad_value", f"expected text, got {type(value).__name__}", field="source")
    if value is not None:
        encodable(value, "source")


@dataclass(frozen=True)
class Prompt:
    """A prompt to sample responses for: text or chat turns, and where it came from."""

    content: PromptContent
    source: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", as_prompt_content(self.content))
        _check_source(self.source)

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": prompt_to_json(self.content), "source": self.source}


@dataclass(frozen=True)
class PreferencePair:
    """A judgement that ``chosen`` is a better response to ``prompt`` than ``rejected``.

    ``weight`` scales the pair in a loss (> 0); ``margin`` is an optional strength of the
    preference in the units of its source (SHP: the score ratio, ≥ 1); ``source`` names the
    data set or file it came from.
    """

    prompt: PromptContent
    chosen: str
    rejected: str
    weight: float = 1.0
    margin: float | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt", as_prompt_content(self.prompt))
        for name in ("chosen", "rejected"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise DataError(
                    "bad_value", f"expected text, got {type(value).__name__}", field=name
                )
            encodable(value, name)
        if self.chosen.strip() == self.rejected.strip():
            raise DataError("identical", "chosen and rejected are the same text", field="rejected")
        object.__setattr__(self, "weight", _check_number(self.weight, "weight", positive=True))
        if self.margin is not None:
            object.__setattr__(self, "margin", _check_number(self.margin, "margin", positive=False))
        _check_source(self.source)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": prompt_to_json(self.prompt),
            "chosen": self.chosen,
            "rejected": self.rejected,
            "weight": self.weight,
            "margin": self.margin,
            "source": self.source,
        }
