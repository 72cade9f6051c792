"""What the acting-policy trainers share: their fields, the core loop over a policy, the return
window and the metrics check.

    trainer = build_trainer(config)                  # a fresh policy shaped for config.env
    trainer = build_trainer(config, policy, critic=False)   # an actor-only trainer
    window.add(rollout.finished); window.metrics(); window.reached(475)

:class:`ControlFields` are the game, the policy's shape and the length of a run (on top of the
core's :class:`~nlhf.train.core.TrainFields`); :func:`build_trainer` hands an
:class:`~nlhf.control.policy.ActingPolicy` to the one training core, whose batches are empty
because the algorithm plays its own rollouts; :class:`ReturnWindow` keeps the true returns of
the last finished episodes (the logged ``episode_return`` and the ``target_return`` stop);
:func:`finite` turns metrics into floats and stops on a NaN/inf naming its key.  Used by
:mod:`nlhf.control.ppo`, :mod:`nlhf.control.nash` and the routes.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from accelerate import Accelerator

from nlhf.config import ConfigError, option
from nlhf.control.envs import Features, make_env, spec_of
from nlhf.control.policy import ActingPolicy
from nlhf.control.rollout import Episode
from nlhf.train.core import NonFiniteError, Trainer, TrainFields
from nlhf.train.distributed import Processes


@dataclass
class ControlFields(TrainFields):
    """The game, the policy and the length of a run: the fields of every acting trainer."""

    env: str = option(
        "CartPole-v1", "gymnasium id: CartPole-v1, ALE/Pong-v5 (RAM features), MinAtar/<Game>-v1"
    )
    features: Features = option(
        "auto", "auto: the game's feature vector; pixels: 4 stacked 80×80 Atari frames (GPU)"
    )
    sticky: float | None = option(
        None,
        "probability that the game repeats the previous action (Atari default 0, as CleanRL's "
        "NoFrameskip-v4; ale-py's v5 default is 0.25)",
    )
    hidden: list[int] = option([64, 64], "hidden tanh layers of the actor and the critic")
    steps: int = option(1000, "core steps, one rollout and its updates each")
    time_limit: float = option(
        0.0, "stop after this many minutes of training steps and save the policy (0: no limit)"
    )
    device: Literal["cpu", "auto"] = option(
        "cpu", "cpu: small networks run fastest there; auto: the accelerator if there is one"
    )
    target_return: float = option(
        0.0,
        "stop once the mean true return of the last 20 episodes reaches this (CartPole's "
        "solved: 475; 0: run all the steps)",
    )

    def check(self) -> None:
        self.at_least(1, "steps")
        self.at_least(0, "time_limit")
        if not self.hidden or min(self.hidden) < 1:
            raise ConfigError(f"hidden must be widths ≥ 1, got {self.hidden}")


def new_policy(config: ControlFields) -> ActingPolicy:
    """A fresh policy shaped for ``config.env``, initialized from ``config.seed``."""
    probe = make_env(config.env, config.seed, sticky=config.sticky, features=config.features)
    spec = spec_of(probe, config.features)
    probe.close()
    torch.manual_seed(config.seed)
    return ActingPolicy(spec.obs_dim, spec.n_actions, config.hidden)


def build_trainer(
    config: ControlFields, policy: ActingPolicy | None = None, critic: bool = True
) -> Trainer:
    """The core loop over ``policy`` (a fresh one when None); ``critic=False`` freezes the
    critic.  The algorithm plays its own rollouts, so the loop's batches are empty."""
    policy = policy if policy is not None else new_policy(config)
    procs = None
    if config.device == "cpu":
        procs = Processes(Accelerator(cpu=True))
    return Trainer(
        config,
        policy.trainable(critic=critic),
        config.steps,
        lambda step: [],
        procs=procs,
        time_limit=config.time_limit,
    )


class ReturnWindow:
    """The true returns and lengths of the last ``size`` finished episodes."""

    def __init__(self, size: int = 20) -> None:
        self.returns: deque[float] = deque(maxlen=size)
        self.lengths: deque[int] = deque(maxlen=size)
        self.count = 0

    def add(self, episodes: list[Episode]) -> None:
        for e in episodes:
            self.returns.append(e.true_return)
            self.lengths.append(e.length)
        self.count += len(episodes)

    def metrics(self) -> dict[str, float]:
        """``episode_return``/``episode_length`` (means over the window, once there is an
        episode) and ``episodes`` (finished so far)."""
        out = {"episodes": float(self.count)}
        if self.returns:
            out["episode_return"] = float(np.mean(self.returns))
            out["episode_length"] = float(np.mean(self.lengths))
        return out

    def reached(self, target: float) -> str:
        """Why to stop: a full window whose mean return is at least ``target`` (> 0)."""
        full = len(self.returns) == self.returns.maxlen
        mean = float(np.mean(self.returns)) if self.returns else 0.0
        if target and full and mean >= target:
            return f"mean return {mean:.1f} of the last {len(self.returns)} episodes ≥ {target:g}"
        return ""

    def state_dict(self) -> dict[str, Any]:
        return {"returns": list(self.returns), "lengths": list(self.lengths), "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns.clear()
        self.lengths.clear()
        self.returns.extend(state["returns"])
        self.lengths.extend(state["lengths"])
        self.count = int(state["count"])


def finite(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` with every value a float; a NaN/inf raises naming its key."""
    for key, value in metrics.items():
        if not math.isfinite(value):
            raise NonFiniteError(key)
    return {k: float(v) for k, v in metrics.items()}
