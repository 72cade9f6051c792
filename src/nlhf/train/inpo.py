"""``nlhf train inpo``: Iterative Nash Policy Optimization (Zhang et al. 2024).

    nlhf train inpo                                      # SmolLM2 + LoRA, IMDB prompts, VADER
    nlhf train inpo --judge runs/pm/model samples=8 eta=0.5 tau=0.1
    nlhf train inpo iteration_steps=16 iteration_epochs=2    # batched-iterative, as published

Each step (fully online; batched-iterative: :mod:`nlhf.train.iterative`), for every prompt x:

1. K completions ~ π_t (the policy at the start of the step) from one KV-cached decode loop,
   with log π_t and log π_ref;
2. a knockout tournament picks (y_w, y_l) with binary judgements only (for K = 8: 4 first
   matches, 3 among the winners, 3 among the losers, and the champion against the last,
   11 comparisons; the final decides which of the two is y_w);
3. :func:`nlhf.losses.inpo_loss`, (h − 1/(2η))² with h the margin of log π against the
   geometric mixture π_ref^{τ/η}·π_t^{1−τ/η}, from one gradient forward over the two.

``nlhf train onpo`` is the same trainer with ``step_rule=optimistic`` (ONPO, Zhang et al. 2025):
each step's samples and gradient come after a predictor step along the last step's gradient,
so the log-ratios are taken against that predicted policy π′_t.

Parameters and metrics: docs/trainers.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from nlhf.config import option
from nlhf.losses import inpo_loss
from nlhf.train.core import NonFiniteError, StepRule
from nlhf.train.groups import sample_group
from nlhf.train.iterative import IterationFields, IterativeAlgorithm, Prepared
from nlhf.train.online import OnlineConfig, PromptBatch, train_and_report


@dataclass
class Config(OnlineConfig, IterationFields):
    """INPO: K samples per prompt, a knockout tournament for (y_w, y_l), and IPO's square loss
    against the geometric mixture of the reference and the policy of the step."""

    name: ClassVar[str] = "inpo"
    out: str = option("runs/inpo", "output folder: metrics.jsonl, checkpoints/, policy/")
    samples: int = option(4, "K: completions per prompt, a power of 2 (the paper: 8)")
    eta: float = option(
        0.5, "η: target 1/(2η), KL(π‖π_t) weighs 1/η (the paper: 0.005 over 3 data iterations)"
    )
    tau: float = option(
        0.1, "τ ≤ η: KL(π‖π_ref) weight; the mixture weight of π_ref is τ/η (the paper: η/3)"
    )

    def check(self) -> None:
        if self.samples < 2 or self.samples & (self.samples - 1):
            raise ValueError(f"samples must be a power of 2, at least 2; got {self.samples}")
        if self.eta <= 0 or not 0 <= self.tau <= self.eta:
            raise ValueError(f"need eta > 0 and 0 ≤ tau ≤ eta, got eta={self.eta}, tau={self.tau}")


def knockout(judge, prompts: list[str], texts: list[str], k: int) -> tuple[torch.Tensor, ...]:
    """(winner, loser, P(winner ≻ loser), comparisons) per prompt: a knockout tournament of
    the K completions of each prompt (``texts`` sample-major), one judge call per round."""
    n = len(prompts)
    rows = torch.arange(n)

    def match(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:  # (n, m) indices
        m = first.shape[1]
        a = [texts[int(first[b, j]) * n + b] for j in range(m) for b in range(n)]
        c = [texts[int(second[b, j]) * n + b] for j in range(m) for b in range(n)]
        return judge(prompts * m, a, c).float().reshape(m, n).T

    order = torch.arange(k).repeat(n, 1)
    p = match(order[:, 0::2], order[:, 1::2])
    first_wins = p >= 0.5
    winners = torch.where(first_wins, order[:, 0::2], order[:, 1::2])
    losers = torch.where(first_wins, order[:, 1::2], order[:, 0::2])
    calls = k // 2
    while winners.shape[1] > 1:  # both brackets' rounds in one call
        both = torch.cat([winners, losers], 1)
        p = match(both[:, 0::2], both[:, 1::2])
        half = winners.shape[1] // 2
        first_wins = p >= 0.5
        keep_first = torch.cat([first_wins[:, :half], ~first_wins[:, half:]], 1)
        kept = torch.where(keep_first, both[:, 0::2], both[:, 1::2])
        winners, losers = kept[:, :half], kept[:, half:]
        calls += 2 * half
    if k > 2:  # the final: which of the champion and the last is y_w
        p = match(winners, losers)[:, 0]
        calls += 1
        swap = p < 0.5
        w = torch.where(swap, losers[:, 0], winners[:, 0])
        lose = torch.where(swap, winners[:, 0], losers[:, 0])
        p = torch.where(swap, 1.0 - p, p)
    else:
        w, lose, p = (
            winners[:, 0],
            losers[:, 0],
            torch.where(first_wins[:, 0], p[:, 0], 1 - p[:, 0]),
        )
    return w * n + rows, lose * n + rows, p, torch.tensor(calls)


@dataclass
class OnpoConfig(Config):
    """ONPO: INPO with optimism (optimistic mirror descent): each step's K samples, knockout
    and gradient are taken after a predictor step along the last step's gradient, then the
    step is taken from where the step began."""

    name: ClassVar[str] = "onpo"
    out: str = option("runs/onpo", "output folder: metrics.jsonl, checkpoints/, policy/")
    step_rule: StepRule = option(
        "optimistic",
        "the outer loop (ONPO: optimistic, a predictor step along the last step's gradient)",
    )


class INPO(IterativeAlgorithm):
    """The algorithm: K samples, a knockout tournament, the INPO square loss on the pair."""

    config: Config

    def prepare(self, batch: PromptBatch, step: int) -> dict[str, Any]:
        cfg, policy = self.config, self.trainer.policy
        t0 = time.perf_counter()
        # 1. K completions per prompt from one decode loop, with log π_t and log π_ref
        # (fully online, μ's logits stay for this step's exact KL; the prepared batches of an
        # iteration keep none)
        online = not cfg.iteration_steps
        group = sample_group(policy, cfg, batch, step, cfg.samples, keep_logits=online)
        t1 = time.perf_counter()
        # 2. the knockout tournament picks (y_w, y_l)
        picked = knockout(self.trainer.judge, list(batch.texts), group.texts, cfg.samples)
        return {"group": group, "picked": picked, "seconds": (t1 - t0, time.perf_counter() - t1)}

    def objective(self, prepared: Prepared) -> tuple[torch.Tensor, dict[str, float]]:
        cfg, policy, batch = self.config, self.trainer.policy, prepared.batch
        n = len(batch.rows)
        group = prepared.data["group"]
        out, ref_tokens = group.out, group.ref_tokens
        w, lose, p_chosen, calls = prepared.data["picked"]
        t2 = time.perf_counter()
        # 3. INPO's loss on one gradient forward over the two chosen rows of each prompt
        pick = torch.cat([w, lose]).to(out.tokens.device)
        logps = policy.logprobs(batch.ids, batch.mask, out.tokens[pick], out.mask[pick]).sum(-1)
        # forwards every process runs, before a non-finite judgement stops the step: the
        # exact KL of every completion, π's logits without gradient against μ's
        kl = group.exact_kl(policy, batch)
        if not torch.isfinite(p_chosen).all():  # after the forward every process runs
            raise NonFiniteError("judge preference")
        ref = ref_tokens.sum(-1)[pick]
        anchor = out.policy_logprobs.sum(-1)[pick]  # log π_t
        loss = inpo_loss(
            logps[:n], logps[n:], ref[:n], ref[n:], anchor[:n], anchor[n:], cfg.tau, cfg.eta
        )
        t3 = time.perf_counter()
        with torch.no_grad():
            sampled = (out.policy_logprobs - ref_tokens).sum(-1)
            lengths = out.lengths.float()
            margin = (logps[:n] - anchor[:n]) - (logps[n:] - anchor[n:])
        sample_seconds, judge_seconds = prepared.data["seconds"]
        return loss, {
            "judge_chosen_prob": float(p_chosen.mean()),
            "margin": float(margin.mean()),
            "kl": float(kl.mean()),
            "kl_sampled": float(sampled.mean()),
            "length": float(lengths.mean()),
            "length_chosen": float(lengths[w].mean()),
            "length_rejected": float(lengths[lose].mean()),
            "comparisons": float(calls),
            "sample_seconds": sample_seconds,
            "judge_seconds": judge_seconds,
            "forward_seconds": t3 - t2,
        }


def run(config: Config) -> int:
    return train_and_report(config, INPO, config.name)
