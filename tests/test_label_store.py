"""The labeling store: assignment rules, k votes per task, submissions, tokens, persistence."""

import random
import sqlite3
import time

import pytest

from nlhf.label.db import database_url
from nlhf.label.store import Conflict, LabelError, LabelStore, NotFound, task_choice
from nlhf.label.tasks import TaskInput


def make_tasks(n):
    return [TaskInput(f"prompt {i}", f"answer A{i}", f"answer B{i}") for i in range(n)]


@pytest.fixture
def store(tmp_path):
    s = LabelStore(str(tmp_path / "labels.sqlite"), rng=random.Random(0))
    yield s
    s.close()


def test_add_tasks_is_idempotent(store):
    assert store.add_tasks(make_tasks(3)) == (3, 0)
    assert store.add_tasks(make_tasks(4)) == (1, 3)
    assert len(store.tasks()) == 4


def test_sqlite_runs_in_wal_mode(store, tmp_path):
    store.add_tasks(make_tasks(1))
    con = sqlite3.connect(tmp_path / "labels.sqlite")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def test_database_url():
    assert database_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    assert database_url("x.sqlite").startswith("sqlite:///") and database_url("x.sqlite").endswith(
        "/x.sqlite"
    )


def test_no_labeler_sees_a_task_twice_and_k_caps_votes(store):
    store.add_tasks(make_tasks(4))
    names = [store.labeler_for_name(n) for n in ("ann", "bob", "cy")]
    seen = {lab.id: [] for lab in names}
    for _ in range(6):
        for lab in names:
            job = store.next_assignment(lab.id, k=2)
            if job is None:
                continue
            seen[lab.id].append(job.task.id)
            store.submit(lab.id, job.id, "left", k=2)
    for tasks_seen in seen.values():
        assert len(tasks_seen) == len(set(tasks_seen))
    assert all(t.votes == 2 for t in store.tasks().values())
    assert sum(len(v) for v in seen.values()) == 8
    assert all(store.next_assignment(lab.id, k=2) is None for lab in names)


def test_skip_frees_the_slot(store):
    store.add_tasks(make_tasks(1))
    ann, bob = store.labeler_for_name("ann"), store.labeler_for_name("bob")
    job = store.next_assignment(ann.id, k=1)
    assert store.next_assignment(bob.id, k=1) is None  # held by ann's open assignment
    store.submit(ann.id, job.id, "skip", k=1)
    assert store.next_assignment(ann.id, k=1) is None  # ann never sees it again
    assert store.next_assignment(bob.id, k=1).task.id == job.task.id


def test_open_assignment_is_returned_again_and_leases_expire(store):
    store.add_tasks(make_tasks(1))
    ann, bob = store.labeler_for_name("ann"), store.labeler_for_name("bob")
    first = store.next_assignment(ann.id, k=1)
    again = store.next_assignment(ann.id, k=1)
    assert (again.id, again.swapped) == (first.id, first.swapped)
    assert store.next_assignment(bob.id, k=1, lease_seconds=3600) is None
    taken = store.next_assignment(bob.id, k=1, lease_seconds=-1)  # ann's lease has expired
    assert taken is not None and taken.task.id == first.task.id
    store.submit(bob.id, taken.id, "right", k=1)
    with pytest.raises(Conflict, match="already has its 1 labels"):
        store.submit(ann.id, first.id, "left", k=1)
    assert store.next_assignment(ann.id, k=1) is None


def test_order_is_randomized_and_mapped_back(store):
    store.add_tasks(make_tasks(40))
    ann = store.labeler_for_name("ann")
    swaps = []
    for _ in range(40):
        job = store.next_assignment(ann.id, k=1)
        swaps.append(job.swapped)
        assert job.left == (job.task.response_b if job.swapped else job.task.response_a)
        result = store.submit(ann.id, job.id, "left", k=1)
        assert result.choice == ("b" if job.swapped else "a")
    assert 8 < sum(swaps) < 32
    records = store.label_records()
    assert all(r.shown_left == r.choice for r in records)


def test_task_choice_mapping():
    assert task_choice("left", False) == "a" and task_choice("left", True) == "b"
    assert task_choice("right", False) == "b" and task_choice("right", True) == "a"
    assert task_choice("tie", True) == "tie" and task_choice("skip", False) == "skip"
    with pytest.raises(LabelError, match="choice must be one of"):
        task_choice("A", False)


