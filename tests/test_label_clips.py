"""Clip tasks: magic bytes and size limits, task files, the media table and its migration, the
media route (who may fetch, headers), the label page and API, exports, and the run API."""

import io
import json
import re
import sqlite3
import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from nlhf import cli
from nlhf.data import DataError, load_pairs
from nlhf.label import clips, media
from nlhf.label.app import AppSettings, create_app
from nlhf.label.export import ExportOptions, export_rows
from nlhf.label.media import Clip, sniff
from nlhf.label.stats import summarize
from nlhf.label.store import LabelStore
from nlhf.label.tasks import TaskInput, read_tasks

LOCAL = "http://127.0.0.1"
# The start of a WebM file: EBML header with DocType "webm" (enough for the magic check).
WEBM = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01\x42\x82\x84webm" + b"\0" * 40
MATROSKA = b"\x1a\x45\xdf\xa3\xa3\x42\x86\x81\x01\x42\x82\x88matroska" + b"\0" * 40
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 40


def gif(i, size=10, n=3):
    """A tiny distinct GIF (colour from i), enlarged to 160 px by default."""
    rng = np.random.default_rng(i)
    frames = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(n)]
    return clips.gif_bytes(frames, fps=10)


@pytest.fixture
def store(tmp_path):
    s = LabelStore(str(tmp_path / "labels.sqlite"))
    yield s
    s.close()


def clip_task(i, j, instruction="Which agent plays better?"):
    return TaskInput.for_clips(instruction, Clip.of(gif(i)), Clip.of(gif(j)))


def test_kind_comes_from_magic_bytes_not_names(tmp_path):
    assert sniff(gif(0)) == "image/gif" and sniff(b"GIF87a" + b"\0" * 10) == "image/gif"
    assert sniff(WEBM) == "video/webm"
    assert sniff(MATROSKA) is None and sniff(PNG) is None and sniff(b"") is None
    (tmp_path / "fake.gif").write_bytes(PNG)
    with pytest.raises(DataError, match="neither a GIF nor a WebM"):
        media.read_clip("fake.gif", tmp_path)
    (tmp_path / "real.bin").write_bytes(WEBM)
    assert media.read_clip("real.bin", tmp_path).kind == "video/webm"
    with pytest.raises(DataError, match=r"has 8,000,006 bytes; a clip may hold at most 8 MB"):
        Clip.of(b"GIF89a" + bytes(media.MAX_CLIP_BYTES))


