"""Vectorized rollouts: n copies of a game played together, step tensors out, state checkpointable.

    runner = Runner("CartPole-v1", n_envs=4, seed=0)
    rollout = runner.collect(policy_actor(policy), steps=128)      # per-step [T, N] tensors
    rollout.finished                                                # episodes that ended
    rewards = learned_rewards(rollout, reward_fn)                  # r̂(obs, action) instead

1. ``act(obs) -> (logits, values)`` is called once per step on the [N, obs_dim] observations;
   the runner samples each action from softmax(logits) with its own seeded generator;
2. the copies step together (a finished copy starts its next episode in the same step);
   each step's observation, action, log-prob, value, true reward, done flag and episode id
   are kept, and every finished episode's true return and length;
3. ``state_dict()`` holds all a continuation depends on (each copy's saved env state, the
   current observations, the episode counters, the generator), so a run resumed from a
   checkpoint plays exactly the steps an uninterrupted run plays; ``snapshot``/``restore``
   copy one copy's state onto another (paired continuations from the same state);
4. ``episode_returns`` plays whole episodes of a policy for evaluation.

:class:`ControlFields` and :func:`build_trainer` are what both acting-policy trainers
(``control.ppo``, ``control.nash``) share: the game, the policy's shape and the core loop.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from nlhf.config import ConfigError, option
from nlhf.control.envs import (
    Features,
    make_env,
    make_vector_env,
    restore_state,
    save_state,
    spec_of,
)
from nlhf.control.policy import ActingPolicy
from nlhf.train.core import NonFiniteError, Trainer, TrainFields
from nlhf.train.distributed import Processes

Act = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""obs [N, obs_dim] → (logits [N, n_actions], values [N])."""

RewardFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""r̂(obs [M, obs_dim], actions [M]) → [M] rewards (a learned reward model; CPU tensors in)."""


@dataclass
class Episode:
    """One finished episode of copy ``env``: its true return and number of steps."""

    env: int
    id: int
    true_return: float
    length: int


@dataclass
class Rollout:
    """``T`` steps of ``N`` copies; every tensor is [T, N, ...] in time order."""

    obs: torch.Tensor  # [T, N, obs_dim] float32, the observation each action was chosen on
    actions: torch.Tensor  # [T, N] int64
    logprobs: torch.Tensor  # [T, N] log-probability of the action under the acting logits
    values: torch.Tensor  # [T, N] the act function's values
    rewards: torch.Tensor  # [T, N] float32 true rewards
    dones: torch.Tensor  # [T, N] bool: this step ended its episode (terminated or truncated)
    episodes: torch.Tensor  # [T, N] int64 episode id of each step (unique within the run)
    next_obs: torch.Tensor  # [N, obs_dim] after the last step (a new episode's first if done)
    finished: list[Episode] = field(default_factory=list)
    final_obs: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)
    """(t, n) of each done step → the observation that episode ended in."""


def policy_actor(policy: Any) -> Act:
    """The act function of an :class:`~nlhf.control.policy.ActingPolicy`."""

    def act(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return policy.logits(obs), policy.value(obs)

    return act


@torch.no_grad()
def learned_rewards(rollout: Rollout, reward_fn: RewardFn) -> torch.Tensor:
    """r̂(s_t, a_t) of every step of ``rollout``, [T, N]."""
    t, n = rollout.actions.shape
    flat = reward_fn(rollout.obs.reshape(t * n, -1), rollout.actions.reshape(-1))
    flat = torch.as_tensor(flat, dtype=torch.float32)
    if flat.shape != (t * n,):
        raise ValueError(
            f"the reward function returned shape {tuple(flat.shape)} for {t * n} steps"
        )
    return flat.reshape(t, n)


class Runner:
    """``n_envs`` copies of one game, their current observations and episode bookkeeping."""

    def __init__(
        self,
        env_id: str,
        n_envs: int,
        seed: int,
        sticky: float | None = None,
        features: Features = "auto",
    ) -> None:
        self.envs = make_vector_env(env_id, n_envs, seed, sticky=sticky, features=features)
        self.spec = spec_of(self.envs, features)
        self.n = n_envs
        obs, _ = self.envs.reset()
        self.obs = torch.as_tensor(obs, dtype=torch.float32)
        self.returns = np.zeros(n_envs, np.float64)
        self.lengths = np.zeros(n_envs, np.int64)
        self.episode = np.arange(n_envs, dtype=np.int64)
        self.next_episode = n_envs
        self.generator = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def collect(self, act: Act, steps: int, device: torch.device | str = "cpu") -> Rollout:
        """Play ``steps`` steps of every copy with actions sampled from ``act``'s logits."""
        n = self.n
        keep: dict[str, list[torch.Tensor]] = {k: [] for k in ("obs", "act", "lp", "v", "r", "d")}
        episodes, finished, final_obs = [], [], {}
        for t in range(steps):
            logits, values = act(self.obs.to(device))
            logits = logits.float().cpu()
            logp_all = torch.log_softmax(logits, -1)
            actions = torch.multinomial(logp_all.exp(), 1, generator=self.generator).squeeze(1)
            obs, reward, terminated, truncated, info = self.envs.step(actions.numpy())
            done = np.logical_or(terminated, truncated)
            keep["obs"].append(self.obs)
            keep["act"].append(actions)
            keep["lp"].append(logp_all.gather(1, actions[:, None]).squeeze(1))
            keep["v"].append(values.float().cpu().reshape(n))
            keep["r"].append(torch.as_tensor(reward, dtype=torch.float32))
            keep["d"].append(torch.as_tensor(done))
            episodes.append(torch.as_tensor(self.episode.copy()))
            self.returns += reward
            self.lengths += 1
            for i in np.flatnonzero(done).tolist():
                final = info["final_obs"][i]
                final_obs[(t, i)] = torch.as_tensor(final, dtype=torch.float32)
                finished.append(
                    Episode(i, int(self.episode[i]), float(self.returns[i]), int(self.lengths[i]))
                )
                self.returns[i], self.lengths[i] = 0.0, 0
                self.episode[i] = self.next_episode
                self.next_episode += 1
            self.obs = torch.as_tensor(obs, dtype=torch.float32)
        return Rollout(
            obs=torch.stack(keep["obs"]),
            actions=torch.stack(keep["act"]),
            logprobs=torch.stack(keep["lp"]),
            values=torch.stack(keep["v"]),
            rewards=torch.stack(keep["r"]),
            dones=torch.stack(keep["d"]),
            episodes=torch.stack(episodes),
            next_obs=self.obs,
            finished=finished,
            final_obs=final_obs,
        )

    # ------------------------------------------------------------------ states
    def snapshot(self, i: int) -> dict[str, Any]:
        """Copy ``i``'s state: its env, observation and running episode."""
        return {
            "env": save_state(self.envs.envs[i]),
            "obs": self.obs[i].clone(),
            "return": float(self.returns[i]),
            "length": int(self.lengths[i]),
            "episode": int(self.episode[i]),
        }

    def restore(self, i: int, snap: dict[str, Any]) -> None:
        """Put copy ``i`` in a state taken by :meth:`snapshot` (of any copy)."""
        restore_state(self.envs.envs[i], snap["env"])
        self.obs = self.obs.clone()  # a rollout's next_obs may share it
        self.obs[i] = snap["obs"]
        self.returns[i], self.lengths[i] = snap["return"], snap["length"]
        self.episode[i] = snap["episode"]

    def state_dict(self) -> dict[str, Any]:
        return {
            "copies": [self.snapshot(i) for i in range(self.n)],
            "next_episode": self.next_episode,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["copies"]) != self.n:
            raise ValueError(f"the saved runner has {len(state['copies'])} copies, this {self.n}")
        for i, snap in enumerate(state["copies"]):
            self.restore(i, snap)
        self.next_episode = int(state["next_episode"])
        self.generator.set_state(state["generator"])

    def close(self) -> None:
        self.envs.close()


