"""``nlhf train nash-md``: Nash-MD-PG, the NLHF paper's policy gradient for language models.

    nlhf train nash-md                                  # SmolLM2 + LoRA, IMDB prompts, VADER judge
    nlhf train nash-md --judge runs/pm/model tau=0.008 beta=0.125 steps=300
    nlhf train nash-md --config configs/nash-md.yaml

Each step, for every prompt x (Munos et al. 2023, section 7):

1. y ~ π_θ and y′ ~ π_β = π_θ^{1−β}·μ^β (token-level geometric mixture, π_θ held fixed) from
   one KV-cached decode loop, with the log-probs of y under π_θ and μ;
2. the judge gives P(y ≻ y′ | x);
3. the loss :func:`nlhf.losses.nash_md_pg_loss` (each token's score weighted by P − ½ and by
   the KL of the remaining suffix), from one gradient forward over prompt + y.

``nlhf train mpo`` is the same trainer as Magnetic Preference Optimization (Wang et al. 2024):
β = 0 (the opponent is the policy itself: magnetic mirror descent with τ on the KL to the
magnet μ) and ``magnet_every`` resets μ to the current policy, so the iterates approach the
equilibrium of the unregularized game.

Parameters, their names in the paper and TRL, and the logged metrics: ``docs/trainers.md``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from nlhf.config import option
from nlhf.models import sample_pair
from nlhf.models.sampling import row_generators
from nlhf.train.core import Algorithm
from nlhf.train.nash_pg import preference_pg_loss
from nlhf.train.online import OnlineConfig, PromptBatch, train_and_report


@dataclass
class Config(OnlineConfig):
    """Nash-MD-PG: policy gradient towards the Nash equilibrium of the τ-regularized
    preference game, against the geometric mixture of the policy and the reference."""

    name: ClassVar[str] = "nash-md"
    out: str = option("runs/nash-md", "output folder: metrics.jsonl, checkpoints/, policy/")
    tau: float = option(
        0.05,
        "KL regularization τ (the paper's τ; TRL NashMDConfig.beta); the paper used 0.008, "
        "0.05 keeps short CPU runs near the reference",
    )
    beta: float = option(
        0.125, "mixture coefficient β of the opponent π^{1−β}μ^β (0: self-play, 1: vs μ)"
    )
    exact_kl: bool = option(
        False,
        "KL term from the exact per-position KL over the vocabulary (its own gradient, not "
        "the sampled tokens' scores): every token, sampled or not, is pulled towards μ; one "
        "more reference forward per step",
    )

    def check(self) -> None:
        self.at_least(0, "tau")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {self.beta}")


@dataclass
class MpoConfig(Config):
    """MPO: magnetic mirror descent against the policy itself (β = 0), τ on the KL to the
    magnet μ, and the magnet reset to the current policy every ``magnet_every`` steps."""

    name: ClassVar[str] = "mpo"
    out: str = option("runs/mpo", "output folder: metrics.jsonl, checkpoints/, policy/")
    beta: float = option(0.0, "mixture coefficient β of the opponent (MPO: 0, the policy itself)")
    magnet_every: int = option(
        25,
        "steps between magnet resets (μ ← the current policy); MPO resets once per "
        "iteration of its outer loop",
    )


class NashMDPG(Algorithm):
    """The algorithm: its ``loss`` is one rollout, one judgement and the surrogate loss."""

    config: Config

    def loss(self, batch: PromptBatch, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        cfg, policy = self.config, self.trainer.policy
        t0 = time.perf_counter()
        # 1. y ~ π_θ and y′ ~ the mixture, from one decode loop
        y, y_mix = sample_pair(
            policy,
            batch.ids,
            batch.mask,
            cfg.max_new_tokens,
            reference=policy.reference,
            beta=cfg.beta,
            temperature=cfg.temperature,
            generator=row_generators(cfg.seed, step, batch.rows),
        )
        sample_seconds = time.perf_counter() - t0
        # 2.-3. the judgement and the surrogate loss
        loss, metrics = preference_pg_loss(
            self.trainer, batch, y, y_mix, cfg.tau, exact_kl=cfg.exact_kl
        )
        metrics["mixture_length"] = metrics.pop("opponent_length")
        return loss, {**metrics, "sample_seconds": sample_seconds}


def run(config: Config) -> int:
    return train_and_report(config, NashMDPG, config.name)
