"""The labels of one run: who labels, the schedule, the segments they compare, the judge's refit.

    labelling = Labelling(config, judge, horizon=steps * agent_steps_per_step, max_steps=500)
    labelling.offer(rollouts, agent_steps, length=50, stride=5)   # windows of every copy

:class:`LabelFields` are a route's labelling options (a mixin beside the trainer's fields,
``env`` included); :meth:`Labelling.update` is one step:

1. segments: windows of a rollout (:func:`windows`); an episode that ends inside one
   (terminated, not truncated) goes on in its end state with action 0 and reward 0, so the
   oracle compares how long each segment survives and what it earned;
2. labels: when ``labels_due`` (``initial`` from the initial policy's play, then more as the
   agent steps pass, ``budget`` in all) exceeds those asked for by ``chunk``, pairs of
   segments go to the labeler (:mod:`~nlhf.control.labelers`, or people:
   :mod:`~nlhf.control.human`) and the answers into the label buffer;
3. refit: the judge is fitted again, warm-started, on the whole buffer.

Its ``state_dict`` holds the buffer, the judge's weights, the generator and the counters.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from nlhf.config import Checked, ConfigError, option
from nlhf.control.envs import is_atari, is_minatar, segment_length
from nlhf.control.human import HumanLabeler
from nlhf.control.labelers import TIE, LabelerName, make_labeler
from nlhf.control.labels import C_SMALL, LabelBuffer, labels_due
from nlhf.control.reward_model import FitConfig, fit
from nlhf.control.rollout import ControlRollout, Runner
from nlhf.control.segments import Segment, sample_pairs


@dataclass
class LabelFields(Checked):
    """Who labels, how many labels and when, and how the judge is fitted to them."""

    labeler: LabelerName = option(
        "oracle",
        "oracle (higher true segment return, an end penalized by the lost steps), a B-Pref "
        "teacher (noisy, mistake, skip, myopic, equal), population (CartPole annotator groups "
        "whose majority can cycle) or human (GIF clips through a labeling database)",
    )
    labeler_options: list[str] = option(
        [],
        "key=value options of the labeler: a teacher's beta, gamma, mistake, skip, equal, "
        "scale; population's population, temperature",
    )
    budget: int = option(1000, "labels in all over the run (Christiano et al.: 700–5,500)")
    initial: int = option(200, "labels from the initial policy, before the first update")
    initial_play: int = option(
        0,
        "agent steps of the initial policy's play the initial labels are drawn from (0: one "
        "rollout; on Pong one rollout is the opening serve of every copy, mostly ties)",
    )
    label_c: float = option(
        C_SMALL, "c of the labelling rate ∝ c/(T + c) at agent step T (Christiano et al.)"
    )
    chunk: int = option(50, "ask for labels once this many are due (fewer refits)")
    capacity: int = option(3000, "labelled pairs kept, oldest dropped (Christiano et al.: 3,000)")
    segment: int = option(
        0,
        "steps per labelled window of the RLHF route and of update=spo (0: 25 for Atari and "
        "MinAtar, else 50); update=nash-md-pg labels its continuations of Nash's length",
    )
    stride: int = option(
        5, "the RLHF route and update=spo start a labelled window every this many rollout steps"
    )
    members: int = option(1, "ensemble members of the reward or preference model")
    judge_hidden: int = option(64, "width of the judge's two hidden layers")
    judge_actions: Literal["auto", "yes", "no"] = option(
        "auto",
        "whether the judge sees each step's action beside its observation (auto: no on Atari "
        "and MinAtar, as Christiano et al.'s Atari reward network; yes elsewhere, as their "
        "MuJoCo one)",
    )
    fit_epochs: int = option(20, "epochs of each refit, warm-started from the last fit")
    fit_lr: float = option(1e-3, "AdamW learning rate of the judge's fit")
    reward_std: float = option(
        1.0, "RLHF: std of the normalized r̂ over the rollout's steps (Christiano et al.: 1)"
    )
    db: str = option("", "labeler=human: the labeling database (`nlhf label serve --db`)")
    instruction: str = option(
        "Which clip shows better play?", "labeler=human: the question shown above the clips"
    )
    human_timeout: float = option(
        3600.0, "labeler=human: seconds to wait for each batch of labels (late ones are dropped)"
    )
    human_poll: float = option(5.0, "labeler=human: seconds between polls of the database")

    def check(self) -> None:
        self.at_least(0, "budget", "initial", "initial_play")
        self.at_least(1, "chunk", "capacity", "stride", "members", "judge_hidden", "fit_epochs")
        if self.segment < 0 or not (self.label_c > 0 and self.fit_lr > 0 and self.reward_std > 0):
            raise ConfigError("segment must be ≥ 0; label_c, fit_lr and reward_std > 0")
        if self.labeler == "human" and not self.db:
            raise ConfigError("labeler=human needs db (the labeling database to send clips to)")
        if self.labeler != "human":  # an unknown option is an error before any training
            make_labeler(self.labeler, **parse_options(self.labeler_options))

    def label_length(self) -> int:
        """Steps per labelled segment of the RLHF route (NLHF labels its continuations)."""
        return segment_length(self.env, self.segment)

    def judge_action_count(self, n_actions: int) -> int:
        """The judge's action inputs: ``n_actions`` (one-hot) or 0 (observations only)."""
        if self.judge_actions == "auto":
            return 0 if is_atari(self.env) or is_minatar(self.env) else n_actions
        return n_actions if self.judge_actions == "yes" else 0


