"""Labels → preference pairs in the project's JSONL schema (what ``nlhf.data.load_pairs`` reads).

    from nlhf.label.export import ExportOptions, preference_rows
    rows = preference_rows(store.tasks(), store.label_records(), ExportOptions(ties="half"))

One JSON object per line with ``prompt`` (text or chat turns, as imported), ``chosen``,
``rejected``, ``weight``, ``margin`` and ``source``, plus the labeling record: ``task_id``,
``votes`` (``{"chosen": n, "rejected": n, "tie": n}``), ``labelers`` (number of votes) and
``agreement`` (share of pairs of labelers that agree on the task; null with one vote), or,
with ``aggregate="votes"``, the ``labeler`` who gave the vote.  A clip task's row has the
clips' names (file paths, or ``sha256:<hex>``) as ``chosen``/``rejected`` and their hashes as
``chosen_clip``/``rejected_clip`` (the ``media`` table holds the bytes).

How votes become pairs:

- ``aggregate="majority"`` (default): one pair per task with at least ``min_votes`` votes.
  The outcome is the plurality of {A, B, tie}; when A and B share the top count the outcome
  is a tie; when one side shares it with tie, that side wins.  ``margin`` is
  (votes for chosen − votes for rejected) / votes, in (0, 1].
- ``aggregate="votes"``: one pair per vote (several rows per task; more votes, more weight).
- Skips and can't-tell votes (``unclear``) are never exported: a skip passes the task on, a
  can't-tell vote counts toward the task's ``k`` but says nothing about which is better.
- Ties (a tie outcome, or a tie vote) are dropped by default; ``ties="half"`` writes both
  orders with ``weight`` 0.5 each (``margin`` 0), so a Bradley–Terry loss sees P = ½.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nlhf.config import Checked
from nlhf.data.dataset import write_jsonl
from nlhf.label.store import LabelRecord, LabelStore, Task

DEFAULT_SOURCE = "nlhf-label"


@dataclass(frozen=True)
class ExportOptions(Checked):
    aggregate: Literal["majority", "votes"] = "majority"
    ties: Literal["drop", "half"] = "drop"
    min_votes: int = 1

    def check(self) -> None:
        if self.aggregate not in ("majority", "votes"):
            raise ValueError(f"aggregate must be majority or votes, got {self.aggregate!r}")
        if self.ties not in ("drop", "half"):
            raise ValueError(f"ties must be drop or half, got {self.ties!r}")
        self.at_least(1, "min_votes")


def outcome(a: int, b: int, tie: int) -> str:
    """The majority outcome of one task's votes: ``a``, ``b`` or ``tie`` (module docstring)."""
    top = max(a, b, tie)
    if top == 0 or a == b == top:
        return "tie"
    if a == top:
        return "a"
    if b == top:
        return "b"
    return "tie"


def pair_agreement(counts: Sequence[int]) -> float | None:
    """Share of pairs of votes on one task that agree; None with fewer than two votes."""
    n = sum(counts)
    if n < 2:
        return None
    return sum(c * (c - 1) for c in counts) / (n * (n - 1))


def _pair(task: Task, winner: str, weight: float, margin: float | None) -> dict[str, Any]:
    chosen, rejected = (
        (task.response_a, task.response_b) if winner == "a" else (task.response_b, task.response_a)
    )
    row = {
        "prompt": task.prompt,
        "chosen": chosen,
        "rejected": rejected,
        "weight": weight,
        "margin": margin,
        "source": task.source or DEFAULT_SOURCE,
        "task_id": task.id,
    }
    if task.clip_a and task.clip_b:
        clips = (task.clip_a, task.clip_b) if winner == "a" else (task.clip_b, task.clip_a)
        row["chosen_clip"], row["rejected_clip"] = (clip.sha256 for clip in clips)
    return row


def _both_orders(task: Task) -> Iterator[dict[str, Any]]:
    for side in ("a", "b"):
        yield _pair(task, side, 0.5, 0.0)


def _majority_rows(task: Task, counts: Counter[str], options: ExportOptions) -> list[dict]:
    a, b, tie = counts["a"], counts["b"], counts["tie"]
    n = a + b + tie
    result = outcome(a, b, tie)
    if result == "tie":
        rows = list(_both_orders(task)) if options.ties == "half" else []
    else:
        won, lost = (a, b) if result == "a" else (b, a)
        rows = [_pair(task, result, 1.0, (won - lost) / n)]
    for row in rows:
        for_chosen = a if row["chosen"] == task.response_a else b
        row["votes"] = {"chosen": for_chosen, "rejected": a + b - for_chosen, "tie": tie}
        row["labelers"] = n
        row["agreement"] = pair_agreement([a, b, tie])
    return rows


def _vote_rows(task: Task, records: list[LabelRecord], options: ExportOptions) -> list[dict]:
    rows = []
    for r in records:
        if r.choice == "tie":
            pairs = list(_both_orders(task)) if options.ties == "half" else []
        else:
            pairs = [_pair(task, r.choice, 1.0, None)]
        for row in pairs:
            row["labeler"] = r.labeler
            rows.append(row)
    return rows


def preference_rows(
    tasks: Mapping[int, Task], records: Sequence[LabelRecord], options: ExportOptions
) -> list[dict[str, Any]]:
    """The export rows, in task order (see the module docstring)."""
    by_task: dict[int, list[LabelRecord]] = defaultdict(list)
    for r in records:
        if r.choice in ("a", "b", "tie"):
            by_task[r.task_id].append(r)
    rows: list[dict[str, Any]] = []
    for task_id in sorted(by_task):
        votes = by_task[task_id]
        if len(votes) < options.min_votes:
            continue
        task = tasks[task_id]
        if options.aggregate == "majority":
            rows.extend(_majority_rows(task, Counter(r.choice for r in votes), options))
        else:
            rows.extend(_vote_rows(task, votes, options))
    return rows


def export_rows(store: LabelStore, options: ExportOptions) -> list[dict[str, Any]]:
    return preference_rows(store.tasks(), store.label_records(), options)


def to_jsonl(rows: Sequence[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_export(store: LabelStore, path: str | Path, options: ExportOptions) -> int:
    """Write the export to ``path`` atomically (gzip when it ends in ``.gz``); returns rows."""
    rows = export_rows(store, options)
    write_jsonl(path, rows)
    return len(rows)
