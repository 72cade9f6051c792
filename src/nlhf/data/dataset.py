"""List-like containers of records: PreferenceDataset and PromptDataset.

Both are immutable sequences (``len``, indexing, slicing, iteration) that also carry the
``skipped`` tally of the loader that built them, a deterministic train/held-out ``split`` and an
atomic ``to_jsonl`` (gzip when the path ends in ``.gz``).

    train, held_out = pairs.split(test_fraction=0.2, seed=0)
    held_out.to_jsonl("runs/hh/held_out.jsonl")

The split hashes each *prompt* with the seed (blake2b), so all pairs that share a prompt land on
the same side (no prompt leaks from training into evaluation), the result does not depend on
the order of the input or on the platform, and records keep their original order on each side.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Generic, Self, TypeVar, overload

from nlhf.data.errors import Skipped
from nlhf.data.schema import PreferencePair, Prompt, prompt_to_json
from nlhf.files import atomic_path

T = TypeVar("T", PreferencePair, Prompt)


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Write one JSON object per line, atomically; gzip (reproducible bytes) if ``.gz``."""
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as raw:
        if path.suffix == ".gz":
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                _write_lines(gz, rows)
        else:
            _write_lines(raw, rows)
    return path


def _write_lines(out: BinaryIO, rows: Iterable[dict[str, Any]]) -> None:
    for row in rows:
        out.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))


class _Records(Sequence[T], Generic[T]):
    """Shared behaviour of the two dataset types."""

    def __init__(
        self, records: Iterable[T], *, name: str | None = None, skipped: Skipped | None = None
    ) -> None:
        self._records: tuple[T, ...] = tuple(records)
        self.name = name
        self.skipped = skipped if skipped is not None else Skipped()

    def _prompt_of(self, record: T) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Self: ...

    def __getitem__(self, index: int | slice) -> T | Self:
        if isinstance(index, slice):
            return type(self)(self._records[index], name=self.name)
        return self._records[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self._records)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Records) or type(other) is not type(self):
            return NotImplemented
        return self._records == other._records

    __hash__ = None  # type: ignore[assignment]  # mutable metadata; compare by records only

    def __repr__(self) -> str:
        extra = f", {self.skipped.summary()}" if self.skipped else ""
        name = f"{self.name!r}, " if self.name else ""
        return f"{type(self).__name__}({name}{len(self)} records{extra})"

    def split(
        self, test_fraction: float, seed: int = 0, *, by_prompt: bool = True
    ) -> tuple[Self, Self]:
        """Deterministic (train, held_out) split with about ``test_fraction`` held out.

        Groups (all records with the same prompt if ``by_prompt``, else identical records) are
        ordered by a seeded hash and moved to the held-out side until it holds at least
        ``round(test_fraction * len(self))`` records: exactly that many when every group has one
        record, at most one group more otherwise.
        """
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(
                f"test_fraction must lie strictly between 0 and 1, got {test_fraction}"
            )
        target = round(test_fraction * len(self))
        if target == 0 or target >= len(self):
            raise ValueError(
                f"test_fraction={test_fraction} of {len(self)} records leaves one side empty"
            )
        groups: dict[str, list[int]] = {}
        for i, record in enumerate(self._records):
            key = self._prompt_of(record) if by_prompt else record.to_dict()
            groups.setdefault(json.dumps(key, ensure_ascii=False, sort_keys=True), []).append(i)

        def rank(key: str) -> bytes:
            return hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=16).digest()

        held_out: set[int] = set()
        for key in sorted(groups, key=rank):
            if len(held_out) >= target:
                break
            held_out.update(groups[key])
        if len(held_out) == len(self):
            raise ValueError(
                f"test_fraction={test_fraction} leaves the training side empty: the {len(self)} "
                f"records fall in {len(groups)} prompt group(s), too few to split"
            )
        train = [r for i, r in enumerate(self._records) if i not in held_out]
        test = [r for i, r in enumerate(self._records) if i in held_out]
        return (
            type(self)(train, name=self.name and f"{self.name}[train]"),
            type(self)(test, name=self.name and f"{self.name}[held_out]"),
        )

    def to_jsonl(self, path: str | Path) -> Path:
        """Write every record as one JSON line (atomically; gzip if the path ends in ``.gz``)."""
        return write_jsonl(path, (record.to_dict() for record in self._records))


class PreferenceDataset(_Records[PreferencePair]):
    """An immutable sequence of :class:`PreferencePair`, read back by ``load_pairs``."""

    def _prompt_of(self, record: PreferencePair) -> Any:
        return prompt_to_json(record.prompt)


class PromptDataset(_Records[Prompt]):
    """An immutable sequence of :class:`Prompt`, read back by ``load_prompts``."""

    def _prompt_of(self, record: Prompt) -> Any:
        return prompt_to_json(record.content)
