"""Comparison tasks: a prompt and two responses (A and B), or an instruction and two clips.

    from nlhf.label.tasks import TaskColumns, TaskInput, read_tasks
    tasks = read_tasks("pairs.jsonl")                      # prompt / response_a / response_b
    tasks = read_tasks("pairs.csv", TaskColumns(prompt="question", response_a="left",
                                                response_b="right"))
    tasks = read_tasks("clips.jsonl")                      # instruction / clip_a / clip_b
    task = TaskInput.for_clips("Which agent plays better?", Clip.of(gif_a), Clip.of(gif_b))

Input rows (JSONL, JSON, CSV or TSV, optionally ``.gz``; read by :mod:`nlhf.data`) have a
``prompt`` (text, or a list of ``{"role", "content"}`` chat turns in JSON), ``response_a``
and ``response_b`` (non-empty, different texts) and optionally ``source`` and ``info`` (a
JSON object kept with the task).  A row with ``clip_a`` / ``clip_b`` (paths of GIF or WebM
files, relative to the task file) is a clip task; its ``instruction`` (or ``prompt``) is the
text shown above the pair, and the paths stand in for the responses.  A bad row raises
:class:`nlhf.data.DataError` naming file, line and field, or is skipped and counted with
``skip_bad_rows=True``.  A task's identity is a hash of its content, clips included
(:attr:`TaskInput.key`), so importing the same file twice adds nothing the second time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nlhf.config import Checked
from nlhf.data import DataError, PromptContent, Skipped
from nlhf.data import fields as data_fields
from nlhf.data.loader import collect
from nlhf.data.rows import read_rows
from nlhf.data.schema import as_prompt_content, prompt_to_json
from nlhf.label.media import Clip, read_clip


@dataclass(frozen=True)
class TaskInput(Checked):
    """One comparison to label: ``response_a`` vs ``response_b`` for ``prompt``."""

    prompt: PromptContent
    response_a: str
    response_b: str
    source: str | None = None
    info: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    clip_a: Clip | None = None  # a clip task: the responses are the clips' names
    clip_b: Clip | None = None

    @classmethod
    def for_clips(
        cls,
        instruction: str,
        clip_a: Clip,
        clip_b: Clip,
        names: tuple[str, str] | None = None,
        *,
        source: str | None = None,
        info: dict[str, Any] | None = None,
    ) -> TaskInput:
        """A clip task; ``names`` (default ``sha256:<hex>``) stand in for the responses."""
        a, b = names or (f"sha256:{clip_a.sha256}", f"sha256:{clip_b.sha256}")
        return cls(instruction, a, b, source, info or {}, clip_a, clip_b)

    def check(self) -> None:
        object.__setattr__(self, "prompt", as_prompt_content(self.prompt))
        self._check_clips()
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

    def _check_clips(self) -> None:
        if self.clip_a is None and self.clip_b is None:
            return
        if self.clip_a is None or self.clip_b is None:
            missing = "clip_a" if self.clip_a is None else "clip_b"
            raise DataError("missing_field", "a clip task needs two clips", field=missing)
        if not isinstance(self.prompt, str):
            raise DataError("bad_value", "a clip task's instruction must be text", field="prompt")
        if self.clip_a.sha256 == self.clip_b.sha256:
            raise DataError("identical", "clip A and clip B are the same clip", field="clip_b")

    @property
    def clips(self) -> tuple[Clip, Clip] | None:
        return (self.clip_a, self.clip_b) if self.clip_a and self.clip_b else None

    @property
    def prompt_json(self) -> str:
        """The prompt as stored: JSON text of a string or of a list of turns."""
        return json.dumps(prompt_to_json(self.prompt), ensure_ascii=False)

    @property
    def key(self) -> str:
        """sha256 of prompt, both responses and both clips' hashes: equal content, equal key."""
        content: list[Any] = [prompt_to_json(self.prompt), self.response_a, self.response_b]
        if self.clips:
            content += [clip.sha256 for clip in self.clips]
        blob = json.dumps(content)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TaskColumns:
    """Field names of a task file."""

    prompt: str = "prompt"
    response_a: str = "response_a"
    response_b: str = "response_b"
    source: str | None = "source"
    info: str | None = "info"
    clip_a: str = "clip_a"
    clip_b: str = "clip_b"
    instruction: str = "instruction"
    base: Path | None = None  # where relative clip paths start (read_tasks: the file's folder)

    @property
    def required_fields(self) -> tuple[str, ...]:
        return (self.prompt, self.response_a, self.response_b)

    def __call__(self, row: Mapping[str, Any]) -> TaskInput:
        if self.clip_a in row or self.clip_b in row:
            return self._clip_task(row)
        prompt = as_prompt_content(data_fields.require(row, self.prompt), field=self.prompt)
        a = data_fields.text(row, self.response_a)
        b = data_fields.text(row, self.response_b)
        if a.strip() == b.strip():
            raise DataError(
                "identical", "response A and response B are the same text", field=self.response_b
            )
        return TaskInput(
            prompt, a, b, source=data_fields.optional_text(row, self.source), info=self._info(row)
        )

    def _info(self, row: Mapping[str, Any]) -> dict[str, Any]:
        info = row.get(self.info) if self.info else None
        if info is not None and not isinstance(info, dict):
            raise DataError(
                "bad_value", f"expected a JSON object, got {type(info).__name__}", field=self.info
            )
        return info or {}

    def _clip_task(self, row: Mapping[str, Any]) -> TaskInput:
        where = self.instruction if row.get(self.instruction) is not None else self.prompt
        if row.get(where) is None:
            raise DataError(
                "missing_field",
                f"a clip task needs its instruction in {self.instruction!r} or {self.prompt!r}",
                field=self.instruction,
            )
        instruction = data_fields.text(row, where)
        base = self.base or Path()
        path_a, path_b = data_fields.text(row, self.clip_a), data_fields.text(row, self.clip_b)
        a = read_clip(path_a, base, field=self.clip_a)
        b = read_clip(path_b, base, field=self.clip_b)
        source = data_fields.optional_text(row, self.source)
        return TaskInput(instruction, path_a, path_b, source, self._info(row), a, b)


def read_tasks(
    path: str | Path,
    columns: TaskColumns | None = None,
    *,
    skip_bad_rows: bool = False,
) -> tuple[list[TaskInput], Skipped]:
    """The tasks of a file and the tally of bad rows skipped (empty unless ``skip_bad_rows``)."""
    columns = columns or TaskColumns()
    if columns.base is None:
        columns = replace(columns, base=Path(path).parent)
    tasks, skipped = collect(
        read_rows(path), columns, source=str(path), skip_bad_rows=skip_bad_rows
    )
    return tasks, skipped
