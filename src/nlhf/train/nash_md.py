"""``nlhf train nash-md``: Nash-MD-PG, the NLHF paper's policy gradient for language models.

    nlhf train nash-md                                  # SmolLM2 + LoRA, IMDB prompts, VADER judge
    nlhf train nash-md --judge runs/pm/model tau=0.008 beta=0.125 steps=300
    nlhf train nash-md --config configs/nash-md.yaml

Each step, for every prompt x: y ~ π_θ and y′ ~ π_β (token-level geometric mixture
π_θ^{1−β}·μ^β, π_θ held fixed) come out of one KV-cached decode loop, together with the
log-probs of y under π_θ and μ; the judge gives P(y ≻ y′ | x); the loss is
:func:`nlhf.losses.nash_md_pg_loss`, whose gradient estimates −∇[P(π_θ ≻ π_β) − τ·KL(π_θ‖μ)]
(each token's score weighted by P − ½ and by the KL of the remaining suffix).  One gradient
forward over prompt + y is the only other model call.

Parameters and their names elsewhere: ``tau`` is the paper's τ (TRL's NashMDConfig calls it
``beta``); ``beta`` is the paper's mixture coefficient β (TRL: ``mixture_coef``): β = 0 plays
against the current policy (self-play), β = 1 against the reference (best response to μ);
the paper's best value was β = 0.125.

Logged metrics (metrics.jsonl, TensorBoard): ``loss``; ``win_rate`` = mean P(y ≻ y′), the
policy against its mixture; ``kl`` = mean Σ_t log π/μ of y (a sample estimate of KL(π‖μ));
``length`` and ``mixture_length`` (tokens, EOS included); ``grad_norm``; ``lr``;
``step_seconds``, ``sample_seconds``, ``judge_seconds``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from nlhf.config import option
from nlhf.losses import nash_md_pg_loss
from nlhf.train.online import (
    OnlineConfig,
    PromptBatch,
    Trainer,
    decode,
    row_generators,
    train_and_report,
)


@dataclass
class Config(OnlineConfig):
    """Nash-MD-PG: policy gradient towards the Nash equilibrium of the τ-regularized
    preference game, against the geometric mixture of the policy and the reference."""

    out: str = option("runs/nash-md", "output folder: metrics.jsonl, checkpoints/, policy/")
    tau: float = option(0.05, "KL regularization τ (the paper's τ; TRL NashMDConfig.beta)")
    beta: float = option(
        0.125, "mixture coefficient β of the opponent π^{1−β}μ^β (0: self-play, 1: vs μ)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tau < 0:
            raise ValueError(f"tau must be ≥ 0, got {self.tau}")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {self.beta}")


class NashMDPG:
    """The algorithm: its ``loss`` is one rollout, one judgement and the surrogate loss."""

    def __init__(self, trainer: Trainer, config: Config) -> None:
        self.trainer = trainer
        self.config = config

    def loss(self, batch: PromptBatch, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        from nlhf.models import sample_pair

        cfg, policy = self.config, self.trainer.policy
        t0 = time.perf_counter()
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
        t1 = time.perf_counter()
        tok = policy.tokenizer
        preference = self.trainer.judge(
            batch.texts, decode(tok, y.tokens, y.mask), decode(tok, y_mix.tokens, y_mix.mask)
        ).to(policy.device)
        t2 = time.perf_counter()
        logprobs = policy.logprobs(batch.ids, batch.mask, y.tokens, y.mask)
        loss = nash_md_pg_loss(logprobs, y.ref_logprobs, y.mask.bool(), preference, cfg.tau)
        kl = (y.policy_logprobs - y.ref_logprobs).sum(-1)
        return loss, {
            "win_rate": float(preference.mean()),
            "kl": float(kl.mean()),
            "length": float(y.lengths.float().mean()),
            "mixture_length": float(y_mix.lengths.float().mean()),
            "sample_seconds": t1 - t0,
            "judge_seconds": t2 - t1,
        }

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def run(config: Config) -> int:
    return train_and_report(config, NashMDPG, "nash-md")
