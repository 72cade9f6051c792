"""Comparison tasks: a prompt and two responses (A and B) for people to compare.

    from nlhf.label.tasks import TaskColumns, read_tasks
    tasks = read_tasks("pairs.jsonl")                      # prompt / response_a / response_b
    tasks = read_tasks("pairs.csv", TaskColumns(prompt="question", response_a="left",
                                                response_b="right"))

Input rows (JSONL, JSON, CSV or TSV, optionally ``.gz``; read by :mod:`nlhf.data`) have a
``prompt`` (text, or a list of ``{"role", "content"}`` chat turns in JSON), ``response_a``
and ``response_b`` (non-empty, different texts) and optionally ``source`` (text) and
``info`` (a JSON object, e.g. which model wrote which response; kept with the task).  Field
names are configurable.  A bad row raises :class:`nlhf.data.DataError` naming file, line and
field, or is skipped and counted with ``skip_bad_rows=True``.

A task's identity is a hash of its content (:attr:`TaskInput.key`), so importing the same
file twice adds nothing the second time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlhf.data import DataError, PromptContent, Skipped
from nlhf.data import fields as data_fields
from nlhf.data.loader import collect
from nlhf.data.rows import read_rows
from nlhf.data.schema import as_prompt_content, prompt_to_json


@dataclass(frozen=True)
class TaskInput:
    """One comparison to label: ``response_a`` vs ``response_b`` for ``prompt``."""

    prompt: PromptContent
    response_a: str
    response_b: str
    source: str | None = None
    info: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt", as_prompt_content(self.prompt))
        for name in ("response_a", "response_b"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise DataError(
                    "bad_value", f"expected text, got {type(value).__name__}", field=name
                )
            if not value.strip():
                raise DataError("empty_text", "empty text", field=name)
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    reason = f"not valid Unicode ({exc.reason} at character {exc.start})"
                    raise DataError("bad_value", reason, field=name) from None
        if self.response_a.strip() == self.response_b.strip():
            raise DataError(
                "identical", "response_a and response_b are the same text", field="response_b"
            )

    @property
    def prompt_json(self) -> str:
        """The prompt as stored: JSON text of a string or of a list of turns."""
        return json.dumps(prompt_to_json(self.prompt), ensure_ascii=False)

    @property
    def key(self) -> str:
        """sha256 of prompt and both responses: equal content, equal key."""
        blob = json.dumps([prompt_to_json(self.prompt), self.response_a, self.response_b])
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TaskColumns:
    """Field names of a task file."""

    prompt: str = "prompt"
    response_a: str = "response_a"
    response_b: str = "response_b"
    source: str | None = "source"
    info: str | None = "info"

    @property
    def required_fields(self) -> tuple[str, ...]:
        return (self.prompt, self.response_a, self.response_b)

    def __call__(self, row: Mapping[str, Any]) -> TaskInput:
        prompt = as_prompt_content(data_fields.require(row, self.prompt), field=self.prompt)
        a = data_fields.text(row, self.response_a)
        b = data_fields.text(row, self.response_b)
        if a.strip() == b.strip():
            raise DataError(
                "identical", "response A and response B are the same text", field=self.response_b
            )
        info = row.get(self.info) if self.info else None
        if info is not None and not isinstance(info, dict):
            raise DataError(
                "bad_value", f"expected a JSON object, got {type(info).__name__}", field=self.info
            )
        return TaskInput(
            prompt, a, b, source=data_fields.optional_text(row, self.source), info=info or {}
        )


def read_tasks(
    path: str | Path,
    columns: TaskColumns | None = None,
    *,
    skip_bad_rows: bool = False,
) -> tuple[list[TaskInput], Skipped]:
    """The tasks of a file and the tally of bad rows skipped (empty unless ``skip_bad_rows``)."""
    tasks, skipped = collect(
        read_rows(path), columns or TaskColumns(), source=str(path), skip_bad_rows=skip_bad_rows
    )
    return tasks, skipped
