"""``nlhf train online-dpo``: online DPO and online IPO, the pairwise baselines of NLHF.

    nlhf train online-dpo                                # SmolLM2 + LoRA, IMDB prompts, VADER
    nlhf train online-dpo loss_type=ipo beta=0.1         # online IPO
    nlhf train online-dpo --judge runs/pm/model label=soft steps=300
    nlhf train online-ipo                                # preset: loss_type=ipo label=soft
    nlhf train egpo                                      # preset: online IPO + extragradient

Each step, for every prompt x:

1. a, b ~ π_θ from one KV-cached decode loop (``num_samples=2``: each prompt runs once), and
   log μ(a), log μ(b) from one no-gradient forward over the finished rows, whose logits the
   gradient forward of step 3 takes the logged exact KL(π‖μ) against (no forward of its own);
2. the judge gives P(a ≻ b | x); the pair is ordered into (y_w, y_l) (``label=hard``: ties
   left out; ``label=soft``: P is the target) by :func:`nlhf.losses.online_pair_loss`;
3. DPO's or IPO's loss on h = log π/μ(y_w) − log π/μ(y_l), with log π of both from one
   gradient forward that runs each prompt once for its two completions.

Labels, parameters with their TRL names, and the logged metrics: ``docs/trainers.md``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from nlhf.config import option
from nlhf.losses import online_pair_loss, order_pairs
from nlhf.models import sample
from nlhf.models.sampling import row_generators
from nlhf.models.text import decode_completions
from nlhf.train.core import Algorithm, NonFiniteError, StepRule
from nlhf.train.online import OnlineConfig, PromptBatch, train_and_report


@dataclass
class Config(OnlineConfig):
    """Online DPO / IPO: sample two completions per prompt, let the judge pick the better one,
    and take a DPO (or IPO) step on that pair."""

    name: ClassVar[str] = ""
    out: str = option("runs/online-dpo", "output folder: metrics.jsonl, checkpoints/, policy/")
    loss_type: Literal["dpo", "ipo"] = option(
        "dpo", "dpo: −log σ(β·h); ipo: (h − 1/(2β))² (TRL loss_type sigmoid|ipo)"
    )
    beta: float = option(
        0.1, "β: DPO's implicit-reward temperature, IPO's regularization (TRL OnlineDPOConfig.beta)"
    )
    label: Literal["hard", "soft"] = option(
        "hard", "hard: the judge's pick (ties dropped); soft: P(y_w ≻ y_l) as the target"
    )

    def check(self) -> None:
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")


@dataclass
class OnlineIpoConfig(Config):
    """Online IPO (Calandriello et al. 2024; "Online IPO 2" of the EGPO paper): two samples of
    the policy, the judge's P as a soft target, IPO's square loss (h − (P − ½)/β)²."""

    name: ClassVar[str] = "online-ipo"
    out: str = option("runs/online-ipo", "output folder: metrics.jsonl, checkpoints/, policy/")
    loss_type: Literal["dpo", "ipo"] = option("ipo", "the loss (online IPO: ipo)")
    label: Literal["hard", "soft"] = option(
        "soft", "soft: P(y_w ≻ y_l) as the target (online IPO); hard: the judge's pick"
    )


@dataclass
class EgpoConfig(OnlineIpoConfig):
    """EGPO (Zhou, Fazel, Du 2025): online IPO's loss with the extragradient outer loop, a
    look-ahead step whose samples and gradient then step the weights from where they were."""

    name: ClassVar[str] = "egpo"
    out: str = option("runs/egpo", "output folder: metrics.jsonl, checkpoints/, policy/")
    step_rule: StepRule = option(
        "extragradient", "the outer loop (EGPO: extragradient, the look-ahead step)"
    )


class OnlineDPO(Algorithm):
    """The algorithm: two samples per prompt from one decode loop, a judgement, a pair loss."""

    config: Config

    def loss(self, batch: PromptBatch, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        cfg, policy = self.config, self.trainer.policy
        n = len(batch.rows)
        ids, mask = batch.ids, batch.mask  # each prompt runs once for its two completions
        t0 = time.perf_counter()
        # 1. two completions per prompt and their reference log-probs
        out = sample(
            policy,
            ids,
            mask,
            cfg.max_new_tokens,
            temperature=cfg.temperature,
            generator=row_generators(cfg.seed, step, batch.rows, salt=0)
            + row_generators(cfg.seed, step, batch.rows, salt=1),
            num_samples=2,
        )
        ref_tokens, ref_logits = policy.reference_logprobs_and_logits(
            ids, mask, out.tokens, out.mask
        )
        t1 = time.perf_counter()
        # 2. the judgement; 3. the pair loss on one gradient forward
        texts = decode_completions(policy.tokenizer, out.tokens, out.mask)
        preference = self.trainer.judge(batch.texts, texts[:n], texts[n:]).float()
        preference = preference.to(policy.device)
        t2 = time.perf_counter()
        # a forward every process runs, before a non-finite judgement stops the step
        tokens, kl = policy.logprobs_and_kl(ids, mask, out.tokens, out.mask, ref_logits)
        del ref_logits  # (2B, T, V): kept no longer than the KL needs it
        logps = tokens.sum(-1)
        if not torch.isfinite(preference).all():  # after the forward every process runs
            raise NonFiniteError("judge preference")
        ref_logps = ref_tokens.sum(-1)
        loss = online_pair_loss(logps, ref_logps, preference, cfg.beta, cfg.loss_type, cfg.label)
        t3 = time.perf_counter()

        with torch.no_grad():
            ratio = cfg.beta * (logps.detach() - ref_logps)
            r_chosen, r_rejected, p_chosen, decided = order_pairs(ratio, preference)
            lp_chosen, lp_rejected, _, _ = order_pairs(logps.detach(), preference)
            len_chosen, len_rejected, _, _ = order_pairs(out.lengths.float(), preference)
            margin = r_chosen - r_rejected
            correct = (margin > 0).float() + 0.5 * (margin == 0).float()
            sampled = (out.policy_logprobs - ref_tokens).sum(-1)
        return loss, {
            "judge_chosen_prob": float(p_chosen.mean()),
            "tie_rate": float((~decided).float().mean()),
            "reward_chosen": float(r_chosen.mean()),
            "reward_rejected": float(r_rejected.mean()),
            "reward_margin": float(margin.mean()),
            # reward_accuracy = mean over the decided pairs of the whole step, from two
            # per-pair fractions that average correctly over chunks and processes (update)
            "decided_fraction": float(decided.float().mean()),
            "correct_fraction": float((correct * decided.float()).mean()),
            "logp_chosen": float(lp_chosen.mean()),
            "logp_rejected": float(lp_rejected.mean()),
            "kl": float(kl.mean()),
            "kl_sampled": float(sampled.mean()),
            "length": float(out.lengths.float().mean()),
            "length_chosen": float(len_chosen.mean()),
            "length_rejected": float(len_rejected.mean()),
            "sample_seconds": t1 - t0,
            "judge_seconds": t2 - t1,
            "forward_seconds": t3 - t2,
        }

    def update(self, chunks: list[PromptBatch], step: int) -> dict[str, float]:
        """The trainer's gradient step; then the accuracy over the step's decided pairs."""
        totals = super().update(chunks, step)
        decided = totals.pop("decided_fraction")
        correct = totals.pop("correct_fraction")
        totals["reward_accuracy"] = correct / decided if decided > 0 else 0.5
        return totals


def run(config: Config) -> int:
    return train_and_report(config, OnlineDPO, config.name or f"online-{config.loss_type}")
