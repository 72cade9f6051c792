"""People as the labeler of a route: segments drawn as GIF clips, answered in the labeling app.

    labeler = HumanLabeler(config)                     # config.db, instruction, human_timeout, …
    y = labeler.label(pairs, rng)                      # waits for the answers; NaN: no answer
    frame = observation_frame("CartPole-v1", obs)      # [160, 240, 3] uint8

:class:`HumanLabeler` sends one clip task per pair to a labeling database
(``nlhf label serve --db``, :mod:`nlhf.label.clips`) and polls for the answers: ``a``, ``b``
and ``tie`` become 1, 0 and ½; ``unclear``, or no answer within ``human_timeout`` seconds,
becomes "can't tell" and the pair is dropped.  Two equal clips are not asked.  A clip is drawn
from the segment's observations (:class:`SegmentRenderer`, :func:`observation_frame`, numpy
only: neither pygame nor seaborn): CartPole's and Acrobot's state as the game draws it, a
MinAtar grid, Atari's last pixel frame, and any other observation as one bar per feature.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from nlhf.config import ConfigError
from nlhf.control.envs import PIXEL_SIDE, PIXEL_STACK, is_atari, is_minatar, make_env, spec_of
from nlhf.control.labelers import CANT_TELL, FIRST, SECOND, TIE, Pairs
from nlhf.control.segments import Segment
from nlhf.label import clips
from nlhf.label.clips import gif_bytes
from nlhf.label.store import LabelStore


class HumanLabeler:
    """People answer pairs as GIF clips in a labeling database (``nlhf label serve``).

    ``fields`` is a route config: its ``db``, ``instruction``, ``human_timeout``,
    ``human_poll`` and ``env``; the tasks are tagged with its ``out`` folder."""

    def __init__(self, fields: Any) -> None:
        self.store = LabelStore(fields.db)
        self.fields, self.run_id = fields, str(Path(fields.out))
        self.renderer = SegmentRenderer(fields.env)

    def label(self, pairs: Pairs, rng: np.random.Generator) -> np.ndarray:
        """Requests one clip task per pair and waits; an unanswered or unclear pair is NaN."""
        gifs = [(self.renderer.gif(a), self.renderer.gif(b)) for a, b in pairs]
        asked = [i for i, (a, b) in enumerate(gifs) if a != b]  # equal clips: nothing to tell
        ids = clips.request(
            self.store, [gifs[i] for i in asked], self.fields.instruction, self.run_id
        )
        answers = clips.wait(  # a pair asked twice is one task
            self.store,
            list(dict.fromkeys(ids)),
            timeout=self.fields.human_timeout,
            poll_seconds=self.fields.human_poll,
        )
        value = {"a": FIRST, "b": SECOND, "tie": TIE}
        labels = np.full(len(pairs), CANT_TELL)
        for i, task in zip(asked, ids, strict=True):
            labels[i] = value.get(answers.get(task, "unclear"), CANT_TELL)
        return labels

    def prob(self, pairs: Pairs) -> np.ndarray:
        raise ConfigError("labeler=human has no preference function to evaluate with")


class SegmentRenderer:
    """RGB frames of a segment drawn from its observations (:func:`observation_frame`), played
    at the game's own rate."""

    def __init__(self, env_id: str) -> None:
        env = make_env(env_id, 0)
        self.env_id, self.fps = env_id, min(spec_of(env).fps, 50.0)
        env.close()

    def frames(self, segment: Segment) -> list[np.ndarray]:
        return [observation_frame(self.env_id, obs) for obs in np.asarray(segment.obs)]

    def gif(self, segment: Segment) -> bytes:
        return gif_bytes(segment.frames or self.frames(segment), fps=self.fps)


def cartpole_frame(state: np.ndarray, width: int = 240, height: int = 160) -> np.ndarray:
    """[height, width, 3] uint8: the cart (black) at x on a track of ±2.4 and the pole (brown)
    at angle θ, as gymnasium's own renderer lays them out."""
    frame = np.full((height, width, 3), 255, np.uint8)
    scale = width / 4.8
    track = int(height * 0.75)
    frame[track, :] = 0
    cx = int(width / 2 + float(state[0]) * scale)
    frame[track - 8 : track + 2, max(cx - 15, 0) : max(min(cx + 15, width), 0)] = 0
    pole = scale * 1.0  # the pole's drawn length: 2 × its half-length 0.5
    for f in np.linspace(0.0, 1.0, 80):
        px = int(cx + f * pole * math.sin(float(state[2])))
        py = int(track - 8 - f * pole * math.cos(float(state[2])))
        if 0 <= py < height - 2 and 0 <= px < width - 2:
            frame[py : py + 3, px : px + 3] = (202, 152, 101)
    return frame


