"""Labels → preference pairs: majority rule, ties, skips, per-vote rows, loading with nlhf.data."""

import gzip
import json

import pytest

from nlhf.data import load_pairs
from nlhf.label.export import ExportOptions, outcome, pair_agreement, preference_rows, write_export
from nlhf.label.store import LabelRecord, LabelStore, Task
from nlhf.label.tasks import TaskInput


def task(i, prompt="p"):
    return Task(i, prompt, f"A{i}", f"B{i}", None, {}, 0)


def votes(task_id, *choices):
    return [
        LabelRecord(100 * task_id + j, 100 * task_id + j, task_id, j, f"l{j}", c, "a", "", 1.0, 0.0)
        for j, c in enumerate(choices)
    ]


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ((2, 1, 0), "a"),
        ((0, 3, 1), "b"),
        ((1, 1, 0), "tie"),
        ((1, 1, 1), "tie"),
        ((1, 0, 2), "tie"),
        ((2, 0, 2), "a"),  # a side sharing the top with tie wins
        ((0, 0, 0), "tie"),
    ],
)
def test_outcome(counts, expected):
    assert outcome(*counts) == expected


def test_pair_agreement():
    assert pair_agreement([1, 0, 0]) is None
    assert pair_agreement([2, 0, 0]) == 1.0
    assert pair_agreement([1, 1, 0]) == 0.0
    assert pair_agreement([2, 1, 0]) == pytest.approx(1 / 3)


def test_majority_rows_and_metadata():
    tasks = {1: task(1), 2: task(2), 3: task(3)}
    records = votes(1, "b", "b", "a") + votes(2, "a", "b") + votes(3, "skip", "skip")
    (row,) = preference_rows(tasks, records, ExportOptions())
    assert (row["chosen"], row["rejected"], row["weight"]) == ("B1", "A1", 1.0)
    assert row["margin"] == pytest.approx(1 / 3)
    assert row["votes"] == {"chosen": 2, "rejected": 1, "tie": 0}
    assert row["labelers"] == 3 and row["agreement"] == pytest.approx(1 / 3)
    assert row["task_id"] == 1 and row["source"] == "nlhf-label"


def test_ties_half_writes_both_orders_with_half_weight():
    tasks = {2: task(2)}
    rows = preference_rows(tasks, votes(2, "a", "b", "tie"), ExportOptions(ties="half"))
    assert sorted((r["chosen"], r["weight"], r["margin"]) for r in rows) == [
        ("A2", 0.5, 0.0),
        ("B2", 0.5, 0.0),
    ]
    by_chosen = {r["chosen"]: r["votes"] for r in rows}
    assert by_chosen["A2"] == {"chosen": 1, "rejected": 1, "tie": 1}


def test_votes_mode_and_min_votes():
    tasks = {1: task(1), 2: task(2)}
    records = votes(1, "a", "b", "tie", "skip") + votes(2, "a")
    rows = preference_rows(tasks, records, ExportOptions(aggregate="votes"))
    assert [(r["task_id"], r["chosen"], r["labeler"]) for r in rows] == [
        (1, "A1", "l0"),
        (1, "B1", "l1"),
        (2, "A2", "l0"),
    ]
    rows = preference_rows(tasks, records, ExportOptions(aggregate="votes", ties="half"))
    assert len(rows) == 5
    rows = preference_rows(tasks, records, ExportOptions(min_votes=2))
    assert [r["task_id"] for r in rows] == []  # task 1 is a tie (dropped), task 2 has one vote


def test_bad_options():
    with pytest.raises(ValueError, match="min_votes"):
        ExportOptions(min_votes=0)
    with pytest.raises(ValueError, match="ties"):
        ExportOptions(ties="keep")


def test_export_from_store_loads_with_the_data_module(tmp_path):
    store = LabelStore(str(tmp_path / "l.sqlite"))
    store.add_tasks(
        [
            TaskInput("Say hi", "Hello!", "Go away."),
            TaskInput([{"role": "user", "content": "2+2?"}], "4", "5"),
            TaskInput("Pick", "left one", "right one"),
        ]
    )
    ann = store.labeler_for_name("ann")
    answers = ["left", "right", "tie"]
    for answer in answers:
        job = store.next_assignment(ann.id, k=1)
        store.submit(ann.id, job.id, answer, k=1)
    out = tmp_path / "prefs.jsonl.gz"
    assert write_export(store, out, ExportOptions(ties="half")) == 4
    lines = [json.loads(line) for line in gzip.open(out, "rt")]
    assert len(lines) == 4
    pairs = load_pairs(out)
    assert len(pairs) == 4
    chat = [p for p in pairs if not isinstance(p.prompt, str)]
    assert chat and chat[0].prompt[0].content == "2+2?"
    assert sorted(p.weight for p in pairs) == [0.5, 0.5, 1.0, 1.0]
    store.close()