def parse_options(items: list[str]) -> dict[str, Any]:
    """``["mistake=0.2", "population=cartpole"]`` → {"mistake": 0.2, "population": "cartpole"}."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"labeler_options: {item!r} is not key=value")
        try:
            out[key] = None if raw == "None" else float(raw)
        except ValueError:
            out[key] = raw
    return out


def episode_truncated(
    rollout: ControlRollout, max_steps: int | None
) -> dict[tuple[int, int], bool]:
    """(t, n) of each done step → whether that episode was cut by the time limit."""
    lengths = {(e.env, e.id): e.length for e in rollout.finished}
    out = {}
    for t, n in torch.nonzero(rollout.dones).tolist():
        length = lengths[(n, int(rollout.episodes[t, n]))]
        out[(t, n)] = max_steps is not None and length >= max_steps
    return out


def windows(
    rollout: ControlRollout, length: int, stride: int, max_steps: int | None
) -> tuple[list[Segment], list[bool]]:
    """Segments of ``length`` steps starting every ``stride`` steps of each copy, and whether
    each ends its episode.  A segment in which its episode terminates goes on
    in the end state (action 0, reward 0); one cut by a time limit or by the rollout's end is
    left out."""
    steps = rollout.actions.shape[0]
    truncated = episode_truncated(rollout, max_steps)
    out, ended = [], []
    for n in range(rollout.actions.shape[1]):
        done = rollout.dones[:, n].numpy()
        for t0 in range(0, steps, stride):
            stop = min(t0 + length, steps)
            ends = np.flatnonzero(done[t0:stop])
            if len(ends) == 0 and stop < t0 + length:
                continue  # the rollout ends first: its future is unknown
            obs = rollout.obs[t0:stop, n].numpy().copy()
            actions = rollout.actions[t0:stop, n].numpy().copy()
            rewards = rollout.rewards[t0:stop, n].numpy().copy()
            if len(ends):
                t = t0 + int(ends[0])
                if truncated[(t, n)]:
                    continue
                keep = t - t0 + 1
                pad = length - keep
                final = rollout.final_obs[(t, n)].numpy()
                obs = np.concatenate([obs[:keep], np.repeat(final[None], pad, 0)])
                actions = np.concatenate([actions[:keep], np.zeros(pad, np.int64)])
                rewards = np.concatenate([rewards[:keep], np.zeros(pad, np.float32)])
            episode = int(rollout.episodes[t0, n])
            out.append(Segment(obs, actions, rewards, episode=episode, start=t0))
            ended.append(bool(len(ends)))
    return out, ended


def initial_rollouts(play: Callable[[], ControlRollout], steps: int) -> list[ControlRollout]:
    """Rollouts of the initial policy from ``play()`` until they hold ``steps`` agent steps
    (at least one rollout)."""
    out = [play()]
    while sum(r.actions.numel() for r in out) < steps:
        out.append(play())
    return out


def max_steps(runner: Runner) -> int | None:
    """The time limit of the runner's game (None: none)."""
    spec = runner.envs.envs[0].spec
    return None if spec is None else spec.max_episode_steps


