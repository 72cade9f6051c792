"""What the admin page shows: counts, agreement between labelers and per-labeler statistics.

Pure functions over :class:`~nlhf.label.store.LabelRecord` lists; no database access.

    from nlhf.label.stats import summarize
    summary = summarize(store.label_records(), *store.task_counts(k))
    summary.fleiss_kappa, summary.pairs[0].kappa, summary.labelers[0].left_rate

Agreement is measured on votes (a, b, tie); skips and can't-tell votes (``unclear``, clip
tasks) say "cannot judge" and are left out of it, but counted in ``choices``.
Cohen's κ is reported for every pair of labelers with at least ``min_shared`` tasks voted on
by both; Fleiss' κ over every task with two votes or more.  ``left_rate`` is the share of a
labeler's a/b votes that went to the response shown on the left: far from 0.5 over many
labels suggests position bias (the order is drawn at random per assignment).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from nlhf.label.agreement import cohen_kappa, fleiss_kappa, observed_agreement
from nlhf.label.store import LabelRecord

VOTES = ("a", "b", "tie")
ANSWERS = (*VOTES, "unclear", "skip")  # what choices counts


@dataclass(frozen=True)
class LabelerStats:
    name: str
    labels: int
    choices: dict[str, int]  # a, b, tie, unclear, skip
    left_rate: float  # NaN without a/b votes
    median_seconds: float  # NaN without labels
    agreement: float  # share of (own vote, other's vote) pairs on the same task that match
    compared: int  # how many such pairs


@dataclass(frozen=True)
class PairAgreement:
    first: str
    second: str
    shared: int  # tasks both voted on
    agreement: float  # share of those where they gave the same vote
    kappa: float  # Cohen's κ; NaN if undefined or fewer than min_shared tasks


@dataclass(frozen=True)
class Summary:
    tasks: int
    complete: int  # tasks with k votes
    labels: int
    choices: dict[str, int]
    fleiss_kappa: float  # NaN when no task has two votes
    fleiss_items: int
    observed_agreement: float
    labelers: list[LabelerStats] = field(default_factory=list)
    pairs: list[PairAgreement] = field(default_factory=list)
    comments: list[LabelRecord] = field(default_factory=list)  # newest first


def _votes_by_task(records: Sequence[LabelRecord]) -> dict[int, dict[str, str]]:
    by_task: dict[int, dict[str, str]] = defaultdict(dict)
    for r in records:
        if r.choice in VOTES:
            by_task[r.task_id][r.labeler] = r.choice
    return by_task


def _pairs(by_task: dict[int, dict[str, str]], min_shared: int) -> list[PairAgreement]:
    shared: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for votes in by_task.values():
        for x, y in itertools.combinations(sorted(votes), 2):
            shared[(x, y)].append((votes[x], votes[y]))
    out = []
    for (x, y), pairs in sorted(shared.items()):
        first, second = zip(*pairs, strict=True)
        agree = sum(p == q for p, q in pairs) / len(pairs)
        kappa = cohen_kappa(first, second, VOTES) if len(pairs) >= min_shared else math.nan
        out.append(PairAgreement(x, y, len(pairs), agree, kappa))
    return out


def _labeler_stats(
    records: Sequence[LabelRecord], by_task: dict[int, dict[str, str]]
) -> list[LabelerStats]:
    own: dict[str, list[LabelRecord]] = defaultdict(list)
    for r in records:
        own[r.labeler].append(r)
    out = []
    for name, rows in sorted(own.items()):
        choices = Counter(r.choice for r in rows)
        sided = [r for r in rows if r.choice in ("a", "b")]
        left = sum(r.choice == r.shown_left for r in sided)
        matches = compared = 0
        for r in rows:
            if r.choice not in VOTES:
                continue
            for other, vote in by_task[r.task_id].items():
                if other != name:
                    compared += 1
                    matches += vote == r.choice
        out.append(
            LabelerStats(
                name=name,
                labels=len(rows),
                choices={c: choices.get(c, 0) for c in ANSWERS},
                left_rate=left / len(sided) if sided else math.nan,
                median_seconds=statistics.median(r.seconds for r in rows),
                agreement=matches / compared if compared else math.nan,
                compared=compared,
            )
        )
    return out


def summarize(
    records: Sequence[LabelRecord],
    tasks: int,
    complete: int,
    *,
    min_shared: int = 3,
    comments: int = 20,
) -> Summary:
    """Counts and agreement for the admin page (see the module docstring)."""
    by_task = _votes_by_task(records)
    multi = [votes for votes in by_task.values() if len(votes) >= 2]
    if multi:
        counts = [[sum(v == c for v in votes.values()) for c in VOTES] for votes in multi]
        kappa, observed = fleiss_kappa(counts), observed_agreement(counts)
    else:
        kappa = observed = math.nan
    choices = Counter(r.choice for r in records)
    with_comment = [r for r in records if r.comment][::-1][:comments]
    return Summary(
        tasks=tasks,
        complete=complete,
        labels=len(records),
        choices={c: choices.get(c, 0) for c in ANSWERS},
        fleiss_kappa=kappa,
        fleiss_items=len(multi),
        observed_agreement=observed,
        labelers=_labeler_stats(records, by_task),
        pairs=_pairs(by_task, min_shared),
        comments=with_comment,
    )