def observation_frame(env_id: str, obs: np.ndarray) -> np.ndarray:
    """[H, W, 3] uint8 drawn from one observation of ``env_id`` (the module doc's families)."""
    obs = np.asarray(obs, np.float64).reshape(-1)
    if env_id.startswith("CartPole"):
        return cartpole_frame(obs)
    if env_id.startswith("Acrobot"):
        return acrobot_frame(obs)
    if is_minatar(env_id):
        return grid_frame(obs.reshape(10, 10, -1))
    if is_atari(env_id) and obs.size == PIXEL_STACK * PIXEL_SIDE * PIXEL_SIDE:
        grey = obs.reshape(PIXEL_STACK, PIXEL_SIDE, PIXEL_SIDE)[-1]
        return np.repeat((np.clip(grey, 0, 1) * 255).astype(np.uint8)[..., None], 3, -1)
    return bars_frame(obs)


def _stroke(frame: np.ndarray, a: np.ndarray, b: np.ndarray, colour: tuple, width: int) -> None:
    """A line from pixel ``a`` to pixel ``b`` (x, y), ``width`` pixels thick."""
    h, w = frame.shape[:2]
    for f in np.linspace(0.0, 1.0, int(np.abs(b - a).max()) + 2):
        x, y = (a + f * (b - a)).astype(int)
        frame[max(y - width // 2, 0) : min(y + width // 2 + 1, h),
              max(x - width // 2, 0) : min(x + width // 2 + 1, w)] = colour  # fmt: skip


def acrobot_frame(obs: np.ndarray, side: int = 200) -> np.ndarray:
    """[side, side, 3] uint8 from Acrobot's [cos θ1, sin θ1, cos θ2, sin θ2, θ̇1, θ̇2]: the two
    links (blue) hanging from the pivot and the line the tip must rise above, as the game's
    renderer lays them out."""
    frame = np.full((side, side, 3), 255, np.uint8)
    scale, centre = side / 4.4, np.array([side / 2, side / 2])
    t1, t2 = math.atan2(obs[1], obs[0]), math.atan2(obs[3], obs[2])
    elbow = centre + scale * np.array([math.sin(t1), math.cos(t1)])  # pixel y grows downwards
    tip = elbow + scale * np.array([math.sin(t1 + t2), math.cos(t1 + t2)])
    goal = centre[1] - scale
    _stroke(frame, np.array([0.0, goal]), np.array([side - 1.0, goal]), (0, 0, 0), 1)
    _stroke(frame, centre, elbow, (0, 204, 204), 7)
    _stroke(frame, elbow, tip, (0, 204, 204), 7)
    return frame


PALETTE = np.array(
    [(26, 26, 46), (230, 159, 0), (86, 180, 233), (0, 158, 115), (240, 228, 66),
     (0, 114, 178), (213, 94, 0), (204, 121, 167), (255, 255, 255), (153, 153, 153),
     (120, 60, 200)], np.uint8,
)  # fmt: skip
"""A dark background, then one colour per MinAtar channel (Okabe–Ito's, then greys)."""


def grid_frame(grid: np.ndarray) -> np.ndarray:
    """[10, 10, 3] uint8 of a MinAtar grid [10, 10, channels]: each cell in the colour of its
    last channel that is on (as MinAtar's own renderer picks), the background dark."""
    on = np.asarray(grid) > 0.5
    channel = np.where(on.any(-1), on.shape[-1] - np.argmax(on[..., ::-1], -1), 0)
    return PALETTE[np.minimum(channel, len(PALETTE) - 1)]


def bars_frame(obs: np.ndarray, height: int = 160) -> np.ndarray:
    """[height, W, 3] uint8: one bar per feature, up or down from the middle by tanh(value)
    (a game with no drawing of its own; W = 8 pixels per feature, 240 to 800)."""
    n = obs.size
    width = int(np.clip(8 * n, 240, 800))
    frame = np.full((height, width, 3), 255, np.uint8)
    mid = height // 2
    edges = np.linspace(0, width, n + 1).astype(int)
    for i, value in enumerate(np.tanh(obs)):
        top = int(mid - value * (mid - 4))
        lo, hi = sorted((top, mid))
        frame[lo : hi + 1, edges[i] : max(edges[i + 1] - 1, edges[i] + 1)] = (31, 119, 180)
    frame[mid, :] = 0  # the zero line
    return frame
