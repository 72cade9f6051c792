"""PPO for acting policies on the training core: the true game reward or a learned r̂(s, a).

    algorithm, last = train(Config(env="CartPole-v1", out="runs/cartpole"))
    algorithm, last = train(Config(**ATARI, env="ALE/Pong-v5"), reward_fn=reward_model)

The defaults are CleanRL's ``ppo.py`` values for classic control (``ATARI`` holds its
``ppo_atari.py`` changes).  Each core step (:meth:`ControlPPO.update`):

1. rollout (``play``): ``n_envs`` copies × ``n_steps`` steps of π, kept as ``last_rollout``;
2. reward: the game's, or r̂(s_t, a_t) of ``reward_fn`` normalized by running statistics;
3. GAE(γ, λ) advantages and returns from the critic (:func:`nlhf.losses.gae` over episode
   streams: an episode end cuts the recursion);
4. ``epochs`` shuffled passes of ``mini_batches`` optimizer steps on the clipped policy loss
   − ``ent_coef``·entropy + ``vf_coef``·value loss (:mod:`nlhf.losses`).

Checkpoints keep the games' states and the action sampler's generator, so a run resumed by the
same command (after a SIGKILL too) ends with the weights of an uninterrupted one.  Logged:
``episode_return`` (true, the last 20 episodes), ``episode_length``, ``episodes``,
``agent_steps``, the losses, ``entropy``, ``approx_kl``, ``clip_fraction``,
``explained_variance``, ``grad_norm``, ``steps_per_second``, ``learned_reward`` with r̂.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from nlhf.config import Checked, ConfigError, option
from nlhf.control.policy import ActingPolicy
from nlhf.control.rollout import (
    ControlRollout,
    RewardFn,
    Runner,
    check_env_fits,
    learned_rewards,
    policy_actor,
)
from nlhf.control.trainer import ControlFields, ReturnWindow, build_trainer, finite
from nlhf.losses import explained_variance, gae, ppo_policy_loss, ppo_value_loss
from nlhf.train.core import Algorithm, Trainer

ATARI = {"n_envs": 8, "clip": 0.1, "steps": 9765}
"""CleanRL ``ppo_atari.py``'s differences from the classic-control defaults (10M agent steps)."""


@dataclass
class PPOFields(Checked):
    """PPO's rollout shape and update (CleanRL ``ppo.py``'s names and defaults): the fields
    every trainer with a critic and GAE shares (this PPO and the NLHF route's SPO update)."""

    n_envs: int = option(4, "copies of the game played together (CleanRL num_envs; Atari 8)")
    n_steps: int = option(128, "steps of every copy per rollout (CleanRL num_steps)")
    epochs: int = option(4, "passes over each rollout (CleanRL update_epochs)")
    mini_batches: int = option(
        4, "mini-batches per pass, one optimizer step each (CleanRL num_minibatches)"
    )
    gamma: float = option(0.99, "discount γ (CleanRL gamma)")
    lam: float = option(0.95, "GAE λ (CleanRL gae_lambda)")
    clip: float = option(
        0.2, "clip ε of the ratio and the value update (CleanRL clip_coef; Atari 0.1)"
    )
    clip_value: bool = option(
        True, "clip the value update around the rollout's values (clip_vloss)"
    )
    norm_adv: bool = option(True, "normalize the advantages within each mini-batch (norm_adv)")
    ent_coef: float = option(0.01, "weight of the entropy bonus (CleanRL ent_coef)")
    vf_coef: float = option(0.5, "weight of the value loss (CleanRL vf_coef)")
    target_kl: float = option(
        0.0, "stop a step's passes once approx_kl exceeds this (0: never; CleanRL target_kl)"
    )

    def check(self) -> None:
        self.at_least(1, "n_envs", "n_steps", "epochs", "mini_batches")
        self.at_least(0, "ent_coef", "vf_coef", "target_kl")
        if (self.n_envs * self.n_steps) % self.mini_batches:
            raise ConfigError(
                f"mini_batches ({self.mini_batches}) must divide n_envs × n_steps "
                f"({self.n_envs * self.n_steps})"
            )
        if not (0.0 <= self.gamma <= 1.0 and 0.0 <= self.lam <= 1.0):
            raise ConfigError(f"gamma and lam must be in [0, 1], got {self.gamma}, {self.lam}")
        if self.clip <= 0:
            raise ConfigError(f"clip must be > 0, got {self.clip}")


