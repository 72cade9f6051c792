"""The labeling database: tables and a correctly configured SQLAlchemy engine.

    from nlhf.label.db import connect, database_url
    engine = connect(database_url("labels.sqlite"))     # creates the tables if needed
    engine = connect("postgresql+psycopg://user@host/labels")

Tables: ``tasks`` (a prompt and two responses, A and B; a clip task also names its two
clips), ``media`` (clip bytes and kind, keyed by sha256), ``labelers`` (names, hashed tokens,
admin flag), ``assignments`` (a task shown to a labeler, with the side A was shown on),
``labels`` (one judgement per assignment: a, b, tie, unclear ("can't tell") or skip, in the
task's own A/B terms) and
``sessions`` (signed-in browser sessions: hashed nonce, how they were opened, expiry, end).
Unique constraints make the guarantees hold in the database itself: one assignment and one
label per (task, labeler), one label per assignment.

SQLite is set up for several concurrent writers and for crashes: WAL journal with
``synchronous=FULL`` (a commit is on disk before it is acknowledged), a busy timeout (how long
a writer waits for another process's lock before giving up; short in the server), foreign
keys on, and every transaction that may write opened with ``BEGIN IMMEDIATE`` so that
read-then-write sequences (assigning a task, counting its labels) are serialized instead of
failing with "database is locked" half-way; transactions that only read (engines from
:func:`reader`) use a plain ``BEGIN`` and run beside the writer, as WAL allows.  Other
databases use their own defaults plus row locks (``SELECT … FOR UPDATE``) where the store
needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
)

SCHEMA_VERSION = "3"  # 2: sessions table, the cookie key left the database; 3: clips (media)
READ_ONLY = "nlhf_read_only"  # execution option: a transaction that only reads
CHOICES = ("a", "b", "tie", "unclear", "skip")  # unclear: "can't tell", a vote never exported

metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

tasks = Table(
    "tasks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("key", String(64), nullable=False, unique=True),  # sha256 of the content
    Column("prompt", Text, nullable=False),  # JSON: text or a list of chat turns
    Column("response_a", Text, nullable=False),
    Column("response_b", Text, nullable=False),
    Column("source", Text, nullable=True),
    Column("info", Text, nullable=True),  # JSON object: where the responses came from
    Column("votes", Integer, nullable=False, default=0),  # labels other than skip
    Column("created_at", Float, nullable=False),
    Column("media_a", String(64), ForeignKey("media.sha256"), nullable=True),  # clip tasks
    Column("media_b", String(64), ForeignKey("media.sha256"), nullable=True),
)
Index("ix_tasks_votes_id", tasks.c.votes, tasks.c.id)

media = Table(
    "media",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("kind", String(16), nullable=False),  # image/gif | video/webm, from the magic bytes
    Column("size", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("created_at", Float, nullable=False),
)

# Columns of ``tasks`` that schema 3 added (LabelStore._check_schema adds them to older ones).
ADDED_IN_3 = {
    "media_a": "VARCHAR(64) REFERENCES media (sha256)",
    "media_b": "VARCHAR(64) REFERENCES media (sha256)",
}

labelers = Table(
    "labelers",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(80), nullable=False, unique=True),
    Column("token_hash", String(64), nullable=True, unique=True),
    Column("is_admin", Boolean, nullable=False, default=False),
    Column("active", Boolean, nullable=False, default=True),
    Column("created_at", Float, nullable=False),
)

assignments = Table(
    "assignments",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("task_id", Integer, ForeignKey("tasks.id"), nullable=False),
    Column("labeler_id", Integer, ForeignKey("labelers.id"), nullable=False),
    Column("swapped", Boolean, nullable=False),  # True: response B was shown on the left
    Column("created_at", Float, nullable=False),
    UniqueConstraint("task_id", "labeler_id", name="uq_assignment_task_labeler"),
)
Index("ix_assignments_labeler", assignments.c.labeler_id)

labels = Table(
    "labels",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("assignment_id", Integer, ForeignKey("assignments.id"), nullable=False, unique=True),
    Column("task_id", Integer, ForeignKey("tasks.id"), nullable=False),
    Column("labeler_id", Integer, ForeignKey("labelers.id"), nullable=False),
    Column("choice", String(8), nullable=False),  # a, b, tie, unclear, skip (task terms)
    Column("shown_left", String(1), nullable=False),  # a or b: the response on the left
    Column("comment", Text, nullable=False, default=""),
    Column("seconds", Float, nullable=False),  # from assignment to submission
    Column("created_at", Float, nullable=False),
    UniqueConstraint("task_id", "labeler_id", name="uq_label_task_labeler"),
)
Index("ix_labels_task", labels.c.task_id)

sessions = Table(
    "sessions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("digest", String(64), nullable=False, unique=True),  # sha256 of the cookie's nonce
    Column("labeler_id", Integer, ForeignKey("labelers.id"), nullable=False),
    Column("mode", String(8), nullable=False),  # token | name: how the session was opened
    Column("token_tag", String(12), nullable=False),  # the token's tag then ("-" for name)
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("ended_at", Float, nullable=True),  # signed out, revoked or keys rotated
)
Index("ix_sessions_expires", sessions.c.expires_at)


def database_url(db: str | Path) -> str:
    """A SQLAlchemy URL: ``db`` as given when it has a scheme, else a SQLite file path."""
    text = str(db)
    if "://" in text:
        return text
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def _sqlite_setup(engine: Engine, busy_seconds: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event below decide how transactions start.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_seconds * 1000)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        if engine.url.database not in (None, "", ":memory:"):
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        reading = conn.get_execution_options().get(READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if reading else "BEGIN IMMEDIATE")


def connect(
    url: str, *, create: bool = True, busy_seconds: float = 30.0, **engine_kwargs: Any
) -> Engine:
    """An engine for ``url`` (see :func:`database_url`); creates missing tables if ``create``.
    ``busy_seconds``: how long a SQLite writer waits for another process's lock."""
    if url.startswith("sqlite"):
        engine_kwargs.setdefault(
            "connect_args", {"check_same_thread": False, "timeout": busy_seconds}
        )
    engine = create_engine(url, **engine_kwargs)
    if engine.dialect.name == "sqlite":
        _sqlite_setup(engine, busy_seconds)
    if create:
        metadata.create_all(engine)
    return engine


def reader(engine: Engine) -> Engine:
    """The same engine (and pool) for transactions that only read."""
    return engine.execution_options(**{READ_ONLY: True})
