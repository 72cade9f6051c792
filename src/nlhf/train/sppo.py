"""``nlhf train sppo``: Self-Play Preference Optimization (Wu et al. 2024).

    nlhf train sppo                                      # SmolLM2 + LoRA, IMDB prompts, VADER
    nlhf train sppo --judge runs/pm/model samples=5 eta=1.0 steps=300
    nlhf train sppo iteration_steps=16 iteration_epochs=2    # batched-iterative, as published

Each step (fully online; batched-iterative: :mod:`nlhf.train.iterative`), for every prompt x:

1. K completions y_1 … y_K ~ π_t (the policy at the start of the step) from one KV-cached
   decode loop, with their log π_t;
2. the judge compares every pair (K(K−1)/2 calls per prompt) and P̂(y_i ≻ π_t) is the
   leave-one-out mean of y_i's preferences over the others, unbiased for P(y_i ≻ π_t)
   (the released pipeline instead averages σ(s_i − s_j) of per-candidate scores, itself
   included, which shrinks P̂ towards ½);
3. :func:`nlhf.losses.sppo_loss`, (log π_θ/π_t(y_i) − η(P̂_i − ½))², from one gradient
   forward that runs each prompt once for its K completions.

SPPO has no KL to the reference: π_t is its anchor.  Parameters and metrics: docs/trainers.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from nlhf.config import option
from nlhf.losses import leave_one_out_win_rates, sppo_loss
from nlhf.train.core import NonFiniteError
from nlhf.train.groups import pairwise_matrix, sample_group
from nlhf.train.iterative import IterationFields, IterativeAlgorithm, Prepared
from nlhf.train.online import OnlineConfig, PromptBatch, train_and_report


@dataclass
class Config(OnlineConfig, IterationFields):
    """SPPO: K samples per prompt, leave-one-out win rates from pairwise judgements, and a
    square-loss step of log π/π_t towards η·(P̂ − ½)."""

    out: str = option("runs/sppo", "output folder: metrics.jsonl, checkpoints/, policy/")
    samples: int = option(4, "K: completions per prompt, all pairs judged (the paper: 5)")
    eta: float = option(
        1.0,
        "η of π_{t+1} ∝ π_t·exp(η·P(y ≻ π_t)) (the paper: 1000, i.e. β = 1e-3, with lr 5e-7 "
        "over three data iterations; an online step needs a smaller one)",
    )

    def check(self) -> None:
        self.at_least(2, "samples")
        if self.eta <= 0:
            raise ValueError(f"eta must be > 0, got {self.eta}")


class SPPO(IterativeAlgorithm):
    """The algorithm: K samples, all-pairs judgements, leave-one-out P̂, the square loss."""

    config: Config

    def prepare(self, batch: PromptBatch, step: int) -> dict[str, Any]:
        cfg, policy = self.config, self.trainer.policy
        t0 = time.perf_counter()
        # 1. K completions per prompt from one decode loop, with log π_t and log μ
        # (fully online, μ's logits stay for this step's exact KL; the prepared batches of an
        # iteration keep none)
        online = not cfg.iteration_steps
        group = sample_group(policy, cfg, batch, step, cfg.samples, keep_logits=online)
        t1 = time.perf_counter()
        # 2. all pairs judged, leave-one-out win rates (sample-major like the rows)
        matrix = pairwise_matrix(self.trainer.judge, list(batch.texts), group.texts, cfg.samples)
        win = leave_one_out_win_rates(matrix).T.reshape(-1).to(policy.device)
        return {"group": group, "win": win, "seconds": (t1 - t0, time.perf_counter() - t1)}

    def objective(self, prepared: Prepared) -> tuple[torch.Tensor, dict[str, float]]:
        cfg, policy, batch = self.config, self.trainer.policy, prepared.batch
        n, k = len(batch.rows), cfg.samples
        group = prepared.data["group"]
        out, ref_tokens, win = group.out, group.ref_tokens, prepared.data["win"]
        t2 = time.perf_counter()
        # 3. the square loss on one gradient forward
        # forwards every process runs, before a non-finite judgement stops the step: the
        # gradient forward takes the exact KL of its logits against μ's
        ref_logits = group.take_ref_logits(policy, batch)
        tokens, kl = policy.logprobs_and_kl(batch.ids, batch.mask, out.tokens, out.mask, ref_logits)
        del ref_logits
        logps = tokens.sum(-1)
        if not torch.isfinite(win).all():  # after the forward every process runs
            raise NonFiniteError("judge preference")
        anchor = out.policy_logprobs.sum(-1)  # log π_t of the samples
        loss = sppo_loss(logps, anchor, win, cfg.eta)
        t3 = time.perf_counter()
        with torch.no_grad():
            sampled = (out.policy_logprobs - ref_tokens).sum(-1)
            best = win.reshape(k, n).argmax(0)
            lengths = out.lengths.float().reshape(k, n)
            by_prompt = win.reshape(k, n)
        sample_seconds, judge_seconds = prepared.data["seconds"]
        return loss, {
            "win_rate_spread": float((by_prompt.max(0).values - by_prompt.min(0).values).mean()),
            "target": float((cfg.eta * (win - 0.5)).abs().mean()),
            "kl": float(kl.mean()),
            "kl_sampled": float(sampled.mean()),
            "length": float(lengths.mean()),
            "length_best": float(lengths.gather(0, best[None]).mean()),
            "sample_seconds": sample_seconds,
            "judge_seconds": judge_seconds,
            "forward_seconds": t3 - t2,
        }


def run(config: Config) -> int:
    return train_and_report(config, SPPO, "sppo")
