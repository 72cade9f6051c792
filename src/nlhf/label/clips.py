"""Clip comparisons for a training run: frames to GIF, pairs to tasks, answers back (polling).

    from nlhf.label import clips
    store = LabelStore("labels.sqlite")          # the database `nlhf label serve` serves
    pair = (clips.gif_bytes(frames_a, fps=15), clips.gif_bytes(frames_b, fps=15))
    ids = clips.request(store, [pair], "Which agent plays Pong better?", run_id="run-7")
    answers = clips.wait(store, ids, at_least=len(ids), timeout=600)   # {task_id: "a"}
    answers = clips.collect(store, ids)          # what has come in so far, without waiting

An answer is in the pair's own terms: ``a`` (the first clip is better), ``b``, ``tie``, or
``unclear`` when every vote on the task was "can't tell".  With several votes per task
(``k`` of the server) the answer is the majority of a/b/tie, as in ``nlhf label export``;
can't-tell votes count toward ``k`` but not toward the majority.  Requesting the same pair
again returns the same task (a task's identity is its content).  Frames are ``H×W×3``
``uint8`` arrays; tiny ones (MinAtar's 10×10) are enlarged by nearest neighbour so people can
see them.  Nothing here imports training code: a run calls these functions.
"""

from __future__ import annotations

import io
import math
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np
from PIL import Image

from nlhf.data import DataError
from nlhf.label.export import outcome
from nlhf.label.media import Clip
from nlhf.label.store import LabelStore
from nlhf.label.tasks import TaskInput

MIN_SIDE = 160  # pixels: frames smaller than this are enlarged by a whole factor
MAX_FPS = 50  # browsers slow GIF frames shorter than 20 ms down to 100 ms


def gif_bytes(frames: Sequence[np.ndarray], fps: float = 15, *, scale: int | None = None) -> bytes:
    """A looping GIF of ``frames`` at ``fps`` (at most 50); ``scale`` enlarges each pixel to a
    ``scale × scale`` block (default: enough for the short side to reach 160 pixels)."""
    if len(frames) == 0:
        raise ValueError("a clip needs at least one frame")
    shape = np.shape(frames[0])
    for i, frame in enumerate(frames):
        if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.ndim != 3:
            raise ValueError(f"frame {i}: expected an H×W×3 uint8 array")
        if frame.shape[2] != 3 or frame.shape != shape:
            raise ValueError(f"frame {i} has shape {frame.shape}; frame 0 has {shape}, need ×3")
    if not 0 < fps <= MAX_FPS:
        raise ValueError(f"fps must be in (0, {MAX_FPS}], got {fps}")
    if scale is None:
        scale = max(1, math.ceil(MIN_SIDE / min(shape[:2])))
    if scale < 1:
        raise ValueError(f"scale must be ≥ 1, got {scale}")
    images = [Image.fromarray(f.repeat(scale, axis=0).repeat(scale, axis=1)) for f in frames]
    out = io.BytesIO()
    images[0].save(
        out,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=round(1000 / fps),
        loop=0,
    )
    return out.getvalue()


def request(
    store: LabelStore,
    pairs: Sequence[tuple[bytes | Clip, bytes | Clip]],
    instruction: str,
    run_id: str,
) -> list[int]:
    """Add one clip task per pair (GIF or WebM bytes); returns their task ids, in order.

    The tasks carry ``source=run_id`` and ``info={"run_id", "pair"}``.  A bad clip (too
    large, not GIF/WebM, both clips equal) raises a one-line :class:`~nlhf.data.DataError`
    naming the run and the pair; nothing is added then.
    """
    items = []
    for i, (a, b) in enumerate(pairs):
        try:
            clip_a = a if isinstance(a, Clip) else Clip.of(a, name="clip A", field="clip_a")
            clip_b = b if isinstance(b, Clip) else Clip.of(b, name="clip B", field="clip_b")
            items.append(
                TaskInput.for_clips(
                    instruction, clip_a, clip_b, source=run_id, info={"run_id": run_id, "pair": i}
                )
            )
        except DataError as err:
            raise err.located(f"run {run_id}", f"pair {i}") from None
    store.add_tasks(items)
    ids = store.task_ids(item.key for item in items)
    return [ids[item.key] for item in items]


def collect(store: LabelStore, task_ids: Sequence[int], *, min_votes: int = 1) -> dict[int, str]:
    """The answer of each task with at least ``min_votes`` votes (module docstring)."""
    answers = {}
    for task_id, votes in store.votes_of(task_ids).items():
        if len(votes) < min_votes:
            continue
        counts = Counter(votes)
        decided = counts["a"] + counts["b"] + counts["tie"]
        answers[task_id] = (
            outcome(counts["a"], counts["b"], counts["tie"]) if decided else "unclear"
        )
    return answers


def wait(
    store: LabelStore,
    task_ids: Sequence[int],
    at_least: int | None = None,
    timeout: float = 600.0,
    poll_seconds: float = 5.0,
    *,
    min_votes: int = 1,
) -> dict[int, str]:
    """:func:`collect` every ``poll_seconds`` until ``at_least`` tasks (default: all) have an
    answer or ``timeout`` seconds have passed; returns what was collected, maybe fewer."""
    wanted = len(task_ids) if at_least is None else min(at_least, len(task_ids))
    deadline = time.monotonic() + timeout
    while True:
        answers = collect(store, task_ids, min_votes=min_votes)
        left = deadline - time.monotonic()
        if len(answers) >= wanted or left <= 0:
            return answers
        time.sleep(min(poll_seconds, left))
