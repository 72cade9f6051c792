"""Fixed-length pieces of trajectories, the unit that labelers compare.

    segs = cut(obs, actions, rewards, dones, length=25)   # never across an episode end
    pairs = sample_pairs(segs, 500, rng)                  # two different segments each
    batch = stack(segs)                                   # SegmentBatch of tensors for a model

A :class:`Segment` holds ``length`` consecutive agent steps of one episode: the observation
features the models see, the actions, the true rewards (for the oracle and for evaluation, never
for the learner), and optionally the rendered frames a person sees as a clip.  ``start`` is the
step index within its episode (counted from the first step of the stream given to :func:`cut`
for an episode that began before it); ``episode`` an id unique within a run.

:func:`cut` reads one environment's steps in time order: ``dones[t]`` is True when step t ended
its episode (terminated or truncated).  It splits the stream into episodes, then cuts each one
from its first step every ``stride`` steps (default ``length``: no overlap); an episode shorter
than ``length`` gives none.  Christiano et al. (2017) used clips of 1–2 s, i.e. about 25 Atari
agent steps.  Cut a vectorized rollout one environment (column) at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from nlhf.config import Checked


@dataclass
class Segment(Checked):
    """``length`` consecutive steps of one episode."""

    obs: np.ndarray  # [length, obs_dim] float32 features the models see
    actions: np.ndarray  # [length] int64
    rewards: np.ndarray  # [length] float32 true rewards (oracle and evaluation only)
    episode: int = 0
    start: int = 0
    frames: list[np.ndarray] | None = field(default=None, repr=False)  # [H, W, 3] uint8 each

    def check(self) -> None:
        n = len(self.actions)
        if len(self.obs) != n or len(self.rewards) != n:
            raise ValueError(
                f"segment arrays disagree in length: obs {len(self.obs)}, "
                f"actions {n}, rewards {len(self.rewards)}"
            )

    @property
    def length(self) -> int:
        return len(self.actions)

    @property
    def true_return(self) -> float:
        return float(np.sum(self.rewards))


@dataclass
class SegmentBatch:
    """B segments of one length as tensors, what the reward and preference models read."""

    obs: torch.Tensor  # [B, L, obs_dim] float32
    actions: torch.Tensor  # [B, L] int64

    def __len__(self) -> int:
        return self.obs.shape[0]

    def __getitem__(self, index) -> SegmentBatch:
        """Rows ``index`` (an int tensor, a slice or a bool mask) as a new batch."""
        return SegmentBatch(self.obs[index], self.actions[index])

    def to(self, device: torch.device | str) -> SegmentBatch:
        return SegmentBatch(self.obs.to(device), self.actions.to(device))


def episode_bounds(dones: np.ndarray, episode_ids: np.ndarray | None = None) -> list[range]:
    """The step ranges of the episodes in one stream: a new one starts after each done (and
    wherever ``episode_ids`` changes)."""
    dones = np.asarray(dones, dtype=bool)
    ends = dones[:-1].copy()
    if episode_ids is not None:
        ids = np.asarray(episode_ids)
        if ids.shape != dones.shape:
            raise ValueError(f"episode_ids has shape {ids.shape}, dones {dones.shape}")
        ends |= ids[1:] != ids[:-1]
    starts = [0, *(np.flatnonzero(ends) + 1).tolist()]
    stops = [*starts[1:], len(dones)]
    return [range(a, b) for a, b in zip(starts, stops, strict=True)]


def cut(
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    dones: np.ndarray,
    length: int,
    episode_ids: np.ndarray | None = None,
    frames: Sequence[np.ndarray] | None = None,
    stride: int | None = None,
) -> list[Segment]:
    """Segments of ``length`` steps of one stream ([T, ...] arrays in time order), none of
    them across an episode end.  Episodes are numbered 0, 1, … in the stream unless
    ``episode_ids`` ([T]) gives their ids."""
    stride = length if stride is None else stride
    if length < 1 or stride < 1:
        raise ValueError(f"length and stride must be ≥ 1 (got {length}, {stride})")
    dones = np.asarray(dones, dtype=bool)
    n = len(dones)
    if dones.ndim != 1:
        raise ValueError(f"dones has shape {dones.shape}: cut one environment at a time")
    for name, x in (("obs", obs), ("actions", actions), ("rewards", rewards), ("frames", frames)):
        if x is not None and len(x) != n:
            raise ValueError(f"{name} has {len(x)} steps, dones {n}")
    if n == 0:
        return []
    obs = np.asarray(obs, dtype=np.float32).reshape(n, -1)
    actions = np.asarray(actions, dtype=np.int64)
    rewards = np.asarray(rewards, dtype=np.float32)
    segments = []
    for number, steps in enumerate(episode_bounds(dones, episode_ids)):
        episode = number if episode_ids is None else int(np.asarray(episode_ids)[steps.start])
        for offset in range(0, len(steps) - length + 1, stride):
            i = steps.start + offset
            window = slice(i, i + length)
            segments.append(
                Segment(
                    obs[window],
                    actions[window],
                    rewards[window],
                    episode=episode,
                    start=offset,
                    frames=None if frames is None else list(frames[window]),
                )
            )
    return segments


def stack(segments: Sequence[Segment]) -> SegmentBatch:
    """One batch of segments of equal length."""
    if not segments:
        raise ValueError("stack needs at least one segment")
    lengths = {s.length for s in segments}
    if len(lengths) != 1:
        raise ValueError(f"segments of different lengths {sorted(lengths)} cannot be stacked")
    obs = np.stack([np.asarray(s.obs, dtype=np.float32).reshape(s.length, -1) for s in segments])
    actions = np.stack([np.asarray(s.actions, dtype=np.int64) for s in segments])
    return SegmentBatch(torch.from_numpy(obs), torch.from_numpy(actions))


def sample_pairs(
    segments: Sequence[Segment], n: int, rng: np.random.Generator
) -> list[tuple[Segment, Segment]]:
    """``n`` pairs drawn uniformly, each of two different segments (by position)."""
    m = len(segments)
    if m < 2:
        raise ValueError(f"need at least two segments to make pairs, got {m}")
    first = rng.integers(0, m, size=n)
    second = (first + rng.integers(1, m, size=n)) % m  # any other position, uniformly
    return [
        (segments[i], segments[j]) for i, j in zip(first.tolist(), second.tolist(), strict=True)
    ]