class Labelling:
    """The labels of one run and the judge fitted to them (steps 1–3 of the module doc)."""

    def __init__(self, fields: Any, judge: torch.nn.Module, horizon: float, max_steps: int | None):
        self.fields, self.judge, self.horizon, self.max_steps = fields, judge, horizon, max_steps
        if fields.labeler == "human":
            self.labeler: Any = HumanLabeler(fields)
        else:
            self.labeler = make_labeler(fields.labeler, **parse_options(fields.labeler_options))
        self.buffer = LabelBuffer(fields.capacity)
        self.rng = np.random.default_rng(fields.seed + 7919)
        self.asked = 0  # labels asked for so far (answered or not)
        self.fits = 0
        self.ends: deque[np.ndarray] = deque(maxlen=1000)  # end states seen, for the r̂ anchor
        self.started = False
        self.last: dict[str, float] = {}

    def due(self, agent_steps: float) -> int:
        f = self.fields
        return labels_due(agent_steps, f.budget, f.initial, f.label_c, self.horizon)

    def offer(
        self,
        rollouts: list[ControlRollout],
        agent_steps: float,
        length: int | None = None,
        stride: int | None = None,
    ) -> bool:
        """:meth:`update` with the windows of ``length`` steps every ``stride`` steps of each
        copy of each rollout (None: the whole rollout is one window) and their end states."""
        segments, ends = [], []
        for rollout in rollouts:
            steps = rollout.actions.shape[0]
            segments += windows(rollout, length or steps, stride or steps, self.max_steps)[0]
            truncated = episode_truncated(rollout, self.max_steps)
            ends += [rollout.final_obs[k].numpy() for k, limit in truncated.items() if not limit]
        return self.update(segments, ends, agent_steps)

    def update(self, segments: list[Segment], ends: list[np.ndarray], agent_steps: float) -> bool:
        """Label and refit when enough labels are due; True when the judge changed."""
        self.started = True
        self.ends.extend(ends)
        due = self.due(agent_steps)
        wanted = due - self.asked
        if wanted <= 0 or (wanted < self.fields.chunk and due < self.fields.budget):
            return False
        if len(segments) < 2:
            return False
        t0 = time.perf_counter()
        pairs = sample_pairs(segments, wanted, self.rng)
        labels = self.labeler.label(pairs, self.rng)
        self.asked += wanted
        added = self.buffer.add(pairs, labels)
        t1 = time.perf_counter()
        if not len(self.buffer):
            return False
        f = self.fields
        a, b, y = self.buffer.batches()
        config = FitConfig(epochs=f.fit_epochs, lr=f.fit_lr, seed=f.seed + self.fits)
        result = fit(self.judge, a, b, y, config)
        self.fits += 1
        self.last = {
            "label_seconds": t1 - t0,
            "fit_seconds": time.perf_counter() - t1,
            "judge_train_accuracy": result.train_accuracy,
            "judge_val_accuracy": result.val_accuracy,
            "labels_added": float(added),
            "ties": float(np.mean(labels[~np.isnan(labels)] == TIE)) if added else 0.0,
        }
        return True

    def metrics(self) -> dict[str, float]:
        """``labels`` (kept so far, "can't tell" dropped), ``labels_asked``, ``fits`` and the
        last fit's accuracies (NaN ones left out)."""
        out = {"labels": float(self.buffer.added), "labels_asked": float(self.asked)}
        out["fits"] = float(self.fits)
        out.update({k: v for k, v in self.last.items() if math.isfinite(v)})
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "buffer": self.buffer.state_dict(),
            "judge": {k: v.clone() for k, v in self.judge.state_dict().items()},
            "rng": self.rng.bit_generator.state,
            "asked": self.asked,
            "fits": self.fits,
            "ends": list(self.ends),
            "started": self.started,
            "last": dict(self.last),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.judge.load_state_dict(state["judge"])
        self.rng.bit_generator.state = state["rng"]
        self.asked, self.fits = int(state["asked"]), int(state["fits"])
        self.ends.clear()
        self.ends.extend(state["ends"])
        self.started, self.last = bool(state["started"]), dict(state["last"])
