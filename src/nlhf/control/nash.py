"""Nash-MD-PG for acting policies: paired continuations from the same game state, judged by a
preference P(σ ≻ σ′) over segments, no reward model.

    algorithm, last = train(Config(env="CartPole-v1"), prefer=return_preference)
    algorithm, last = train(Config(beta=0.0), prefer=model)     # self-play (SPO's corner)

Each core step (:meth:`ControlNashMDPG.update`), for ``states`` groups of game copies:

1. start states: each group's driver copy (which plays π on and on) is copied onto the
   group's other copies (ALE ``cloneState``, or the physics state and its RNG);
2. continuations: ``length`` steps of π on ``samples`` copies (the driver one of them) and of
   the opponent π_β (the per-step geometric mixture π^(1−β)·μ^β of
   :func:`nlhf.models.mixture.mixture_logits`, μ the frozen initial policy) on ``opponents``
   copies; a segment ends with its episode (1–2 are ``play``, kept as ``last_rollout``);
3. preferences (``weigh``): ``prefer(a, b)`` → P(σ_a ≻ σ_b) for every π segment against each
   opponent segment of its state; advantage A = P̄ − baseline; with β = 0 every copy plays π
   and A is its in-group win rate − ½ (SPO: Swamy et al. 2024);
4. ``epochs`` passes of PPO-clipped steps on the per-step weights A − τ·(KL to μ of the rest
   of the segment), :func:`nlhf.losses.nash_md_pg_weights` (one pass: the plain Nash-MD-PG
   step of Munos et al. 2023).

Logged: ``win_rate`` (mean P̄; ½ under self-play), ``kl`` (Σ log π/μ per segment),
``segment_return``/``opponent_return`` (true), ``episode_return`` (the drivers' last 20).
:class:`Config` also holds the fields of the SPO update (``update=spo``, the NLHF route's
default: :mod:`nlhf.control.spo`, PPO's fields with a critic).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from nlhf.config import ConfigError, option
from nlhf.control.envs import segment_length
from nlhf.control.policy import ActingPolicy
from nlhf.control.ppo import PPOFields
from nlhf.control.rollout import ControlRollout, Runner, check_env_fits
from nlhf.control.segments import SegmentBatch
from nlhf.control.trainer import ControlFields, ReturnWindow, build_trainer, finite
from nlhf.losses import (
    leave_one_out_win_rates,
    masked_mean,
    nash_md_pg_weights,
    ppo_policy_loss,
)
from nlhf.models.mixture import mixture_logits
from nlhf.train.core import Algorithm, Trainer

Prefer = Callable[[SegmentBatch, SegmentBatch], torch.Tensor]
"""prefer(a, b) → [B] P(σ_a ≻ σ_b) for B pairs of segments."""


Update = Literal["spo", "nash-md-pg"]


@dataclass
class Config(PPOFields, ControlFields):
    """Nash-MD (Munos et al. 2023) on an acting policy: the SPO update (a critic and GAE, the
    fields shared with PPO) or Nash-MD-PG from saved game states (states, samples, baseline)."""

    out: str = option("runs/control-nash", "output folder: metrics.jsonl, checkpoints/, policy/")
    update: Update = option(
        "nash-md-pg",
        "spo: π's segments score their win rate against the opponent's segments as a reward "
        "at their end, −τ·log(π/μ) each step, PPO with a critic and GAE over the episode "
        "(nlhf.control.spo; Swamy et al. 2024 with β = 0); nash-md-pg: paired continuations "
        "from saved states, the paper's policy gradient, no critic",
    )
    lr: float = option(
        1e-3, "Adam learning rate (chosen on CartPole; one step per pass, not PPO's 16)"
    )
    grad_clip: float = option(0.5, "clip the gradient norm (as PPO's CleanRL max_grad_norm)")
    checkpoint_every: int = option(50, "save a resumable checkpoint every this many steps")
    states: int = option(8, "start states per step, each a group of game copies")
    samples: int = option(2, "continuations of π per start state (the driver's own included)")
    opponents: int = option(2, "continuations of the opponent π_β per start state")
    length: int = option(
        0, "steps per continuation (0: 25 for Atari and MinAtar as Christiano et al., else 50)"
    )
    beta: float = option(
        0.125,
        "mixture weight of μ in the opponent π_β ∝ π^(1−β)·μ^β (the paper's best β; 0: self-"
        "play, every copy plays π and scores its in-group win rate)",
    )
    tau: float = option(
        0.001,
        "KL(π‖μ) regularization τ (the NLHF paper's τ; its LM task used 0.008; here the KL of a "
        "whole segment weighs each step, so a smaller one)",
    )
    baseline: Literal["leave_one_out", "half"] = option(
        "leave_one_out",
        "subtracted from P̄: leave_one_out = the mean P̄ of the state's other π continuations "
        "(nash-md-pg; needs samples ≥ 2) or of the rollout's other π segments (spo), half = ½ "
        "as in the paper",
    )
    epochs: int = option(
        4, "PPO-clipped passes over each step's data (nash-md-pg: 1 is the plain PG step)"
    )
    clip: float = option(0.2, "clip ε of the probability ratio in passes after the first")

    def check(self) -> None:
        self.at_least(1, "states", "samples", "epochs")
        self.at_least(0, "length", "opponents")
        if not 0.0 <= self.beta <= 1.0:
            raise ConfigError(f"beta must be in [0, 1], got {self.beta}")
        if self.beta > 0 and self.opponents < 1:
            raise ConfigError("opponents must be ≥ 1 when beta > 0")
        if self.tau < 0 or self.clip <= 0:
            raise ConfigError(f"tau must be ≥ 0 and clip > 0, got {self.tau}, {self.clip}")
        if self.update == "spo":
            if self.n_steps < self.segment_length():
                raise ConfigError(
                    f"update=spo: n_steps ({self.n_steps}) must be ≥ the segment length "
                    f"({self.segment_length()}), so that every copy ends a segment per rollout"
                )
            return
        if self.samples + self.opponents < 2:
            raise ConfigError("samples + opponents must be ≥ 2 (something to compare)")
        if self.beta > 0 and self.baseline == "leave_one_out" and self.samples < 2:
            raise ConfigError("baseline=leave_one_out needs samples ≥ 2 (or baseline=half)")

    def segment_length(self) -> int:
        return segment_length(self.env, self.length)


@dataclass
class Continuations(SegmentBatch):
    """B segments of ``L`` steps that may end early: after its episode's last step a segment
    repeats the observation that episode ended in, with action 0 and reward 0."""

    rewards: torch.Tensor  # [B, L] float32 true rewards (for an oracle; 0 after the end)
    mask: torch.Tensor  # [B, L] bool: the step is part of the segment

    def __getitem__(self, index) -> Continuations:
        return Continuations(
            self.obs[index], self.actions[index], self.rewards[index], self.mask[index]
        )

    def to(self, device: torch.device | str) -> Continuations:
        return Continuations(
            self.obs.to(device), self.actions.to(device), self.rewards.to(device),
            self.mask.to(device),
        )  # fmt: skip


def return_preference(a: SegmentBatch, b: SegmentBatch) -> torch.Tensor:
    """σ(R_a − R_b) of the segments' true returns (a synthetic labeler for tests and demos)."""
    if not (isinstance(a, Continuations) and isinstance(b, Continuations)):
        raise TypeError("return_preference needs Continuations (segments with their rewards)")
    return torch.sigmoid(a.rewards.sum(-1) - b.rewards.sum(-1))


