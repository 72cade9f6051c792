"""Everything the labeling app reads and writes, as transactions on the labeling database.

    from nlhf.label.store import LabelStore
    store = LabelStore("labels.sqlite")                 # or any SQLAlchemy URL
    store.add_tasks(tasks)                              # idempotent: same content, same task
    alice = store.labeler_for_name("alice")
    job = store.next_assignment(alice.id, k=3)          # a task alice has not seen, order drawn
    store.submit(alice.id, job.id, "left", comment="clearer")

Rules the store enforces (each in one transaction, so concurrent labelers cannot break them):

- a labeler is never assigned the same task twice (unique (task, labeler));
- a task collects at most ``k`` votes (labels other than skip); a task counts as taken while
  someone holds an unanswered assignment for it younger than ``lease_seconds``;
- a labeler who reloads gets their open assignment back (same task, same order);
- one label per assignment: submitting the same answer again is acknowledged as a duplicate,
  a different answer is a :class:`Conflict`;
- labels are stored in the task's terms (``a``, ``b``, ``tie``, ``unclear`` for "can't tell",
  ``skip``) together with the side response A was shown on, so position bias can be measured;
  ``unclear`` is a vote (it counts toward ``k``) that exports leave out;
- a clip task's media are stored once per sha256 and given only to a labeler who was
  assigned a task showing them (:meth:`LabelStore.media_for`).

Writes from one process take turns on a lock before they open their transaction (waiting
threads queue instead of polling SQLite's lock); a writer that waits longer than
``busy_seconds`` (for this process or another) gets :class:`Busy`, which the app answers
with 503 and ``Retry-After``.  ``create=False`` refuses a path where there is no labeling
database (``nlhf label add`` is the only command that creates one).
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
import unicodedata
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Row,
    Select,
    delete,
    func,
    insert,
    inspect,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError

from nlhf.errors import UserError
from nlhf.label import db
from nlhf.label.db import assignments, labelers, labels, media, meta, sessions, tasks
from nlhf.label.media import SHA256, Clip, ClipRef
from nlhf.label.tasks import TaskInput
from nlhf.label.tokens import hash_token, new_token

DISPLAY_CHOICES = ("left", "right", "tie", "unclear", "skip")
MAX_COMMENT = 5000
MAX_NAME = 80
MAX_ID = 2**63  # database integers are signed 64-bit
CHUNK = 500  # keys per IN (…) list


class LabelError(UserError):
    """A request the store refuses; ``status`` is the HTTP status that fits."""

    status = 400


class NotFound(LabelError):
    status = 404


class Conflict(LabelError):
    status = 409


class Forbidden(LabelError):
    status = 403


class Busy(LabelError):
    """The database stayed locked longer than the store may wait; nothing was written."""

    status = 503


@dataclass(frozen=True)
class LabelerAccount:
    """A labeler (or admin) as the store knows them: name, role and token state."""

    id: int
    name: str
    is_admin: bool
    active: bool
    has_token: bool
    token_tag: str  # a short prefix of the token hash: changes when the token does


@dataclass(frozen=True)
class SessionRecord:
    """A signed-in session as the database keeps it (the cookie holds its nonce)."""

    labeler_id: int
    mode: str  # token | name
    token_tag: str
    expires_at: float
    ended: bool


@dataclass(frozen=True)
class Task:
    id: int
    prompt: str | list[dict[str, str]]
    response_a: str
    response_b: str
    source: str | None
    info: dict[str, Any]
    votes: int
    clip_a: ClipRef | None = None  # a clip task: the responses are the clips' names
    clip_b: ClipRef | None = None


@dataclass(frozen=True)
class Assignment:
    """A task as one labeler sees it; ``swapped``: response B is on the left."""

    id: int
    task: Task
    swapped: bool
    created_at: float

    @property
    def left(self) -> str:
        return self.task.response_b if self.swapped else self.task.response_a

    @property
    def right(self) -> str:
        return self.task.response_a if self.swapped else self.task.response_b

    @property
    def left_clip(self) -> ClipRef | None:
        return self.task.clip_b if self.swapped else self.task.clip_a

    @property
    def right_clip(self) -> ClipRef | None:
        return self.task.clip_a if self.swapped else self.task.clip_b


@dataclass(frozen=True)
class Progress:
    done: int  # labels this labeler has given (skips included)
    remaining: int  # tasks still open to them (with fewer than k votes, not yet labelled)


@dataclass(frozen=True)
class Submitted:
    label_id: int
    choice: str  # in task terms: a, b, tie, skip
    duplicate: bool  # True: the same answer had already been stored


@dataclass(frozen=True)
class LabelRecord:
    id: int
    assignment_id: int
    task_id: int
    labeler_id: int
    labeler: str
    choice: str
    shown_left: str
    comment: str
    seconds: float
    created_at: float


def task_choice(display: str, swapped: bool) -> str:
    """The answer in task terms (a, b, tie, unclear, skip) from what was clicked (left, …)."""
    if display not in DISPLAY_CHOICES:
        raise LabelError(f"choice must be one of {', '.join(DISPLAY_CHOICES)}, got {display!r:.40}")
    if display == "left":
        return "b" if swapped else "a"
    if display == "right":
        return "a" if swapped else "b"
    return display


def check_name(name: str) -> str:
    """A labeler name: 1–80 printable characters after trimming."""
    if not isinstance(name, str):
        raise LabelError("a labeler name must be text")
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise LabelError(f"a labeler name needs 1 to {MAX_NAME} characters, got {len(name)}")
    if any(unicodedata.category(ch).startswith("C") for ch in name):
        raise LabelError("a labeler name cannot contain control characters")
    return name


def _end_sessions(conn: Connection, where: Any) -> int:
    done = conn.execute(
        update(sessions).where(where, sessions.c.ended_at.is_(None)).values(ended_at=time.time())
    )
    return done.rowcount


_media_a, _media_b = media.alias("media_a"), media.alias("media_b")


def _tasks_with_kinds() -> Select:
    """``select(tasks)`` plus the kind of each clip (``kind_a``, ``kind_b``; null for text)."""
    return select(
        tasks, _media_a.c.kind.label("kind_a"), _media_b.c.kind.label("kind_b")
    ).select_from(
        tasks.outerjoin(_media_a, _media_a.c.sha256 == tasks.c.media_a).outerjoin(
            _media_b, _media_b.c.sha256 == tasks.c.media_b
        )
    )


def _task(row: Row) -> Task:
    clips = (
        (ClipRef(row.media_a, row.kind_a), ClipRef(row.media_b, row.kind_b))
        if row.media_a and row.media_b
        else (None, None)
    )
    return Task(
        id=row.id,
        prompt=json.loads(row.prompt),
        response_a=row.response_a,
        response_b=row.response_b,
        source=row.source,
        info=json.loads(row.info) if row.info else {},
        votes=row.votes,
        clip_a=clips[0],
        clip_b=clips[1],
    )


def _labeler(row: Row) -> LabelerAccount:
    return LabelerAccount(
        id=row.id,
        name=row.name,
        is_admin=bool(row.is_admin),
        active=bool(row.active),
        has_token=row.token_hash is not None,
        token_tag=(row.token_hash or "-")[:12],
    )


class LabelStore:
    """The labeling database behind the app and the ``nlhf label`` commands."""

    def __init__(
        self,
        db_or_url: str,
        *,
        rng: random.Random | None = None,
        create: bool = True,
        busy_seconds: float = 30.0,
    ) -> None:
        self.url = db.database_url(db_or_url)
        self.where = str(db_or_url)
        self.busy_seconds = busy_seconds
        self._lock = threading.Lock()
        self.rng = rng or random.Random()
        file = self.url.removeprefix("sqlite:///") if self.url.startswith("sqlite:///") else None
        if file is not None and Path(file).is_dir():
            raise LabelError(f"{self.where}: a directory, not a labeling database")
        if file is not None and not create and not Path(file).exists():
            raise LabelError(
                f"{self.where}: no labeling database there "
                f"(`nlhf label add --db {self.where} --input …` creates one)"
            )
        try:
            self.engine: Engine = db.connect(self.url, create=False, busy_seconds=busy_seconds)
            if not create and "meta" not in inspect(self.engine).get_table_names():
                raise LabelError(f"{self.where}: not a labeling database (no meta table)")
            db.metadata.create_all(self.engine)  # also adds the tables a newer schema has
            self._reader: Engine = db.reader(self.engine)
            self._check_schema()
        except DatabaseError as exc:
            reason = str(exc.orig) if exc.orig is not None else str(exc)
            raise LabelError(
                f"{self.where}: cannot open the labeling database ({reason})"
            ) from None

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction, after this process's earlier writers (see the module doc)."""
        if not self._lock.acquire(timeout=self.busy_seconds):
            raise Busy("the labeling database is busy; nothing was saved, try again")
        try:
            with self.engine.begin() as conn:
                yield conn
        except OperationalError as exc:
            if "locked" in str(exc.orig) or "busy" in str(exc.orig):
                raise Busy(
                    "the labeling database is locked; nothing was saved, try again"
                ) from None
            raise
        finally:
            self._lock.release()

    # ----------------------------------------------------------------- meta
    def _check_schema(self) -> None:
        with self._write() as conn:
            found = conn.execute(select(meta.c.value).where(meta.c.key == "schema")).scalar()
            if found is None:
                conn.execute(insert(meta).values(key="schema", value=db.SCHEMA_VERSION))
            elif found in ("1", "2"):
                if found == "1":  # schema 1 kept the cookie key in the database: drop it
                    conn.execute(delete(meta).where(meta.c.key == "secret"))
                have = {c["name"] for c in inspect(conn).get_columns("tasks")}
                for name, ddl in db.ADDED_IN_3.items():  # schema 3: the columns of clip tasks
                    if name not in have:
                        conn.execute(text(f"ALTER TABLE tasks ADD COLUMN {name} {ddl}"))
                conn.execute(
                    update(meta).where(meta.c.key == "schema").values(value=db.SCHEMA_VERSION)
                )
            elif found != db.SCHEMA_VERSION:
                raise LabelError(
                    f"{self.where}: labeling database schema {found}, this version of nlhf "
                    f"reads schema {db.SCHEMA_VERSION}"
                )

    # ----------------------------------------------------------------- tasks
    def add_tasks(self, items: Iterable[TaskInput]) -> tuple[int, int]:
        """Store new tasks and their clips in one transaction; returns (added, already present)."""
        added = existing = 0
        now = time.time()
        with self._write() as conn:
            known = set(conn.execute(select(tasks.c.key)).scalars())
            rows, clips = [], {}
            for item in items:
                key = item.key
                if key in known:
                    existing += 1
                    continue
                known.add(key)
                for clip in item.clips or ():
                    clips[clip.sha256] = clip
                rows.append(
                    {
                        "key": key,
                        "prompt": item.prompt_json,
                        "response_a": item.response_a,
                        "response_b": item.response_b,
                        "source": item.source,
                        "info": json.dumps(item.info, ensure_ascii=False) if item.info else None,
                        "votes": 0,
                        "created_at": now,
                        "media_a": item.clip_a.sha256 if item.clip_a else None,
                        "media_b": item.clip_b.sha256 if item.clip_b else None,
                    }
                )
            self._add_media(conn, clips, now)
            if rows:
                conn.execute(insert(tasks), rows)
            added = len(rows)
        return added, existing

    def _add_media(self, conn: Connection, clips: dict[str, Clip], now: float) -> None:
        shas = list(clips)
        for start in range(0, len(shas), CHUNK):
            part = shas[start : start + CHUNK]
            stored = set(
                conn.execute(select(media.c.sha256).where(media.c.sha256.in_(part))).scalars()
            )
            new = [clips[sha] for sha in part if sha not in stored]
            if new:
                conn.execute(
                    insert(media),
                    [
                        {
                            "sha256": c.sha256,
                            "kind": c.kind,
                            "size": len(c.data),
                            "data": c.data,
                            "created_at": now,
                        }
                        for c in new
                    ],
                )

    def tasks(self) -> dict[int, Task]:
        with self._reader.begin() as conn:
            rows = conn.execute(_tasks_with_kinds().order_by(tasks.c.id))
            return {r.id: _task(r) for r in rows}

    def task_ids(self, keys: Iterable[str]) -> dict[str, int]:
        """The id of each stored task among ``keys`` (:attr:`TaskInput.key`)."""
        keys, found = list(keys), {}
        with self._reader.begin() as conn:
            for start in range(0, len(keys), CHUNK):
                part = keys[start : start + CHUNK]
                rows = conn.execute(select(tasks.c.key, tasks.c.id).where(tasks.c.key.in_(part)))
                found.update((key, task_id) for key, task_id in rows)
        return found

    def votes_of(self, task_ids: Iterable[int]) -> dict[int, list[str]]:
        """The votes (every label but skip, in task terms) of each of ``task_ids`` that has any."""
        ids, found = list(task_ids), {}
        with self._reader.begin() as conn:
            for start in range(0, len(ids), CHUNK):
                part = ids[start : start + CHUNK]
                rows = conn.execute(
                    select(labels.c.task_id, labels.c.choice)
                    .where(labels.c.task_id.in_(part), labels.c.choice != "skip")
                    .order_by(labels.c.id)
                )
                for task_id, choice in rows:
                    found.setdefault(task_id, []).append(choice)
        return found

    def media_for(self, labeler_id: int, sha256: str) -> tuple[str, bytes] | None:
        """(kind, bytes) of a clip shown in one of the labeler's assignments, else None."""
        if not isinstance(sha256, str) or not SHA256.fullmatch(sha256):
            return None
        shown = (
            select(assignments.c.id)
            .join(tasks, tasks.c.id == assignments.c.task_id)
            .where(
                assignments.c.labeler_id == labeler_id,
                or_(tasks.c.media_a == sha256, tasks.c.media_b == sha256),
            )
            .exists()
        )
        with self._reader.begin() as conn:
            row = conn.execute(
                select(media.c.kind, media.c.data).where(media.c.sha256 == sha256, shown)
            ).first()
        return (row.kind, bytes(row.data)) if row else None

    def task_counts(self, k: int) -> tuple[int, int]:
        """(number of tasks, number with at least ``k`` votes)."""
        with self._reader.begin() as conn:
            total = conn.execute(select(func.count()).select_from(tasks)).scalar_one()
            full = conn.execute(
                select(func.count()).select_from(tasks).where(tasks.c.votes >= k)
            ).scalar_one()
        return total, full

    # ----------------------------------------------------------------- labelers
    def labeler(self, labeler_id: int) -> LabelerAccount | None:
        if not 0 < labeler_id < MAX_ID:
            return None
        with self._reader.begin() as conn:
            row = conn.execute(select(labelers).where(labelers.c.id == labeler_id)).first()
        return _labeler(row) if row else None

    def labeler_by_token(self, token: str) -> LabelerAccount | None:
        """The active labeler whose token this is, else None."""
        if not token:
            return None
        with self._reader.begin() as conn:
            row = conn.execute(
                select(labelers).where(
                    labelers.c.token_hash == hash_token(token), labelers.c.active.is_(True)
                )
            ).first()
        return _labeler(row) if row else None

    def labelers(self) -> list[LabelerAccount]:
        with self._reader.begin() as conn:
            return [_labeler(r) for r in conn.execute(select(labelers).order_by(labelers.c.id))]

    def labeler_for_name(self, name: str) -> LabelerAccount:
        """The labeler called ``name``, created (without a token) if new; used on loopback."""
        name = check_name(name)
        for _ in range(3):
            with self._write() as conn:
                row = conn.execute(select(labelers).where(labelers.c.name == name)).first()
                if row is not None:
                    if not row.active:
                        raise Forbidden(f"labeler {name!r} was revoked")
                    if row.token_hash is not None:
                        raise Forbidden(f"{name!r} signs in with a token: open your sign-in link")
                    return _labeler(row)
                try:
                    conn.execute(
                        insert(labelers).values(
                            name=name, is_admin=False, active=True, created_at=time.time()
                        )
                    )
                except IntegrityError:
                    continue
        raise Conflict(f"could not create labeler {name!r}")

    def create_token(self, name: str, *, admin: bool = False, replace: bool = False) -> str:
        """A new token for labeler ``name`` (created if new); only its hash is stored.

        A labeler who already holds an active token keeps it unless ``replace``; the old token
        (and every session opened with it) stops working when it is replaced.
        """
        name = check_name(name)
        token = new_token()
        digest = hash_token(token)
        with self._write() as conn:
            row = conn.execute(select(labelers).where(labelers.c.name == name)).first()
            if row is None:
                conn.execute(
                    insert(labelers).values(
                        name=name,
                        token_hash=digest,
                        is_admin=admin,
                        active=True,
                        created_at=time.time(),
                    )
                )
            else:
                if row.token_hash is not None and row.active and not replace:
                    raise Conflict(f"labeler {name!r} already has a token; replace it explicitly")
                conn.execute(
                    update(labelers)
                    .where(labelers.c.id == row.id)
                    .values(token_hash=digest, is_admin=admin, active=True)
                )
                _end_sessions(conn, sessions.c.labeler_id == row.id)
        return token

    def revoke(self, name: str) -> None:
        """Disable labeler ``name``: their token and sessions stop working; labels stay."""
        with self._write() as conn:
            done = conn.execute(
                update(labelers)
                .where(labelers.c.name == name)
                .values(active=False, token_hash=None)
            )
            if done.rowcount == 0:
                raise NotFound(f"no labeler called {name!r}")
            mine = select(labelers.c.id).where(labelers.c.name == name).scalar_subquery()
            _end_sessions(conn, sessions.c.labeler_id == mine)

    # ----------------------------------------------------------------- sessions
    def open_session(
        self, digest: str, labeler: LabelerAccount, mode: str, lifetime_seconds: float
    ) -> None:
        """Record a signed-in session (``digest``: sha256 of its nonce); drops expired ones."""
        now = time.time()
        with self._write() as conn:
            conn.execute(delete(sessions).where(sessions.c.expires_at < now))
            conn.execute(
                insert(sessions).values(
                    digest=digest,
                    labeler_id=labeler.id,
                    mode=mode,
                    token_tag=labeler.token_tag if mode == "token" else "-",
                    created_at=now,
                    expires_at=now + lifetime_seconds,
                )
            )

    def session(self, digest: str) -> SessionRecord | None:
        with self._reader.begin() as conn:
            row = conn.execute(select(sessions).where(sessions.c.digest == digest)).first()
        if row is None:
            return None
        return SessionRecord(
            row.labeler_id, row.mode, row.token_tag, row.expires_at, row.ended_at is not None
        )

    def end_session(self, digest: str) -> None:
        with self._write() as conn:
            _end_sessions(conn, sessions.c.digest == digest)

    def end_all_sessions(self) -> int:
        """Sign everyone out; returns how many sessions were open."""
        with self._write() as conn:
            return _end_sessions(conn, sessions.c.expires_at > time.time())

    def has_admin_token(self) -> bool:
        with self._reader.begin() as conn:
            return (
                conn.execute(
                    select(func.count())
                    .select_from(labelers)
                    .where(
                        labelers.c.is_admin.is_(True),
                        labelers.c.active.is_(True),
                        labelers.c.token_hash.is_not(None),
                    )
                ).scalar_one()
                > 0
            )

    # ----------------------------------------------------------------- labelling
    def next_assignment(
        self, labeler_id: int, k: int, lease_seconds: float = 1800.0
    ) -> Assignment | None:
        """The labeler's open assignment, else a new one on the first task with room, else None."""
        if k < 1:
            raise ValueError(f"k (labels per task) must be ≥ 1, got {k}")
        now = time.time()
        cutoff = now - lease_seconds
        for _ in range(3):
            try:
                with self._write() as conn:
                    return self._open_assignment(conn, labeler_id, k) or self._new_assignment(
                        conn, labeler_id, k, cutoff, now
                    )
            except IntegrityError:  # the same labeler asked twice at once (two tabs)
                continue
        raise Conflict("could not assign a task; try again")

    def _open_assignment(self, conn: Any, labeler_id: int, k: int) -> Assignment | None:
        job = conn.execute(
            select(assignments)
            .join(tasks, tasks.c.id == assignments.c.task_id)
            .outerjoin(labels, labels.c.assignment_id == assignments.c.id)
            .where(
                assignments.c.labeler_id == labeler_id,
                labels.c.id.is_(None),
                tasks.c.votes < k,
            )
            .order_by(assignments.c.id.desc())
            .limit(1)
        ).first()
        if job is None:
            return None
        task = conn.execute(_tasks_with_kinds().where(tasks.c.id == job.task_id)).one()
        return Assignment(job.id, _task(task), bool(job.swapped), job.created_at)

    def _new_assignment(
        self, conn: Any, labeler_id: int, k: int, cutoff: float, now: float
    ) -> Assignment | None:
        mine = (
            select(assignments.c.id)
            .where(assignments.c.task_id == tasks.c.id, assignments.c.labeler_id == labeler_id)
            .exists()
        )
        held = (
            select(func.count())
            .select_from(assignments.outerjoin(labels, labels.c.assignment_id == assignments.c.id))
            .where(
                assignments.c.task_id == tasks.c.id,
                labels.c.id.is_(None),
                assignments.c.created_at > cutoff,
            )
            .scalar_subquery()
        )
        room = (tasks.c.votes < k) & ~mine & (tasks.c.votes + held < k)
        candidates = (
            conn.execute(select(tasks.c.id).where(room).order_by(tasks.c.id).limit(8))
            .scalars()
            .all()
        )
        for task_id in candidates:
            # Lock the task row (PostgreSQL and others; SQLite is already serialized) and
            # check again that it still has room now that no one else can take it.
            conn.execute(select(tasks.c.id).where(tasks.c.id == task_id).with_for_update())
            row = conn.execute(_tasks_with_kinds().where(tasks.c.id == task_id, room)).first()
            if row is None:
                continue
            swapped = self.rng.random() < 0.5
            new_id = conn.execute(
                insert(assignments).values(
                    task_id=task_id, labeler_id=labeler_id, swapped=swapped, created_at=now
                )
            ).inserted_primary_key[0]
            return Assignment(new_id, _task(row), swapped, now)
        return None

    def submit(
        self,
        labeler_id: int,
        assignment_id: int,
        choice: str,
        comment: str = "",
        *,
        k: int,
    ) -> Submitted:
        """Store the labeler's answer (``left``, ``right``, ``tie``, ``unclear``, ``skip``).

        Raises :class:`NotFound` for an assignment that does not exist or is someone else's,
        :class:`Conflict` for a second, different answer or a task that already has ``k``
        votes, :class:`LabelError` for a bad choice or comment.
        """
        if not isinstance(comment, str) or len(comment) > MAX_COMMENT:
            raise LabelError(f"a comment is text of at most {MAX_COMMENT} characters")
        comment = comment.replace("\r\n", "\n").strip()  # forms send CRLF line breaks
        if isinstance(assignment_id, bool) or not isinstance(assignment_id, int):
            raise LabelError(f"assignment_id must be an integer, got {assignment_id!r:.40}")
        if not 0 < assignment_id < MAX_ID:
            raise NotFound(f"no assignment {assignment_id} for this labeler")
        try:
            with self._write() as conn:
                return self._submit(conn, labeler_id, assignment_id, choice, comment, k)
        except IntegrityError:  # a concurrent identical submission won the race
            with self._write() as conn:
                return self._submit(conn, labeler_id, assignment_id, choice, comment, k)

    def _submit(
        self, conn: Any, labeler_id: int, assignment_id: int, choice: str, comment: str, k: int
    ) -> Submitted:
        job = conn.execute(
            select(assignments).where(
                assignments.c.id == assignment_id, assignments.c.labeler_id == labeler_id
            )
        ).first()
        if job is None:
            raise NotFound(f"no assignment {assignment_id} for this labeler")
        answer = task_choice(choice, bool(job.swapped))
        done = conn.execute(select(labels).where(labels.c.assignment_id == assignment_id)).first()
        if done is not None:
            if done.choice == answer and done.comment == comment:
                return Submitted(done.id, done.choice, duplicate=True)
            raise Conflict(
                f"assignment {assignment_id} was already answered ({done.choice}); "
                "an answer cannot be changed"
            )
        votes = conn.execute(
            select(tasks.c.votes).where(tasks.c.id == job.task_id).with_for_update()
        ).scalar_one()
        if answer != "skip" and votes >= k:
            raise Conflict(f"task {job.task_id} already has its {k} labels; take the next one")
        now = time.time()
        label_id = conn.execute(
            insert(labels).values(
                assignment_id=assignment_id,
                task_id=job.task_id,
                labeler_id=labeler_id,
                choice=answer,
                shown_left="b" if job.swapped else "a",
                comment=comment,
                seconds=max(0.0, now - job.created_at),
                created_at=now,
            )
        ).inserted_primary_key[0]
        if answer != "skip":
            conn.execute(
                update(tasks).where(tasks.c.id == job.task_id).values(votes=tasks.c.votes + 1)
            )
        return Submitted(label_id, answer, duplicate=False)

    def progress(self, labeler_id: int, k: int) -> Progress:
        with self._reader.begin() as conn:
            done = conn.execute(
                select(func.count()).select_from(labels).where(labels.c.labeler_id == labeler_id)
            ).scalar_one()
            labelled = (
                select(labels.c.id)
                .where(labels.c.task_id == tasks.c.id, labels.c.labeler_id == labeler_id)
                .exists()
            )
            remaining = conn.execute(
                select(func.count()).select_from(tasks).where(tasks.c.votes < k, ~labelled)
            ).scalar_one()
        return Progress(done=done, remaining=remaining)

    def label_records(self) -> list[LabelRecord]:
        """Every label with its labeler's name, oldest first."""
        with self._reader.begin() as conn:
            rows = conn.execute(
                select(labels, labelers.c.name)
                .join(labelers, labelers.c.id == labels.c.labeler_id)
                .order_by(labels.c.id)
            )
            return [
                LabelRecord(
                    id=r.id,
                    assignment_id=r.assignment_id,
                    task_id=r.task_id,
                    labeler_id=r.labeler_id,
                    labeler=r.name,
                    choice=r.choice,
                    shown_left=r.shown_left,
                    comment=r.comment,
                    seconds=r.seconds if math.isfinite(r.seconds) else 0.0,
                    created_at=r.created_at,
                )
                for r in rows
            ]