def test_double_submit_is_idempotent_and_a_change_is_a_conflict(store):
    store.add_tasks(make_tasks(1))
    ann = store.labeler_for_name("ann")
    job = store.next_assignment(ann.id, k=3)
    first = store.submit(ann.id, job.id, "tie", "hmm", k=3)
    again = store.submit(ann.id, job.id, "tie", "hmm", k=3)
    assert again.duplicate and again.label_id == first.label_id and not first.duplicate
    with pytest.raises(Conflict, match="already answered"):
        store.submit(ann.id, job.id, "left", k=3)
    assert len(store.label_records()) == 1
    assert store.tasks()[job.task.id].votes == 1


def test_bad_submissions(store):
    store.add_tasks(make_tasks(1))
    ann, bob = store.labeler_for_name("ann"), store.labeler_for_name("bob")
    job = store.next_assignment(ann.id, k=3)
    with pytest.raises(NotFound):
        store.submit(ann.id, 999, "left", k=3)
    with pytest.raises(NotFound):  # someone else's assignment
        store.submit(bob.id, job.id, "left", k=3)
    with pytest.raises(LabelError, match="choice"):
        store.submit(ann.id, job.id, "up", k=3)
    with pytest.raises(LabelError, match="comment"):
        store.submit(ann.id, job.id, "left", "x" * 6000, k=3)
    assert store.label_records() == []


def test_progress(store):
    store.add_tasks(make_tasks(3))
    ann = store.labeler_for_name("ann")
    p = store.progress(ann.id, k=1)
    assert (p.done, p.remaining) == (0, 3)
    job = store.next_assignment(ann.id, k=1)
    store.submit(ann.id, job.id, "left", k=1)
    p = store.progress(ann.id, k=1)
    assert (p.done, p.remaining) == (1, 2)


def test_tokens(store):
    token = store.create_token("alice")
    alice = store.labeler_by_token(token)
    assert alice.name == "alice" and not alice.is_admin and alice.has_token
    assert store.labeler_by_token("wrong") is None
    with pytest.raises(Conflict, match="already has a token"):
        store.create_token("alice")
    new = store.create_token("alice", replace=True)
    assert store.labeler_by_token(token) is None and store.labeler_by_token(new).id == alice.id
    assert not store.has_admin_token()
    store.create_token("boss", admin=True)
    assert store.has_admin_token()
    store.revoke("alice")
    assert store.labeler_by_token(new) is None
    with pytest.raises(NotFound):
        store.revoke("nobody")
    with pytest.raises(LabelError, match="revoked"):
        store.labeler_for_name("alice")
    # only hashes are stored
    con = sqlite3.connect(store.url.removeprefix("sqlite:///"))
    stored = [r[0] for r in con.execute("SELECT token_hash FROM labelers")]
    con.close()
    assert new not in stored and all(s is None or len(s) == 64 for s in stored)


@pytest.mark.parametrize("name", ["", "   ", "x" * 81, "a\x00b", "tab\there"])
def test_bad_names(store, name):
    with pytest.raises(LabelError):
        store.labeler_for_name(name)


def test_reopening_keeps_everything(tmp_path):
    path = str(tmp_path / "l.sqlite")
    s1 = LabelStore(path)
    s1.add_tasks(make_tasks(2))
    ann = s1.labeler_for_name("ann")
    job = s1.next_assignment(ann.id, k=1)
    s1.submit(ann.id, job.id, "right", "ok", k=1)
    s1.close()
    s2 = LabelStore(path, create=False)
    (rec,) = s2.label_records()
    assert (rec.labeler, rec.comment, rec.task_id) == ("ann", "ok", job.task.id)
    s2.close()


def test_reads_do_not_wait_for_a_writer(store, tmp_path):
    store.add_tasks(make_tasks(2))
    ann = store.labeler_for_name("ann")
    other = sqlite3.connect(tmp_path / "labels.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        start = time.monotonic()
        assert store.labeler(ann.id).name == "ann"
        assert store.progress(ann.id, k=1).remaining == 2
        assert len(store.tasks()) == 2
        # a read that waited for the lock would wait out the 30 s busy timeout, then fail; 10 s
        # leaves room for a busy machine
        assert time.monotonic() - start < 10.0
    finally:
        other.execute("ROLLBACK")
        other.close()