def segments_of(rollout: ControlRollout, copies: list[int]) -> Continuations:
    """The continuation of each copy in ``copies``, cut at the end of its episode."""
    dones = rollout.dones[:, copies].T  # [B, L]
    ended_before = torch.cumsum(dones.long(), 1) - dones.long()
    mask = ended_before == 0
    obs = rollout.obs[:, copies].transpose(0, 1).clone()
    actions = rollout.actions[:, copies].T.clone()
    rewards = rollout.rewards[:, copies].T.clone()
    for row, i in enumerate(copies):
        ends = torch.nonzero(dones[row]).flatten()
        if len(ends):
            t = int(ends[0])
            obs[row, t + 1 :] = rollout.final_obs[(t, i)]
            actions[row, t + 1 :] = 0
            rewards[row, t + 1 :] = 0.0
    return Continuations(obs=obs, actions=actions, rewards=rewards, mask=mask)


def advantages_of(p: torch.Tensor, baseline: str) -> torch.Tensor:
    """[G, K] mean preferences of K π continuations of G states → advantages."""
    if baseline == "half" or p.shape[1] < 2:
        return p - 0.5
    k = p.shape[1]
    return p - (p.sum(1, keepdim=True) - p) / (k - 1)


@dataclass
class Segments:
    """The π continuations one step trains on, with their per-step weights."""

    obs: torch.Tensor  # [B, L, obs_dim]
    actions: torch.Tensor  # [B, L]
    logprobs: torch.Tensor  # [B, L] log π at the rollout
    weights: torch.Tensor  # [B, L]
    mask: torch.Tensor  # [B, L]
    weight: float = 1.0


