"""Clips drawn from observations (nlhf.control.human): every game family gets frames with numpy
only — CartPole's cart and pole, Acrobot's links where its angles put them, MinAtar's grid in
the colour of each cell's last channel, Atari's last pixel frame, anything else as bars — and a
segment of any family becomes a GIF a person can label."""

import math

import numpy as np
import pytest

pytest.importorskip("gymnasium", reason="the control extra is not installed (nlhf[control])")

from nlhf.control.envs import make_env
from nlhf.control.human import (
    PALETTE,
    SegmentRenderer,
    acrobot_frame,
    bars_frame,
    grid_frame,
    observation_frame,
)
from nlhf.control.segments import Segment

LINK = (0, 204, 204)


def link_rows(frame: np.ndarray) -> np.ndarray:
    return np.flatnonzero((frame == LINK).all(-1).any(1))


def test_acrobot_links_hang_down_at_rest_and_point_up_when_swung_over():
    at_rest = acrobot_frame(np.array([1.0, 0.0, 1.0, 0.0, 0.0, 0.0]))
    rows = link_rows(at_rest)
    assert rows.min() >= 95 and rows.max() > 170  # below the pivot at the centre (100)
    up = acrobot_frame(np.array([math.cos(math.pi), math.sin(math.pi), 1.0, 0.0, 0.0, 0.0]))
    rows = link_rows(up)
    assert rows.max() <= 105 and rows.min() < 30  # above it, past the goal line
    goal = np.flatnonzero((at_rest == 0).all(-1).all(1))
    assert goal.tolist() == [int(100 - 200 / 4.4)]  # the line the tip must rise above


def test_a_minatar_cell_takes_the_colour_of_its_last_channel_that_is_on():
    grid = np.zeros((10, 10, 4))
    grid[0, 0, 1] = 1
    grid[2, 3, [0, 2]] = 1  # two channels on: the last one wins, as MinAtar draws it
    frame = grid_frame(grid)
    assert frame.shape == (10, 10, 3) and frame.dtype == np.uint8
    assert (frame[0, 0] == PALETTE[2]).all() and (frame[2, 3] == PALETTE[3]).all()
    assert (frame[5, 5] == PALETTE[0]).all()  # empty: the background


def test_bars_go_up_for_positive_features_and_down_for_negative_ones():
    frame = bars_frame(np.array([3.0, 0.0, -3.0]))
    blue = (frame == (31, 119, 180)).all(-1)
    first, last = np.flatnonzero(blue[:, 10]), np.flatnonzero(blue[:, -10])
    assert first.max() <= 80 and first.min() < 10  # tanh(3) ≈ 1: almost to the top
    assert last.min() >= 80 and last.max() > 150
    assert not blue[:, frame.shape[1] // 2].any()  # zero: no bar


@pytest.mark.parametrize(
    ("env_id", "shape"),
    [
        ("CartPole-v1", (160, 240, 3)),
        ("Acrobot-v1", (200, 200, 3)),
        ("MountainCar-v0", (160, 240, 3)),  # bars: no drawing of its own here
        ("Taxi-v4", (160, 800, 3)),  # 500 one-hot features, 800 pixels at most
    ],
)
def test_every_family_draws_frames_and_a_segment_becomes_a_gif(env_id, shape):
    env = make_env(env_id, 0)
    obs = [env.reset()[0]] + [env.step(a % env.action_space.n)[0] for a in range(7)]
    assert observation_frame(env_id, obs[0]).shape == shape
    segment = Segment(np.stack(obs), np.zeros(8, np.int64), np.zeros(8, np.float32))
    gif = SegmentRenderer(env_id).gif(segment)
    assert gif.startswith(b"GIF8")


def test_minatar_and_atari_pixels_are_drawn_from_their_observations():
    pytest.importorskip("minatar", reason="MinAtar is not installed (pip install minatar)")
    obs = make_env("MinAtar/Asterix-v1", 0).reset()[0]
    frame = observation_frame("MinAtar/Asterix-v1", obs)
    assert frame.shape == (10, 10, 3) and len({tuple(c) for c in frame.reshape(-1, 3)}) >= 2
    pixels = np.zeros(4 * 80 * 80)
    pixels[-80 * 80 :] = 1.0  # the last of the 4 stacked frames is white
    assert (observation_frame("ALE/Pong-v5", pixels) == 255).all()