@torch.no_grad()
def episode_returns(
    policy: ActingPolicy,
    env_id: str,
    episodes: int,
    seed: int,
    sticky: float | None = None,
    features: Features = "auto",
    max_steps: int = 100_000,
) -> list[float]:
    """True returns of ``episodes`` episodes of ``policy`` (actions sampled), one per copy of
    the game so that short episodes are not over-counted; a copy still playing after
    ``max_steps`` steps is left out."""
    runner = Runner(env_id, episodes, seed, sticky=sticky, features=features)
    check_fits(policy, runner)
    first: dict[int, float] = {}
    for _ in range(0, max_steps, 64):
        rollout = runner.collect(policy_actor(policy), 64, policy.device)
        for e in rollout.finished:
            first.setdefault(e.env, e.true_return)
        if len(first) == episodes:
            break
    runner.close()
    return [first[i] for i in sorted(first)]


# --------------------------------------------------------------------------- the trainers' share


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

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.steps < 1:
            raise ConfigError(f"steps must be ≥ 1, got {self.steps}")
        if self.time_limit < 0:
            raise ConfigError(f"time_limit must be ≥ 0, got {self.time_limit}")
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
        from accelerate import Accelerator

        procs = Processes(Accelerator(cpu=True))
    return Trainer(
        config,
        policy.trainable(critic=critic),
        config.steps,
        lambda step: [],
        procs=procs,
        time_limit=config.time_limit,
    )


def check_fits(policy: ActingPolicy, runner: Runner) -> None:
    spec = runner.spec
    if (policy.obs_dim, policy.n_actions) != (spec.obs_dim, spec.n_actions):
        raise ConfigError(
            f"env: the policy takes {policy.obs_dim} features and {policy.n_actions} actions, "
            f"{spec.env_id} gives {spec.obs_dim} and {spec.n_actions}"
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