def write_clip_file(tmp_path, rows):
    (tmp_path / "clips").mkdir(exist_ok=True)
    for name, data in {"a.gif": gif(1), "b.gif": gif(2), "c.webm": WEBM, "bad.gif": PNG}.items():
        (tmp_path / "clips" / name).write_bytes(data)
    path = tmp_path / "tasks" / "clips.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_task_file_rows_with_clips_resolve_paths_next_to_the_file(tmp_path):
    path = write_clip_file(
        tmp_path,
        [
            {"instruction": "Which jumps?", "clip_a": "../clips/a.gif", "clip_b": "../clips/b.gif"},
            {"prompt": "Which scores?", "clip_a": "../clips/a.gif", "clip_b": "../clips/c.webm"},
            {"prompt": "A text task", "response_a": "x", "response_b": "y"},
        ],
    )  # fmt: skip
    tasks, _ = read_tasks(path)
    first, second, text = tasks
    assert first.prompt == "Which jumps?" and first.response_a == "../clips/a.gif"
    assert first.clip_a.sha256 == second.clip_a.sha256 and second.clip_b.kind == "video/webm"
    assert text.clips is None
    # the identity includes the clips' hashes: same names, other bytes → another task
    (tmp_path / "clips" / "b.gif").write_bytes(gif(3))
    assert read_tasks(path)[0][0].key != first.key


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"instruction": "i", "clip_a": "../clips/a.gif", "clip_b": "../clips/bad.gif"},
         "clips.jsonl, line 2, field 'clip_b': ../clips/bad.gif is neither a GIF nor a WebM"),
        ({"instruction": "i", "clip_a": "../clips/nope.gif", "clip_b": "../clips/b.gif"},
         "clips.jsonl, line 2, field 'clip_a': no clip file '../clips/nope.gif'"),
        ({"instruction": "i", "clip_a": "../clips/big.gif", "clip_b": "../clips/b.gif"},
         "clips.jsonl, line 2, field 'clip_a': ../clips/big.gif has 8,000,001 bytes"),
        ({"instruction": "i", "clip_a": "../clips/a.gif", "clip_b": "../clips/a.gif"},
         "clips.jsonl, line 2, field 'clip_b': clip A and clip B are the same clip"),
        ({"clip_a": "../clips/a.gif", "clip_b": "../clips/b.gif"},
         "clips.jsonl, line 2, field 'instruction': a clip task needs its instruction"),
    ],
)  # fmt: skip
def test_bad_clip_rows_are_one_line_errors_naming_the_row(tmp_path, capsys, row, message):
    good = {"instruction": "i", "clip_a": "../clips/a.gif", "clip_b": "../clips/b.gif"}
    path = write_clip_file(tmp_path, [good, row])
    (tmp_path / "clips" / "big.gif").write_bytes(b"GIF89a" + bytes(media.MAX_CLIP_BYTES - 5))
    db = str(tmp_path / "l.sqlite")
    assert cli.main(["label", "add", "--db", db, "--input", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "l.sqlite").exists()  # nothing was written


def test_cli_adds_clip_tasks_and_stores_each_clip_once(tmp_path, capsys):
    rows = [
        {"instruction": "Which?", "clip_a": "../clips/a.gif", "clip_b": "../clips/b.gif"},
        {"instruction": "Which?", "clip_a": "../clips/a.gif", "clip_b": "../clips/c.webm"},
    ]
    path, db = write_clip_file(tmp_path, rows), str(tmp_path / "l.sqlite")
    assert cli.main(["label", "add", "--db", db, "--input", str(path)]) == 0
    assert cli.main(["label", "add", "--db", db, "--input", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 tasks added" in out and "0 tasks added, 2 already present" in out
    con = sqlite3.connect(db)
    kinds = sorted(k for (k,) in con.execute("select kind from media"))
    assert kinds == ["image/gif", "image/gif", "video/webm"]
    con.close()


def test_schema_2_databases_get_the_clip_columns(tmp_path):
    path = tmp_path / "old.sqlite"
    old = LabelStore(str(path))
    old.add_tasks([TaskInput("p", "one", "two")])
    old.close()
    con = sqlite3.connect(path)  # take it back to schema 2: tasks without clips, no media
    con.executescript(
        """
        CREATE TABLE old_tasks (id INTEGER NOT NULL, "key" VARCHAR(64) NOT NULL,
            prompt TEXT NOT NULL, response_a TEXT NOT NULL, response_b TEXT NOT NULL,
            source TEXT, info TEXT, votes INTEGER NOT NULL, created_at FLOAT NOT NULL,
            PRIMARY KEY (id), UNIQUE ("key"));
        INSERT INTO old_tasks SELECT id, key, prompt, response_a, response_b, source, info,
            votes, created_at FROM tasks;
        DROP TABLE tasks; ALTER TABLE old_tasks RENAME TO tasks; DROP TABLE media;
        UPDATE meta SET value = '2' WHERE key = 'schema';
        """
    )
    con.close()
    store = LabelStore(str(path))
    assert store.add_tasks([clip_task(1, 2)]) == (1, 0)
    assert [t.clip_a is not None for t in store.tasks().values()] == [False, True]
    store.close()
    con = sqlite3.connect(path)
    assert con.execute("select value from meta where key = 'schema'").fetchone() == ("3",)
    con.close()


def local_app(store, **kw):
    return create_app(AppSettings(db=store.url, labels_per_task=1, **kw), store)


def sign_in(client, name):
    anon = client.get("/api/session").json()["csrf_token"]
    r = client.post("/api/login", json={"name": name}, headers={"X-CSRF-Token": anon})
    assert r.status_code == 200, r.text
    return r.json()["csrf_token"]


def test_media_route_needs_the_labeling_session_and_an_assignment(store):
    task = TaskInput.for_clips("Pick one", Clip.of(gif(1)), Clip.of(WEBM))
    store.add_tasks([task, clip_task(3, 4)])
    gif_url, webm_url = (f"/media/{c.sha256}" for c in task.clips)
    other_url = f"/media/{clip_task(3, 4).clip_a.sha256}"
    client = TestClient(local_app(store), base_url=LOCAL)
    assert client.get(gif_url).status_code == 401  # not signed in
    sign_in(client, "ann")
    assert client.get(gif_url).status_code == 404  # no assignment shows it yet
    page = client.get("/").text  # ann is assigned the first task
    assert client.get(other_url).status_code == 404  # a clip of a task ann never got
    for url, kind, data in (
        (gif_url, "image/gif", task.clip_a.data),
        (webm_url, "video/webm", WEBM),
    ):
        r = client.get(url)
        assert r.status_code == 200 and r.content == data
        assert r.headers["content-type"] == kind
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["cache-control"] == "no-store"
        assert "media-src 'self'" in r.headers["content-security-policy"]
    sha = task.clip_a.sha256
    for bad in (sha.upper(), sha[:63], sha + "0", "..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd"):
        bad = "/media/" + bad
        assert client.get(bad).status_code == 404, bad
    assert gif_url in page and webm_url in page
    # a token server takes only token sessions: a bearer token works, nothing else
    token = store.create_token("bob")
    remote = TestClient(local_app(store, require_tokens=True), base_url=LOCAL)
    assert remote.get(gif_url).status_code == 401
    auth = {"Authorization": f"Bearer {token}"}
    remote.get("/api/next", headers=auth)  # bob gets the other task (ann holds the first)
    assert remote.get(other_url, headers=auth).status_code == 200
    assert remote.get(gif_url, headers=auth).status_code == 404


def test_label_page_and_api_show_two_clips_and_the_instruction(store):
    task = TaskInput.for_clips("Which paddle <b>wins</b>?", Clip.of(gif(1)), Clip.of(WEBM))
    store.add_tasks([task])
    client = TestClient(local_app(store), base_url=LOCAL)
    token = sign_in(client, "ann")
    page = client.get("/").text
    assert "Which paddle &lt;b&gt;wins&lt;/b&gt;?" in page and 'data-clips="1"' in page
    assert re.search(
        rf'<img class="media" id="clip-(left|right)" src="/media/{task.clip_a.sha256}"', page
    )
    assert re.search(
        rf'<video class="media" id="clip-(left|right)" src="/media/{task.clip_b.sha256}" '
        r"autoplay loop muted playsinline>",
        page,
    )
    assert 'value="unclear"' in page and "sha256:" not in page  # names are not shown
    job = client.get("/api/next").json()
    assert job["prompt"] == "Which paddle <b>wins</b>?" and job["left"] is None
    assert {c["type"] for c in job["clips"].values()} == {"image/gif", "video/webm"}
    r = client.post(
        "/api/labels",
        json={"assignment_id": job["assignment_id"], "choice": "unclear"},
        headers={"X-CSRF-Token": token},
    )
    assert r.status_code == 201 and r.json()["choice"] == "unclear"
    assert store.task_counts(1) == (1, 1)  # can't tell is a vote: the task is done


def answer_all(store, name, choices, k=1):
    """``name`` answers the open tasks in order with ``choices`` (in task terms a/b/…)."""
    labeler = store.labeler_for_name(name)
    for choice in choices:
        job = store.next_assignment(labeler.id, k=k)
        display = {"a": "right" if job.swapped else "left", "b": "left" if job.swapped else "right"}
        store.submit(labeler.id, job.id, display.get(choice, choice), k=k)


def test_export_writes_ties_at_half_weight_and_leaves_out_cant_tell(store, tmp_path):
    tasks = [clip_task(1, 2), clip_task(3, 4), clip_task(5, 6), clip_task(7, 8)]
    store.add_tasks(tasks)
    answer_all(store, "ann", ["b", "tie", "unclear", "skip"])
    rows = export_rows(store, ExportOptions(ties="half"))
    assert [(r["task_id"], r["weight"]) for r in rows] == [(1, 1.0), (2, 0.5), (2, 0.5)]
    first = rows[0]
    assert first["chosen"] == f"sha256:{tasks[0].clip_b.sha256}"
    assert (first["chosen_clip"], first["rejected_clip"]) == (
        tasks[0].clip_b.sha256,
        tasks[0].clip_a.sha256,
    )
    assert {r["chosen_clip"] for r in rows[1:]} == {c.sha256 for c in tasks[1].clips}
    assert [r["task_id"] for r in export_rows(store, ExportOptions())] == [1]  # ties dropped
    out = tmp_path / "prefs.jsonl"
    assert (
        cli.main(["label", "export", "--db", store.url, "--out", str(out), "--ties", "half"]) == 0
    )
    assert sorted(p.weight for p in load_pairs(out)) == [0.5, 0.5, 1.0]
    # counted: can't tell is a vote toward k and has its own count on the admin page
    assert store.task_counts(1) == (4, 3)
    summary = summarize(store.label_records(), 4, 3)
    assert summary.choices == {"a": 0, "b": 1, "tie": 1, "unclear": 1, "skip": 1}


def test_request_collect_and_wait(store):
    pairs = [(gif(1), gif(2)), (gif(3), WEBM), (gif(5), gif(6))]
    ids = clips.request(store, pairs, "Which agent keeps the ball in play?", run_id="run-7")
    assert (
        len(set(ids)) == 3
        and clips.request(store, pairs[:1], "Which agent keeps the ball in play?", "run-7")
        == ids[:1]
    )
    task = store.tasks()[ids[1]]
    assert task.source == "run-7" and task.info == {"run_id": "run-7", "pair": 1}
    assert clips.collect(store, ids) == {}
    assert clips.wait(store, ids, timeout=0.05, poll_seconds=0.01) == {}
    answer_all(store, "ann", ["a"])
    assert clips.collect(store, ids) == {ids[0]: "a"}
    assert clips.wait(store, ids, at_least=1, timeout=5) == {ids[0]: "a"}

    def later():
        time.sleep(0.2)
        answer_all(store, "ann", ["unclear", "tie"])

    worker = threading.Thread(target=later)
    worker.start()
    got = clips.wait(store, ids, timeout=20, poll_seconds=0.05)
    worker.join()
    assert got == {ids[0]: "a", ids[1]: "unclear", ids[2]: "tie"}
    assert clips.collect(store, ids, min_votes=2) == {}
    with pytest.raises(DataError, match=r"^run run-7, pair 1, field 'clip_b': clip B is neither"):
        clips.request(store, [(gif(1), gif(9)), (gif(1), PNG)], "Which?", run_id="run-7")
    assert len(store.tasks()) == 3  # nothing of the refused request was added


def test_gif_bytes_loops_and_enlarges_tiny_frames():
    frames = [np.full((10, 10, 3), v, np.uint8) for v in (0, 120, 240)]
    image = Image.open(io.BytesIO(clips.gif_bytes(frames, fps=20)))
    assert image.size == (160, 160) and image.n_frames == 3
    assert image.info["loop"] == 0 and image.info["duration"] == 50
    assert Image.open(io.BytesIO(clips.gif_bytes(frames, scale=1))).size == (10, 10)
    big = [np.zeros((210, 160, 3), np.uint8)]
    assert Image.open(io.BytesIO(clips.gif_bytes(big))).size == (160, 210)
    with pytest.raises(ValueError, match="frame 1"):
        clips.gif_bytes([frames[0], np.zeros((10, 10), np.uint8)])
    with pytest.raises(ValueError, match="at least one frame"):
        clips.gif_bytes([])
