"""People as the labeler of a route: segments drawn as GIF clips, answered in the labeling app.

    labeler = HumanLabeler(config)                     # config.db, instruction, human_timeout, …
    y = labeler.label(pairs, rng)                      # waits for the answers; NaN: no answer
    frame = cartpole_frame(obs)                        # [160, 240, 3] uint8

:class:`HumanLabeler` sends one clip task per pair to a labeling database
(``nlhf label serve --db``, :mod:`nlhf.label.clips`) and polls for the answers: ``a``, ``b``
and ``tie`` become 1, 0 and ½; ``unclear``, or no answer within ``human_timeout`` seconds,
becomes "can't tell" and the pair is dropped.  Two equal clips are not asked.  A clip is drawn
from the segment's observations (:class:`SegmentRenderer`), which needs the observation to be
the game's state: only CartPole works, drawn with numpy (:func:`cartpole_frame`), so pygame is
not needed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from nlhf.config import ConfigError
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
    """RGB frames of a segment drawn from its observations: CartPole only, whose observation is
    its physics state [x, ẋ, θ, θ̇] (drawn here with numpy, so pygame is not needed)."""

    def __init__(self, env_id: str) -> None:
        if not env_id.startswith("CartPole"):
            raise ConfigError(
                f"labeler=human: clips of {env_id} cannot be drawn from its features "
                "(only CartPole, whose observation is its state)"
            )
        self.fps = 50.0  # CartPole's render_fps

    def frames(self, segment: Segment) -> list[np.ndarray]:
        return [cartpole_frame(obs) for obs in np.asarray(segment.obs, np.float64)]

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
