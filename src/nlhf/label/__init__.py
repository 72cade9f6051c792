"""Human feedback: a pairwise labeling web app that turns people's choices into preference pairs.

    nlhf label add    --db labels.sqlite --input pairs.jsonl     # prompt/response_a/response_b
    nlhf label serve  --db labels.sqlite                         # http://127.0.0.1:8765
    nlhf label tokens --db labels.sqlite --create alice          # for --host beyond loopback
    nlhf label export --db labels.sqlite --out prefs.jsonl       # load with nlhf.data.load_pairs

Labelers see a prompt and two responses side by side (order drawn per assignment and
recorded), answer A, B, tie or skip (keys 1/2/3/0 or a/b/t/s, Enter submits), optionally
comment, and see their progress.  Clip tasks show an instruction above two looping GIF or
WebM clips (also ← left, → right, ↑ tie, ↓ can't tell); a training run adds them and polls
the answers with ``clips.request`` / ``clips.wait``.  Each task collects up to k votes, never
two from one labeler.  The admin page shows counts, Cohen's and Fleiss' kappa, per-labeler
statistics (including position bias), the export and token management.

Modules: ``tasks`` (task rows and files), ``media`` (clip bytes and limits), ``clips`` (the
run API), ``generate`` (tasks sampled from policies), ``db`` (tables, SQLite WAL set-up),
``store`` (all transactions), ``agreement`` (kappas), ``stats`` (admin numbers), ``export``
(labels → pairs), ``security`` (tokens, cookies, CSRF, the request ``Guard``), ``pages``
(templates), ``routes_pages`` / ``routes_api`` / ``routes_media`` (the routes), ``deps``
(what routes ask for), ``errors`` (error answers), ``settings`` and ``app`` (``create_app``),
``*_cli`` (commands); serving, body limits and the wrong-token throttle are nlhf.web's.  The
README screenshots come from ``scripts/label_screenshots.py``.
"""

from nlhf.label.agreement import cohen_kappa, cohen_kappa_from_table, fleiss_kappa
from nlhf.label.export import ExportOptions, preference_rows, write_export
from nlhf.label.store import Assignment, Conflict, LabelError, LabelStore, NotFound
from nlhf.label.tasks import TaskColumns, TaskInput, read_tasks

__all__ = [
    "Assignment",
    "Conflict",
    "ExportOptions",
    "LabelError",
    "LabelStore",
    "NotFound",
    "TaskColumns",
    "TaskInput",
    "cohen_kappa",
    "cohen_kappa_from_table",
    "fleiss_kappa",
    "preference_rows",
    "read_tasks",
    "write_export",
]
