"""The two preference routes end to end: labels on a schedule, a judge refitted on them, a policy.

    algorithm, last = train(RLHFConfig(env="CartPole-v1", labeler="oracle"))   # r̂ + PPO
    algorithm, last = train(NLHFConfig(env="CartPole-v1", labeler="noisy"))    # P̂ + Nash-MD-PG

A route holds an acting-policy algorithm and a :class:`~nlhf.control.labelling.Labelling`;
both run on the one training core.  Each core step is the algorithm's own update, then the
labelling's step on the segments of the algorithm's ``last_rollout`` (labels when they are
due, then a warm-started refit of the route's judge):

- RLHF (:class:`~nlhf.control.ppo.ControlPPO`): windows of ``segment`` steps every ``stride``
  steps of each copy; the judge is a Bradley–Terry reward model, normalized to std
  ``reward_std`` on the rollout and shifted so that an end state scores 0, and PPO's r̂;
- NLHF: the judge is an antisymmetric preference model; ``update=nash-md-pg``
  (:class:`~nlhf.control.nash.ControlNashMDPG`, the default) labels each paired continuation
  as one segment and weighs it by its preferences, with no critic; ``update=spo``
  (:class:`~nlhf.control.spo.ControlSPO`) labels windows as RLHF does and scores each segment
  of π's streams by its win rate, a reward for PPO with a critic.

Before the first step the initial labels come from the initial policy's play.  Each step
also logs ``kl_per_step``, KL(π‖μ) over the actions averaged over the rollout's states (μ:
NLHF's reference, RLHF's initial policy), so a collapse shows beside ``entropy``.  The checkpoint
holds the algorithm's state, the labelling's (buffer, judge, generator, counters) and RLHF's
normalized reward, so a resumed run labels and trains exactly as an uninterrupted one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from nlhf.config import option
from nlhf.control import nash, ppo, spo
from nlhf.control.envs import check_restorable
from nlhf.control.labelling import LabelFields, Labelling, initial_rollouts, max_steps
from nlhf.control.preference_model import SegmentPreferenceModel
from nlhf.control.reward_model import SegmentRewardModel
from nlhf.control.rollout import ControlRollout
from nlhf.control.trainer import build_trainer, finite
from nlhf.train.core import Algorithm, Trainer


@dataclass
class RLHFConfig(LabelFields, ppo.Config):
    """RLHF on an acting policy: a Bradley–Terry reward model from segment labels, PPO on r̂."""

    out: str = option("runs/control-rlhf", "output folder: metrics.jsonl, checkpoints/, policy/")
    steps: int = option(300, "rollouts, one PPO update each (CartPole in minutes)")
    reward_norm: Literal["standard", "scale", "none"] = option(
        "none",
        "PPO's running normalization of r̂ on top of the route's own (none: r̂ as the route "
        "normalized it, an end state at 0, so that staying alive is worth what r̂ says)",
    )


@dataclass
class NLHFConfig(LabelFields, nash.Config):
    """NLHF on an acting policy: an antisymmetric preference model from segment labels judges
    the segments of the SPO update (or Nash-MD-PG's paired continuations)."""

    out: str = option("runs/control-nlhf", "output folder: metrics.jsonl, checkpoints/, policy/")
    update: nash.Update = option(
        "nash-md-pg",
        "nash-md-pg: paired continuations from saved states, the paper's policy gradient, no "
        "critic; spo: π's segments score their win rate against the opponent's segments as a "
        "reward at their end, −τ·log(π/μ) each step, PPO with a critic and GAE over the episode "
        "(nlhf.control.spo; Swamy et al. 2024; measured with lr=2.5e-4 schedule=linear beta=0)",
    )
    steps: int = option(250, "core steps, one rollout (or set of continuations) each")


def new_judge(model_class: type, trainer: Trainer, config: Any) -> Any:
    """The route's judge, shaped for the trainer's policy, initialized from ``seed + 1``."""
    policy = trainer.policy.model
    torch.manual_seed(config.seed + 1)
    actions = config.judge_action_count(policy.n_actions)
    return model_class(policy.obs_dim, actions, config.judge_hidden, config.members)


class Route(Algorithm):
    """An acting-policy ``algorithm`` whose judge is refitted whenever labels arrive."""

    def __init__(self, trainer: Trainer, config: Any, algorithm: Any, judge: Any, horizon: float):
        super().__init__(trainer, config)
        self.algorithm, self.policy = algorithm, algorithm.policy
        self.labelling = Labelling(config, judge, horizon, max_steps(algorithm.runner))
        mu = getattr(algorithm, "reference", None)  # NLHF's μ; RLHF's is its initial policy
        self.reference = copy.deepcopy(self.policy).requires_grad_(False) if mu is None else mu

    def label(self, rollouts: list[ControlRollout], agent_steps: float) -> None:
        raise NotImplementedError

    def before_training(self) -> None:
        if not self.labelling.started:  # a fresh run: the initial labels and the first fit
            self.label(initial_rollouts(self.algorithm.play, self.config.initial_play), 0.0)

    def update(self, chunks: list[Any], step: int) -> dict[str, float]:
        metrics = self.algorithm.update(chunks, step)
        self.finished = self.algorithm.finished
        self.label([self.algorithm.last_rollout], metrics["agent_steps"])
        metrics["kl_per_step"] = self.kl_per_step(self.algorithm.last_rollout.obs)
        return finite({**metrics, **self.labelling.metrics()})

    @torch.no_grad()
    def kl_per_step(self, obs: torch.Tensor) -> float:
        """KL(π‖μ) over the actions, the mean over the states ``obs`` [..., obs_dim]."""
        obs = obs.reshape(-1, obs.shape[-1]).to(self.policy.device)
        log_pi = torch.log_softmax(self.policy.logits(obs), -1)
        log_mu = torch.log_softmax(self.reference.logits(obs), -1)
        return float((log_pi.exp() * (log_pi - log_mu)).sum(-1).mean())

    def state_dict(self) -> dict[str, Any]:
        return {**self.algorithm.state_dict(), "labelling": self.labelling.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.algorithm.load_state_dict(state)
        self.labelling.load_state_dict(state["labelling"])


class RLHF(Route):
    """PPO on the normalized r̂ of a reward model refitted whenever labels arrive."""

    config: RLHFConfig

    def __init__(self, trainer: Trainer, config: RLHFConfig) -> None:
        judge = new_judge(SegmentRewardModel, trainer, config)
        self.reward = copy.deepcopy(judge)  # replaced by the normalized fit before step 1
        algorithm = ppo.ControlPPO(trainer, config, reward_fn=self.learned_reward)
        horizon = config.steps * config.n_envs * config.n_steps
        super().__init__(trainer, config, algorithm, judge, horizon)

    def learned_reward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.reward.step_rewards(obs, actions)

    def label(self, rollouts: list[ControlRollout], agent_steps: float) -> None:
        length, stride = self.config.label_length(), self.config.stride
        if self.labelling.offer(rollouts, agent_steps, length, stride):
            self.reward = self.normalized(rollouts[-1])

    @torch.no_grad()
    def normalized(self, rollout: ControlRollout) -> SegmentRewardModel:
        """The reward model with std ``reward_std`` over the rollout's steps and the mean r̂ of
        the end states seen (action 0, as a segment goes on after its end) at 0; without any
        end state the mean over the rollout is 0."""
        obs = rollout.obs.reshape(-1, rollout.obs.shape[-1])
        actions = rollout.actions.reshape(-1)
        out = self.labelling.judge.normalized(obs, actions, self.config.reward_std)
        if self.labelling.ends:
            ends = torch.as_tensor(np.stack(list(self.labelling.ends)), dtype=torch.float32)
            zero = torch.zeros(len(ends), dtype=torch.long)
            for m in range(len(out.members)):
                out.shift[m] = out.member_step_rewards(m, ends, zero).mean()
        return out

    def state_dict(self) -> dict[str, Any]:
        reward = {k: v.clone() for k, v in self.reward.state_dict().items()}
        return {**super().state_dict(), "reward": reward}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.reward.load_state_dict(state["reward"])


class NLHF(Route):
    """Nash-MD-PG whose ``prefer`` is a preference model refitted whenever labels arrive."""

    config: NLHFConfig

    def __init__(self, trainer: Trainer, config: NLHFConfig) -> None:
        judge = new_judge(SegmentPreferenceModel, trainer, config)
        if config.update == "spo":
            algorithm: Any = spo.ControlSPO(trainer, config, prefer=judge.prob_matrix)
            horizon = config.steps * algorithm.runner.n * config.n_steps
        else:
            check_restorable(config.env, config.sticky, config.features)  # continuations need it
            algorithm = nash.ControlNashMDPG(trainer, config, prefer=judge.prob)
            group = config.samples + config.opponents
            horizon = config.steps * config.states * group * config.segment_length()
        super().__init__(trainer, config, algorithm, judge, horizon)

    def label(self, rollouts: list[ControlRollout], agent_steps: float) -> None:
        if self.config.update == "spo":  # windows of the streams, as the RLHF route's
            length, stride = self.config.label_length(), self.config.stride
            self.labelling.offer(rollouts, agent_steps, length, stride)
        else:  # each continuation is one segment
            self.labelling.offer(rollouts, agent_steps)


def build(config: RLHFConfig | NLHFConfig, policy: Any = None) -> tuple[Trainer, Route]:
    """(trainer, route) of the route ``config`` belongs to."""
    rlhf = isinstance(config, RLHFConfig)
    route_class, critic = (RLHF, True) if rlhf else (NLHF, config.update == "spo")
    trainer = build_trainer(config, policy, critic=critic)
    return trainer, route_class(trainer, config)


def train(config: RLHFConfig | NLHFConfig, policy: Any = None) -> tuple[Route, dict[str, float]]:
    """Train the route to ``config.steps`` (resuming from ``<out>/checkpoints``); the policy is
    saved to ``<out>/policy``.  Returns the route and the last step's metrics."""
    trainer, route = build(config, policy)
    name = "control-rlhf" if isinstance(config, RLHFConfig) else "control-nlhf"
    last = trainer.run(route, name)
    route.algorithm.runner.close()
    return route, last