@dataclass
class Config(PPOFields, ControlFields):
    """PPO on an acting policy (CleanRL ``ppo.py`` defaults, CartPole)."""

    out: str = option("runs/control-ppo", "output folder: metrics.jsonl, checkpoints/, policy/")
    lr: float = option(2.5e-4, "Adam learning rate (CleanRL learning_rate)")
    schedule: Literal["constant", "linear", "cosine"] = option(
        "linear", "learning-rate decay over the steps (CleanRL anneal_lr: linear to 0)"
    )
    grad_clip: float = option(0.5, "clip the gradient norm (CleanRL max_grad_norm)")
    checkpoint_every: int = option(50, "save a resumable checkpoint every this many steps")
    steps: int = option(
        1000, "rollouts (CleanRL total_timesteps 500k at 4 × 128 steps per rollout is 976)"
    )
    reward_norm: Literal["standard", "scale", "none"] = option(
        "standard",
        "a learned reward: standard = zero mean and unit variance (Christiano et al. 2017), "
        "scale = unit variance only, none = as given (the game's reward is never normalized)",
    )


class RunningMoments:
    """Mean and variance of every value seen so far (Chan et al.'s parallel update)."""

    def __init__(self) -> None:
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    def update(self, x: torch.Tensor) -> None:
        x = x.double().reshape(-1)
        n, mean = x.numel(), float(x.mean())
        m2 = float(((x - mean) ** 2).sum())
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta**2 * self.count * n / total
        self.count = total

    @property
    def std(self) -> float:
        return float(np.sqrt(self.m2 / max(self.count, 1))) + 1e-8

    def state_dict(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.count, self.mean, self.m2 = int(state["count"]), state["mean"], state["m2"]


@dataclass
class Minibatch:
    index: torch.Tensor  # flat step indices into the rollout
    weight: float = 1.0


@dataclass
class Batch:
    """A rollout flattened to [T·N] steps, with its advantages and returns."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


class ControlPPO(Algorithm):
    """``update`` = rollout, rewards, advantages, then the PPO passes."""

    config: Config
    last_rollout: ControlRollout | None = None
    """The rollout of the last ``update`` (what a route labels segments of)."""

    def __init__(
        self,
        trainer: Trainer,
        config: Config,
        reward_fn: RewardFn | None = None,
        copies: int | None = None,
    ) -> None:
        """``copies``: the games the runner plays (default ``n_envs``; a subclass may play
        more, e.g. the SPO update's opponent copies)."""
        super().__init__(trainer, config)
        self.policy: ActingPolicy = trainer.policy.model
        n = config.n_envs if copies is None else copies
        self.runner = Runner(
            config.env, n, config.seed, sticky=config.sticky, features=config.features
        )
        check_env_fits(self.policy, self.runner)
        self.reward_fn = reward_fn
        self.moments = RunningMoments()
        self.window = ReturnWindow()

    # ------------------------------------------------------------------ 1.–3.
    def play(self) -> ControlRollout:
        """1. ``n_steps`` steps of every copy of the game, actions sampled from π."""
        return self.runner.collect(
            policy_actor(self.policy), self.config.n_steps, self.policy.device
        )

    def rewards(self, rollout: ControlRollout) -> tuple[torch.Tensor, dict[str, float]]:
        """2. The game's rewards, or r̂ normalized by the running moments of every r̂ so far."""
        if self.reward_fn is None:
            return rollout.rewards, {}
        raw = learned_rewards(rollout, self.reward_fn)
        self.moments.update(raw)
        norm = self.config.reward_norm
        shift = self.moments.mean if norm == "standard" else 0.0
        scale = self.moments.std if norm != "none" else 1.0
        return (raw - shift) / scale, {"learned_reward": float(raw.mean())}

    @torch.no_grad()
    def batch(self, rollout: ControlRollout, rewards: torch.Tensor) -> Batch:
        """3. GAE advantages and returns, flattened."""
        cfg = self.config
        next_value = self.policy.value(rollout.next_obs.to(self.policy.device)).cpu()
        advantages, returns = gae(  # over [N, T] streams
            rewards.T, rollout.values.T, None, cfg.gamma, cfg.lam, rollout.dones.T, next_value
        )
        advantages, returns = advantages.T, returns.T
        return Batch(
            obs=rollout.obs.reshape(-1, rollout.obs.shape[-1]).to(self.policy.device),
            actions=rollout.actions.reshape(-1).to(self.policy.device),
            logprobs=rollout.logprobs.reshape(-1).to(self.policy.device),
            values=rollout.values.reshape(-1).to(self.policy.device),
            advantages=advantages.reshape(-1).to(self.policy.device),
            returns=returns.reshape(-1).to(self.policy.device),
        )

    # ------------------------------------------------------------------ 4.
    def losses(self, batch: Batch, index: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """The total loss of the steps ``index`` and its parts."""
        cfg = self.config
        obs = batch.obs[index]
        logprobs, entropy = self.policy.evaluate(obs, batch.actions[index])
        entropy = entropy.mean()
        advantages = batch.advantages[index]
        if cfg.norm_adv and len(index) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        keep = torch.ones_like(logprobs, dtype=torch.bool)
        policy_loss, stats = ppo_policy_loss(
            logprobs, batch.logprobs[index], advantages, keep, cfg.clip
        )
        values, returns = self.policy.value(obs), batch.returns[index]
        if cfg.clip_value:
            value_loss = ppo_value_loss(values, batch.values[index], returns, keep, cfg.clip)
        else:
            value_loss = 0.5 * ((values - returns) ** 2).mean()
        loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss
        return loss, {
            "policy_loss": float(policy_loss.detach()),
            "value_loss": float(value_loss.detach()),
            "entropy": float(entropy.detach()),
            **{k: float(v) for k, v in stats.items()},
        }

    def order(self, step: int, epoch: int, size: int) -> torch.Tensor:
        """The shuffled step indices of one pass: a function of (seed, step, epoch) only."""
        seed = (self.config.seed * 1_000_003 + step) * 101 + epoch
        return torch.randperm(size, generator=torch.Generator().manual_seed(seed))

    def optimize(self, batch: Batch, step: int) -> dict[str, float]:
        cfg = self.config
        size = len(batch.actions)
        per = size // cfg.mini_batches
        rows: list[dict[str, float]] = []
        for epoch in range(cfg.epochs):
            order = self.order(step, epoch, size).to(batch.obs.device)
            for k in range(cfg.mini_batches):
                index = order[k * per : (k + 1) * per]
                rows.append(
                    self.trainer.gradient_step(
                        lambda m: self.losses(batch, m.index), [Minibatch(index)]
                    )
                )
            if cfg.target_kl and rows[-1]["approx_kl"] > cfg.target_kl:
                break
        return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}

    def learning(self, rollout: ControlRollout) -> tuple[ControlRollout, list[Any]]:
        """The part of ``rollout`` that π learns from and the episodes it finished: all of it
        here (the SPO update keeps only its learners' copies)."""
        return rollout, rollout.finished

    def update(self, chunks: list[Any], step: int) -> dict[str, float]:
        cfg = self.config
        t0 = time.perf_counter()
        rollout = self.last_rollout = self.play()
        learned, finished = self.learning(rollout)
        self.window.add(finished)
        rewards, reward_metrics = self.rewards(rollout)
        batch = self.batch(learned, rewards)
        t1 = time.perf_counter()
        metrics = self.optimize(batch, step)
        t2 = time.perf_counter()
        agent_steps = rollout.actions.numel()  # every copy's steps, opponents' included
        metrics.update(
            **reward_metrics,
            **self.window.metrics(),
            agent_steps=float((step + 1) * agent_steps),
            explained_variance=explained_variance(
                batch.values, batch.returns, torch.ones_like(batch.returns, dtype=torch.bool)
            ),
            rollout_seconds=t1 - t0,
            update_seconds=t2 - t1,
            steps_per_second=agent_steps / (t2 - t0),
        )
        self.finished = self.window.reached(cfg.target_return)
        return finite(metrics)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "runner": self.runner.state_dict(),
            "moments": self.moments.state_dict(),
            "window": self.window.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.runner.load_state_dict(state["runner"])
        self.moments.load_state_dict(state["moments"])
        self.window.load_state_dict(state["window"])


def train(
    config: Config, policy: ActingPolicy | None = None, reward_fn: RewardFn | None = None
) -> tuple[ControlPPO, dict[str, float]]:
    """Train to ``config.steps`` (resuming from ``<out>/checkpoints``); the policy is saved to
    ``<out>/policy``.  Returns the algorithm and the last step's metrics."""
    trainer = build_trainer(config, policy)
    algorithm = ControlPPO(trainer, config, reward_fn)
    last = trainer.run(algorithm, "control-ppo")
    algorithm.runner.close()
    return algorithm, last
