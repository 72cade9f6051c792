"""The policy-gradient step the Nash trainers share: judge y against y′, the surrogate loss.

    loss, metrics = preference_pg_loss(trainer, batch, y, y_opp, tau)

Given y ~ π_θ (with the sampler's log π, log μ and exact KL of every token) and an opponent's
y′, the judge gives P(y ≻ y′ | x) and the loss is :func:`nlhf.losses.nash_md_pg_loss`, whose
gradient estimates −∇[P(π_θ ≻ opponent) − τ·KL(π_θ‖μ)].  Nash-MD-PG plays the geometric mixture,
Nash-EMA the moving average of the weights, Nash-MP the last and the look-ahead iterates.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from nlhf.losses import nash_md_pg_loss, position_kl
from nlhf.models.text import decode_completions


def preference_pg_loss(
    trainer: Any,
    batch: Any,
    y: Any,
    opponent: Any,
    tau: float,
    ref_logprobs: torch.Tensor | None = None,
    exact_kl: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Judge y against y′; the Nash-MD-PG surrogate loss and its metrics.

    ``ref_logprobs`` (default ``y.ref_logprobs``) is what the KL term compares π_θ with; a
    caller that regularizes towards several policies passes their weighted log-prob mix.
    ``exact_kl`` takes the KL term to the reference over the whole vocabulary instead
    (:func:`nlhf.losses.nash_md_pg_loss` with ``kl``), at the cost of one reference forward.
    """
    policy = trainer.policy
    tok = policy.tokenizer
    t0 = time.perf_counter()
    preference = trainer.judge(
        batch.texts,
        decode_completions(tok, y.tokens, y.mask),
        decode_completions(tok, opponent.tokens, opponent.mask),
    ).to(policy.device)
    judge_seconds = time.perf_counter() - t0
    kl = y.exact_kl.sum(-1)  # the decode loop's, at the weights the gradient is taken at
    target = y.ref_logprobs if ref_logprobs is None else ref_logprobs
    if exact_kl:  # the KL term over the whole vocabulary at every position, with its gradient
        _, ref_logits = policy.reference_logprobs_and_logits(
            batch.ids, batch.mask, y.tokens, y.mask
        )
        logprobs, logits = policy.logprobs_and_logits(batch.ids, batch.mask, y.tokens, y.mask)
        terms = position_kl(logits, ref_logits)
        loss = nash_md_pg_loss(logprobs, target, y.mask.bool(), preference, tau, kl=terms)
    else:
        logprobs = policy.logprobs(batch.ids, batch.mask, y.tokens, y.mask)
        loss = nash_md_pg_loss(logprobs, target, y.mask.bool(), preference, tau)
    sampled = (y.policy_logprobs - y.ref_logprobs).sum(-1)
    return loss, {
        "win_rate": float(preference.mean()),
        "kl": float(kl.mean()),
        "kl_sampled": float(sampled.mean()),
        "length": float(y.lengths.float().mean()),
        "opponent_length": float(opponent.lengths.float().mean()),
        "judge_seconds": judge_seconds,
    }
