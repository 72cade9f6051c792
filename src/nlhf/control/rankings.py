"""Preferences from ranked demonstrations, as T-REX makes them (Brown et al. 2019,
arXiv:1904.06387).

    demos = from_replays(load_agc(root, "spaceinvaders"), observe)   # ranked by final score
    demos = by_checkpoint(trajectories)                               # or by learner progress
    pairs, labels = snippet_pairs(demos, n=5000, length=50, rng=rng)
    fit(model, stack([a for a, _ in pairs]), stack([b for _, b in pairs]), labels)

A :class:`Demonstration` is one whole trajectory with a rank (higher is better: a final
score, or the number of the checkpoint that played it).  :func:`snippet_pairs` draws two
demonstrations of different rank, then one snippet of ``length`` steps from each: the worse
one's start uniformly among the starts both trajectories allow, the better one's no earlier
than that (T-REX's rule: a better trajectory should look better at the same stage of play,
not merely later in the game).  The better snippet is preferred; it comes first or second by a
coin flip, so the rows (pair, label 1 or 0) are exactly what the reward model fits on.  T-REX
draws each pair's length at random; here it is fixed so that all pairs stack into one batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from nlhf.control.agc import Replay
from nlhf.control.segments import Segment


@dataclass
class Demonstration:
    """One trajectory and its rank (higher is better)."""

    obs: np.ndarray  # [T, obs_dim] float32
    actions: np.ndarray  # [T] int64
    rank: float
    rewards: np.ndarray | None = None  # [T] true rewards, for evaluation only
    episode: int = 0

    def __len__(self) -> int:
        return len(self.actions)

    def snippet(self, start: int, length: int) -> Segment:
        window = slice(start, start + length)
        rewards = np.zeros(len(self), np.float32) if self.rewards is None else self.rewards
        return Segment(
            np.asarray(self.obs[window], np.float32),
            np.asarray(self.actions[window], np.int64),
            np.asarray(rewards[window], np.float32),
            episode=self.episode,
            start=start,
        )


def by_checkpoint(trajectories: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[Demonstration]:
    """(obs, actions) trajectories in the order their checkpoints were saved: later is better."""
    return [
        Demonstration(np.asarray(obs, np.float32), np.asarray(actions, np.int64), float(i), None, i)
        for i, (obs, actions) in enumerate(trajectories)
    ]


def from_replays(
    replays: Sequence[Replay], observe: Callable[[Replay], np.ndarray]
) -> list[Demonstration]:
    """AGC replays ranked by final score; ``observe(replay)`` gives its [T, obs_dim] features
    (e.g. downsampled screens)."""
    return [
        Demonstration(
            np.asarray(observe(r), np.float32), r.actions, float(r.score), r.rewards, r.id
        )
        for r in replays
    ]


def snippet_pairs(
    demos: Sequence[Demonstration], n: int, length: int, rng: np.random.Generator
) -> tuple[list[tuple[Segment, Segment]], np.ndarray]:
    """``n`` (pair, label) rows: label 1.0 when the first snippet is from the better-ranked
    demonstration, 0.0 when the second is."""
    usable = [d for d in demos if len(d) >= length]
    ranks = np.array([d.rank for d in usable])
    if len(np.unique(ranks)) < 2:
        raise ValueError(
            f"need demonstrations of at least two ranks with ≥ {length} steps; "
            f"{len(usable)} of {len(demos)} are long enough"
        )
    pairs, labels = [], np.empty(n, dtype=np.float32)
    for row in range(n):
        i = int(rng.integers(len(usable)))
        others = np.flatnonzero(ranks != ranks[i])
        j = int(others[rng.integers(len(others))])
        worse, better = sorted((usable[i], usable[j]), key=lambda d: d.rank)
        shared = min(len(worse), len(better)) - length
        worse_start = int(rng.integers(shared + 1))
        better_start = int(rng.integers(worse_start, len(better) - length + 1))
        low, high = worse.snippet(worse_start, length), better.snippet(better_start, length)
        first = bool(rng.random() < 0.5)
        pairs.append((high, low) if first else (low, high))
        labels[row] = 1.0 if first else 0.0
    return pairs, labels