class ControlNashMDPG(Algorithm):
    """``update`` = branch, continue, weigh, then the policy-gradient passes."""

    config: Config
    last_rollout: ControlRollout | None = None
    """The rollout of the last ``update`` (what a route labels segments of)."""

    def __init__(self, trainer: Trainer, config: Config, prefer: Prefer) -> None:
        super().__init__(trainer, config)
        self.policy: ActingPolicy = trainer.policy.model
        self.reference = copy.deepcopy(self.policy).requires_grad_(False)  # μ
        self.prefer = prefer
        self.group = config.samples + config.opponents
        self.runner = Runner(
            config.env,
            config.states * self.group,
            config.seed,
            sticky=config.sticky,
            features=config.features,
        )
        check_env_fits(self.policy, self.runner)
        self.window = ReturnWindow()

    # ------------------------------------------------------------------ layout
    def copies(self, role: str) -> list[int]:
        """The copies of every group that are ``driver``s, ``learner``s (π, trained on) or
        ``opponent``s (π_β; none with β = 0, where every copy is a learner)."""
        cfg, g = self.config, self.group
        if role == "driver":
            return [s * g for s in range(cfg.states)]
        k = g if cfg.beta == 0 else cfg.samples
        members = range(k) if role == "learner" else range(k, g)
        return [s * g + j for s in range(cfg.states) for j in members]

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """π's logits on the learners' copies, the mixture's on the opponents'."""
        logits = self.policy.logits(obs)
        opponents = self.copies("opponent")
        if opponents:
            mixed = mixture_logits(
                logits[opponents], self.reference.logits(obs[opponents]), self.config.beta
            )
            logits = logits.clone()
            logits[opponents] = mixed
        return logits, torch.zeros(len(obs))

    # ------------------------------------------------------------------ 1.–3.
    def branch(self) -> None:
        """1. Copy every driver's state onto the other copies of its group."""
        for driver in self.copies("driver"):
            snap = self.runner.snapshot(driver)
            for i in range(driver + 1, driver + self.group):
                self.runner.restore(i, snap)

    def play(self) -> ControlRollout:
        """1.–2. Branch, then ``length`` steps of every copy (π or the opponent π_β)."""
        self.branch()
        return self.runner.collect(self.act, self.config.segment_length(), self.policy.device)

    def preferences(
        self, mine: Continuations, theirs: Continuations
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """3. [states, k] mean P of each π continuation against its state's others (β = 0,
        every ordered pair within the group: the leave-one-out win rate) or against its
        state's opponents, and their advantages."""
        states = self.config.states
        k = len(mine) // states
        if self.config.beta == 0:
            a, b = np.meshgrid(range(k), range(k), indexing="ij")
            off = a != b
            rows = [s * k + i for s in range(states) for i in a[off]]
            cols = [s * k + j for s in range(states) for j in b[off]]
            p = self._prefer(mine[torch.tensor(rows)], mine[torch.tensor(cols)])
            full = torch.full((states, k, k), 0.5)
            full[:, torch.as_tensor(a[off]), torch.as_tensor(b[off])] = p.reshape(states, -1)
            win = leave_one_out_win_rates(full)
            return win, win - 0.5
        m = len(theirs) // states
        rows = [s * k + i for s in range(states) for i in range(k) for _ in range(m)]
        cols = [s * m + j for s in range(states) for _ in range(k) for j in range(m)]
        p = self._prefer(mine[torch.tensor(rows)], theirs[torch.tensor(cols)])
        mean_p = p.reshape(states, k, m).mean(-1)
        return mean_p, advantages_of(mean_p, self.config.baseline)

    @torch.no_grad()
    def weigh(self, rollout: ControlRollout) -> tuple[Segments, dict[str, float]]:
        """3. Preferences, advantages and per-step weights of the learners' continuations."""
        learners, opponents = self.copies("learner"), self.copies("opponent")
        mine = segments_of(rollout, learners)
        theirs = segments_of(rollout, opponents) if opponents else mine
        mean_p, advantages = self.preferences(mine, theirs)
        device = self.policy.device
        obs, actions, mask = mine.obs.to(device), mine.actions.to(device), mine.mask.to(device)
        logprobs = rollout.logprobs[:, learners].T.to(device)
        ref_logprobs, _ = self.reference.evaluate(obs, actions)
        weights = nash_md_pg_weights(
            advantages.reshape(-1).to(device), logprobs, ref_logprobs, mask, self.config.tau
        )
        metrics = {
            "win_rate": float(mean_p.mean()),
            "kl": float(((logprobs - ref_logprobs) * mask).sum(-1).mean()),
            "segment_return": float(mine.rewards.sum(-1).mean()),
            "opponent_return": float(theirs.rewards.sum(-1).mean()),
            "segment_length": float(mask.sum(-1).float().mean()),
            "advantage_std": float(advantages.std()) if advantages.numel() > 1 else 0.0,
        }
        return Segments(obs, actions, logprobs, weights, mask), metrics

    def _prefer(self, a: Continuations, b: Continuations) -> torch.Tensor:
        p = torch.as_tensor(self.prefer(a, b), dtype=torch.float32).cpu()
        if p.shape != (len(a),):
            raise ValueError(f"prefer returned shape {tuple(p.shape)} for {len(a)} pairs")
        return p

    # ------------------------------------------------------------------ 4.
    def loss(self, batch: Segments, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """The clipped surrogate of the per-step weights (its gradient at the rollout's
        policy is −mean_t weight_t·∇log π(a_t | s_t) over the segments' steps)."""
        logprobs, entropy = self.policy.evaluate(batch.obs, batch.actions)
        loss, stats = ppo_policy_loss(
            logprobs, batch.logprobs, batch.weights, batch.mask, self.config.clip
        )
        entropy = masked_mean(entropy, batch.mask)
        return loss, {
            "entropy": float(entropy.detach()),
            **{k: float(v) for k, v in stats.items()},
        }

    def update(self, chunks: list[Any], step: int) -> dict[str, float]:
        cfg = self.config
        t0 = time.perf_counter()
        rollout = self.last_rollout = self.play()
        drivers = set(self.copies("driver"))
        self.window.add([e for e in rollout.finished if e.env in drivers])
        batch, metrics = self.weigh(rollout)
        t1 = time.perf_counter()
        rows = [
            self.trainer.gradient_step(lambda b: self.loss(b, step), [batch])
            for _ in range(cfg.epochs)
        ]
        t2 = time.perf_counter()
        played = rollout.actions.numel()
        metrics.update({k: float(np.mean([r[k] for r in rows])) for k in rows[0]})
        metrics.update(
            **self.window.metrics(),
            agent_steps=float((step + 1) * played),
            rollout_seconds=t1 - t0,
            update_seconds=t2 - t1,
            steps_per_second=played / (t2 - t0),
        )
        self.finished = self.window.reached(cfg.target_return)
        return finite(metrics)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "runner": self.runner.state_dict(),
            "window": self.window.state_dict(),
            "reference": {k: v.clone() for k, v in self.reference.state_dict().items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.runner.load_state_dict(state["runner"])
        self.window.load_state_dict(state["window"])
        self.reference.load_state_dict(state["reference"])


def train(
    config: Config, prefer: Prefer, policy: ActingPolicy | None = None
) -> tuple[ControlNashMDPG, dict[str, float]]:
    """Train to ``config.steps`` (resuming from ``<out>/checkpoints``) against ``prefer``; the
    policy is saved to ``<out>/policy`` (the critic untouched: Nash-MD-PG needs no values)."""
    trainer = build_trainer(config, policy, critic=False)
    algorithm = ControlNashMDPG(trainer, config, prefer)
    last = trainer.run(algorithm, "control-nash")
    algorithm.runner.close()
    return algorithm, last
