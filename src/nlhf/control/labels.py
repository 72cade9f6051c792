"""The labelled pairs a run keeps, and how many labels should exist by a given step.

    buffer = LabelBuffer(capacity=3000)
    buffer.add(pairs, labeler.label(pairs, rng))            # "can't tell" rows are dropped
    a, b, y = buffer.batches()                              # what fit() reads
    state = buffer.state_dict(); buffer.load_state_dict(state)   # exact resume
    due = labels_due(total_env_steps, budget=3000, initial=500, c=C_SMALL, horizon=1_000_000)

:class:`LabelBuffer` keeps the last ``capacity`` labelled pairs, oldest dropped first
(Christiano et al. 2017 kept the last 3,000).  Its state is a dict of numpy arrays, so a
checkpoint restores it bit for bit.  :func:`labels_due` is the schedule: ``initial`` labels
from the initial policy, then a labelling rate proportional to c/(T + c) at env step T
(Christiano et al.: c = 5·10⁶ on Atari, 2·10⁶ on MuJoCo), scaled so that the whole budget is
due at ``horizon`` steps; the count never exceeds the budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from nlhf.control.segments import Segment, SegmentBatch

#: c of the schedule on Atari and MuJoCo (Christiano et al. 2017).
C_ATARI, C_MUJOCO = 5e6, 2e6
#: c for small environments (CartPole, MinAtar): PPO on CartPole's true reward solves it in a
#: few 10⁵ steps, so the rate halves after the first 10⁵ steps, where the policy changes most.
C_SMALL = 1e5

FIELDS = ("obs_a", "actions_a", "rewards_a", "obs_b", "actions_b", "rewards_b", "labels")


def labels_due(
    total_env_steps: float,
    budget: int,
    initial: int = 500,
    c: float = C_SMALL,
    horizon: float | None = None,
) -> int:
    """Labels that should exist after ``total_env_steps``: ``initial`` at step 0, then
    initial + (budget − initial)·ln(1 + T/c) / ln(1 + horizon/c) (the integral of a rate
    ∝ c/(T + c)), at most ``budget``.  ``horizon``: the run's length in env steps, where the
    whole budget is due (default 10·c)."""
    if budget < 0 or initial < 0 or c <= 0:
        raise ValueError(f"need budget, initial ≥ 0 and c > 0 (got {budget}, {initial}, {c})")
    horizon = 10 * c if horizon is None else horizon
    if horizon <= 0:
        raise ValueError(f"horizon must be > 0, got {horizon}")
    start = min(initial, budget)
    t = max(float(total_env_steps), 0.0)
    share = math.log1p(t / c) / math.log1p(horizon / c)
    return min(budget, start + math.floor((budget - start) * share + 1e-9))


class LabelBuffer:
    """A FIFO of the last ``capacity`` labelled pairs, stored as arrays (oldest first)."""

    def __init__(self, capacity: int = 3000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be ≥ 1, got {capacity}")
        self.capacity = capacity
        self.arrays: dict[str, np.ndarray] | None = None
        self.added = 0  # decided pairs ever added, dropped ones included

    def __len__(self) -> int:
        return 0 if self.arrays is None else len(self.arrays["labels"])

    def add(self, pairs: Sequence[tuple[Segment, Segment]], labels: np.ndarray) -> int:
        """Keep the pairs with a label (NaN, "can't tell", is dropped); returns how many."""
        labels = np.asarray(labels, dtype=np.float32)
        if len(labels) != len(pairs):
            raise ValueError(f"{len(pairs)} pairs but {len(labels)} labels")
        keep = np.flatnonzero(~np.isnan(labels))
        if len(keep) == 0:
            return 0
        chosen = [pairs[i] for i in keep]
        new = {
            "obs_a": np.stack([np.asarray(a.obs, np.float32) for a, _ in chosen]),
            "actions_a": np.stack([np.asarray(a.actions, np.int64) for a, _ in chosen]),
            "rewards_a": np.stack([np.asarray(a.rewards, np.float32) for a, _ in chosen]),
            "obs_b": np.stack([np.asarray(b.obs, np.float32) for _, b in chosen]),
            "actions_b": np.stack([np.asarray(b.actions, np.int64) for _, b in chosen]),
            "rewards_b": np.stack([np.asarray(b.rewards, np.float32) for _, b in chosen]),
            "labels": labels[keep],
        }
        if self.arrays is not None:
            new = {k: np.concatenate([self.arrays[k], new[k]]) for k in FIELDS}
        self.arrays = {k: v[-self.capacity :] for k, v in new.items()}
        self.added += len(keep)
        return len(keep)

    def batches(self) -> tuple[SegmentBatch, SegmentBatch, torch.Tensor]:
        """(a, b, labels) of every pair held, oldest first."""
        if self.arrays is None:
            raise ValueError("the label buffer is empty")
        x = self.arrays
        a = SegmentBatch(torch.from_numpy(x["obs_a"]), torch.from_numpy(x["actions_a"]))
        b = SegmentBatch(torch.from_numpy(x["obs_b"]), torch.from_numpy(x["actions_b"]))
        return a, b, torch.from_numpy(x["labels"])

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {"capacity": np.array(self.capacity), "added": np.array(self.added)}
        if self.arrays is not None:
            state.update({k: v.copy() for k, v in self.arrays.items()})
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.capacity = int(state["capacity"])
        self.added = int(state["added"])
        present = [k in state for k in FIELDS]
        if any(present) and not all(present):
            missing = [k for k, p in zip(FIELDS, present, strict=True) if not p]
            raise ValueError(f"label buffer state lacks {missing}")
        self.arrays = {k: np.array(state[k]) for k in FIELDS} if all(present) else None
