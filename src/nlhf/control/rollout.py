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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from nlhf.config import ConfigError
from nlhf.control.envs import (
    Features,
    make_vector_env,
    restore_state,
    save_state,
    spec_of,
)
from nlhf.control.policy import ActingPolicy, evaluate_logits

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
class ControlRollout:
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
def learned_rewards(rollout: ControlRollout, reward_fn: RewardFn) -> torch.Tensor:
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
    def collect(self, act: Act, steps: int, device: torch.device | str = "cpu") -> ControlRollout:
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
            keep["lp"].append(evaluate_logits(logits, actions)[0])
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
        return ControlRollout(
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
    check_env_fits(policy, runner)
    first: dict[int, float] = {}
    for _ in range(0, max_steps, 64):
        rollout = runner.collect(policy_actor(policy), 64, policy.device)
        for e in rollout.finished:
            first.setdefault(e.env, e.true_return)
        if len(first) == episodes:
            break
    runner.close()
    return [first[i] for i in sorted(first)]


def check_env_fits(policy: ActingPolicy, runner: Runner) -> None:
    """Stop with a config error naming both when the game's shapes differ from the policy's."""
    spec = runner.spec
    if (policy.obs_dim, policy.n_actions) != (spec.obs_dim, spec.n_actions):
        raise ConfigError(
            f"env: the policy takes {policy.obs_dim} features and {policy.n_actions} actions, "
            f"{spec.env_id} gives {spec.obs_dim} and {spec.n_actions}"
        )
