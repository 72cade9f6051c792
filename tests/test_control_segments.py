"""Segments: cut never crosses an episode end (for any pattern of dones), stack makes the
tensors the models read, and sample_pairs pairs two different segments."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nlhf.control.segments import Segment, SegmentBatch, cut, sample_pairs, stack


def stream(dones: list[bool], dim: int = 2):
    """obs[t] = (t, t) so a segment tells which steps it holds; reward t."""
    t = np.arange(len(dones))
    return np.repeat(t[:, None], dim, 1).astype(np.float32), t % 3, t.astype(np.float32)


def episode_of(dones: list[bool]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(dones[:-1])]).astype(int) if dones else np.array([])


@given(
    dones=st.lists(st.booleans(), min_size=0, max_size=80),
    length=st.integers(1, 12),
    stride=st.integers(1, 12) | st.none(),
)
def test_segments_never_cross_an_episode_end(dones, length, stride):
    obs, actions, rewards = stream(dones)
    segs = cut(obs, actions, rewards, np.array(dones, bool), length, stride=stride)
    episode = episode_of(dones)
    for s in segs:
        steps = s.obs[:, 0].astype(int)
        assert s.length == length
        assert np.array_equal(steps, np.arange(steps[0], steps[0] + length))  # consecutive
        assert set(episode[steps]) == {s.episode}  # one episode
        assert not np.asarray(dones)[steps[:-1]].any()  # only the last step may end it
        first = np.flatnonzero(episode == s.episode)[0]
        assert s.start == steps[0] - first
        np.testing.assert_array_equal(s.rewards, steps.astype(np.float32))
        np.testing.assert_array_equal(s.actions, steps % 3)
    # every episode gives exactly its windows; shorter ones give none
    step = stride or length
    sizes = np.bincount(episode, minlength=1) if dones else np.array([], int)
    expected = sum((n - length) // step + 1 for n in sizes if n >= length)
    assert len(segs) == expected


def test_an_episode_shorter_than_the_length_gives_no_segment():
    dones = [False, False, True, False, False, False, False, True]  # episodes of 3 and 5 steps
    obs, actions, rewards = stream(dones)
    segs = cut(obs, actions, rewards, np.array(dones), 4)
    assert [(s.episode, s.start, int(s.obs[0, 0])) for s in segs] == [(1, 0, 3)]


def test_episode_ids_split_the_stream_and_name_the_segments():
    dones = [False] * 6
    ids = np.array([7, 7, 7, 9, 9, 9])
    obs, actions, rewards = stream(dones)
    frames = [np.full((2, 2, 3), t, np.uint8) for t in range(6)]
    segs = cut(obs, actions, rewards, np.array(dones), 2, episode_ids=ids, frames=frames, stride=1)
    assert [(s.episode, s.start) for s in segs] == [(7, 0), (7, 1), (9, 0), (9, 1)]
    assert [int(f[0, 0, 0]) for f in segs[2].frames] == [3, 4]


def test_cut_rejects_arrays_of_different_lengths_and_vector_dones():
    obs, actions, rewards = stream([False] * 5)
    with pytest.raises(ValueError, match="actions has 4 steps"):
        cut(obs, actions[:4], rewards, np.zeros(5, bool), 2)
    with pytest.raises(ValueError, match="one environment at a time"):
        cut(obs, actions, rewards, np.zeros((5, 2), bool), 2)


def test_stack_makes_float_obs_and_long_actions():
    segs = [Segment(np.ones((3, 4)) * i, np.arange(3), np.zeros(3), episode=i) for i in range(5)]
    batch = stack(segs)
    assert isinstance(batch, SegmentBatch) and len(batch) == 5
    assert batch.obs.shape == (5, 3, 4) and batch.obs.dtype == torch.float32
    assert batch.actions.shape == (5, 3) and batch.actions.dtype == torch.int64
    assert batch[torch.tensor([4, 1])].obs[:, 0, 0].tolist() == [4.0, 1.0]
    with pytest.raises(ValueError, match="different lengths"):
        stack([*segs, Segment(np.ones((2, 4)), np.arange(2), np.zeros(2))])


def test_sample_pairs_pairs_two_different_segments_uniformly():
    segs = [Segment(np.full((1, 1), i), np.zeros(1), np.zeros(1), episode=i) for i in range(4)]
    pairs = sample_pairs(segs, 4000, np.random.default_rng(0))
    assert all(a is not b for a, b in pairs)
    counts = np.bincount([a.episode * 4 + b.episode for a, b in pairs], minlength=16)
    off = counts[~np.eye(4, dtype=bool).ravel()]
    assert counts[np.eye(4, dtype=bool).ravel()].sum() == 0
    # 12 ordered pairs, 4000/12 ≈ 333 each: within 5σ of a binomial count
    assert np.all(np.abs(off - 4000 / 12) < 5 * np.sqrt(4000 / 12))
    with pytest.raises(ValueError, match="at least two segments"):
        sample_pairs(segs[:1], 3, np.random.default_rng(0))
