"""The store on a server database (PostgreSQL): the same guarantees under concurrent writers.

Runs only when $NLHF_LABEL_TEST_DB_URL names a scratch database (its tables are dropped), e.g.
``postgresql+psycopg://postgres@127.0.0.1:55432/labels``; skipped otherwise.
"""

import os
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from nlhf.label.app import AppSettings, create_app
from nlhf.label.db import connect, metadata
from nlhf.label.store import Conflict, LabelStore
from nlhf.label.tasks import TaskInput

URL = os.environ.get("NLHF_LABEL_TEST_DB_URL")
pytestmark = pytest.mark.skipif(not URL, reason="set NLHF_LABEL_TEST_DB_URL to a scratch database")


@pytest.fixture
def store():
    engine = connect(URL, create=False)
    metadata.drop_all(engine)
    engine.dispose()
    s = LabelStore(URL)
    yield s
    s.close()


def test_concurrent_labelers_keep_every_rule(store):
    n_tasks, k, n_labelers = 60, 3, 8
    store.add_tasks(TaskInput(f"p{i}", f"a{i}", f"b{i}") for i in range(n_tasks))
    labelers = [store.labeler_for_name(f"l{i}") for i in range(n_labelers)]

    def work(index):
        rng = random.Random(index)
        lab, done = labelers[index], []
        while (job := store.next_assignment(lab.id, k=k)) is not None:
            choice = rng.choice(["left", "right", "tie", "skip"])
            try:
                done.append(store.submit(lab.id, job.id, choice, k=k).label_id)
            except Conflict:
                pass
        return done

    with ThreadPoolExecutor(n_labelers) as pool:
        acked = [i for ids in pool.map(work, range(n_labelers)) for i in ids]
    # A labeler stops when every open slot is held by someone else's assignment; a later
    # skip frees a slot.  One more pass, one labeler at a time, fills those.
    acked += [i for index in range(n_labelers) for i in work(index)]
    records = store.label_records()
    assert sorted(r.id for r in records) == sorted(acked)
    assert len({(r.task_id, r.labeler_id) for r in records}) == len(records)
    votes = Counter(r.task_id for r in records if r.choice != "skip")
    seen = Counter(r.task_id for r in records)
    for t in store.tasks().values():
        assert t.votes == votes[t.id] <= k
        assert t.votes == k or seen[t.id] == n_labelers  # full, or everyone has answered it


def test_a_server_database_needs_a_key_file_outside_it(store, tmp_path):
    from nlhf.label.store import LabelError

    with pytest.raises(LabelError, match="--key-file"):
        create_app(AppSettings(db=URL), store)


def test_app_on_postgres(store, tmp_path):
    store.add_tasks([TaskInput("p", "<b>x</b>", "y")])
    settings = AppSettings(db=URL, key_file=str(tmp_path / "labels.key"))
    client = TestClient(create_app(settings, store), base_url="http://127.0.0.1")
    anon = client.get("/api/session").json()["csrf_token"]
    token = client.post("/api/login", json={"name": "ann"}, headers={"X-CSRF-Token": anon})
    h = {"X-CSRF-Token": token.json()["csrf_token"]}
    job = client.get("/api/next").json()["assignment_id"]
    body = {"assignment_id": job, "choice": "left"}
    assert client.post("/api/labels", json=body, headers=h).status_code == 201
    assert client.post("/api/labels", json=body, headers=h).json()["duplicate"]
    assert client.get("/admin").status_code == 200
    assert len(client.get("/admin/export.jsonl").text.splitlines()) == 1
