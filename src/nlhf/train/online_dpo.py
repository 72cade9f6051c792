"""``nlhf train online-dpo``: online DPO and online IPO, the pairwise baselines of NLHF.

    nlhf train online-dpo                                # SmolLM2 + LoRA, IMDB prompts, VADER
    nlhf train online-dpo loss_type=ipo beta=0.1         # online IPO
    nlhf train online-dpo --judge runs/pm/model label=soft steps=300

Each step, for every prompt x: two completions a, b ~ π_θ come out of one KV-cached decode
loop (``num_samples=2``: each prompt runs once, each of the 2B rows has its own generator),
which also records log π of every sampled token; the reference log-probs log μ(a), log μ(b)
come from ONE no-gradient forward over the finished 2B rows (cheaper than a reference
forward at every decoded token: the decode loop then makes half the model calls).  The judge
gives P(a ≻ b | x); the pair is ordered into (chosen y_w, rejected y_l) and the loss is
:func:`nlhf.losses.dpo_loss` or :func:`nlhf.losses.ipo_loss` on the sequence log-ratios
h = log π/μ(y_w) − log π/μ(y_l), with log π of both completions from ONE batched gradient
forward over the 2B rows.  Both forwards run each prompt once and reuse its KV cache for its
two completions (:func:`nlhf.models.logprobs.completion_logprobs`).

Labels.  ``label=hard`` (default, as TRL): y_w is the completion with P > ½; a tie (P = ½
exactly, e.g. a score judge giving equal scores, or two identical completions) says nothing
about which is better, so that pair is left out of the loss (``tie_rate`` counts them); a
step where every pair ties has loss 0.  The loss is the mean over the decided pairs of each
chunk (``grad_accum``, and each process's share under ``accelerate launch``), so with ties
P processes reproduce one process with ``grad_accum`` × P, not one chunk of the whole batch.
``label=soft`` uses p = P(y_w ≻ y_l) as the target probability: DPO minimizes the
cross-entropy −p·log σ(βh) − (1−p)·log σ(−βh) (conservative DPO), IPO the squared error
(h − (p − ½)/β)², which is the IPO paper's own objective before sampling labels; ties then
pull h towards 0 instead of being dropped.

Parameters and their names elsewhere: ``beta`` is TRL OnlineDPOConfig.beta (default 0.1 in
both), the inverse temperature of the implicit reward r = β·log π/μ for DPO and the
regularization τ of IPO (target margin 1/(2β)); ``loss_type`` dpo|ipo is TRL's
``loss_type`` sigmoid|ipo; ``max_new_tokens`` and ``temperature`` keep TRL's names; TRL's
``missing_eos_penalty`` has no counterpart here.

Logged metrics (metrics.jsonl, TensorBoard): ``loss``; judge: ``judge_chosen_prob`` = mean
P(y_w ≻ y_l) (how sure the judge is), ``tie_rate``; implicit reward r = β·log π/μ (TRL's
rewards/*): ``reward_chosen``, ``reward_rejected``, ``reward_margin`` = mean β·h,
``reward_accuracy`` = fraction of decided pairs where the implicit reward agrees with the
judge (h > 0); ``logp_chosen``, ``logp_rejected`` (sequence log π); ``kl`` = mean Σ_t log π/μ
over both samples (a sample estimate of KL(π‖μ)); ``length``, ``length_chosen``,
``length_rejected`` (tokens, EOS included); ``grad_norm``; ``lr``; ``step_seconds``,
``sample_seconds`` (sampling and the reference forward), ``judge_seconds``,
``forward_seconds``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import torch

from nlhf.config import option
from nlhf.losses import dpo_loss, ipo_loss, preference_loss
from nlhf.train.online import (
    NonFiniteError,
    OnlineConfig,
    PromptBatch,
    Trainer,
    decode,
    row_generators,
    train_and_report,
)


@dataclass
class Config(OnlineConfig):
    """Online DPO / IPO: sample two completions per prompt, let the judge pick the better one,
    and take a DPO (or IPO) step on that pair."""

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

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")


def order_pairs(
    seq_logps: torch.Tensor, preference: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split (2B,) values of [a rows; b rows] into (chosen, rejected) by P(a ≻ b).

    Returns (chosen, rejected, p_chosen = max(P, 1 − P), decided = P ≠ ½); a tie keeps a first.
    """
    n = preference.shape[0]
    a_wins = preference >= 0.5
    a, b = seq_logps[:n], seq_logps[n:]
    chosen = torch.where(a_wins, a, b)
    rejected = torch.where(a_wins, b, a)
    p_chosen = torch.where(a_wins, preference, 1.0 - preference)
    return chosen, rejected, p_chosen, preference != 0.5


def pair_loss(
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    preference: torch.Tensor,
    beta: float,
    loss_type: str = "dpo",
    label: str = "hard",
) -> torch.Tensor:
    """The online DPO/IPO loss of B judged pairs (pure; see the module doc for the labels).

    ``logps`` (2B,) sequence log π of [a; b] (carries the gradient), ``ref_logps`` (2B,) their
    log μ, ``preference`` (B,) P(a ≻ b).
    """
    if loss_type not in ("dpo", "ipo"):
        raise ValueError(f"loss_type must be dpo or ipo, got {loss_type!r}")
    if label not in ("hard", "soft"):
        raise ValueError(f"label must be hard or soft, got {label!r}")
    preference = preference.to(logps.dtype)
    chosen, rejected, p, decided = order_pairs(logps, preference)
    ref_chosen, ref_rejected, _, _ = order_pairs(ref_logps.to(logps.dtype), preference)
    if label == "soft":
        h = (chosen - ref_chosen) - (rejected - ref_rejected)
        if loss_type == "dpo":
            return preference_loss(beta * h, p)
        return ((h - (p - 0.5) / beta) ** 2).mean()
    if not decided.any():
        return logps.sum() * 0.0  # every pair tied: no information, but keep the graph
    loss_fn = dpo_loss if loss_type == "dpo" else ipo_loss
    return loss_fn(
        chosen[decided], rejected[decided], ref_chosen[decided], ref_rejected[decided], beta
    )


class OnlineDPO:
    """The algorithm: two samples per prompt from one decode loop, a judgement, a pair loss."""

    def __init__(self, trainer: Trainer, config: Config) -> None:
        self.trainer = trainer
        self.config = config

    def loss(self, batch: PromptBatch, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        from nlhf.models import sample

        cfg, policy = self.config, self.trainer.policy
        n = len(batch.rows)
        ids, mask = batch.ids, batch.mask  # each prompt runs once for its two completions
        t0 = time.perf_counter()
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
        ref_tokens = policy.reference_logprobs(ids, mask, out.tokens, out.mask)
        t1 = time.perf_counter()
        texts = decode(policy.tokenizer, out.tokens, out.mask)
        preference = self.trainer.judge(batch.texts, texts[:n], texts[n:]).float()
        preference = preference.to(policy.device)
        t2 = time.perf_counter()
        logps = policy.logprobs(ids, mask, out.tokens, out.mask).sum(-1)
        if not torch.isfinite(preference).all():  # after the forward every process runs
            raise NonFiniteError("judge preference", step)
        ref_logps = ref_tokens.sum(-1)
        loss = pair_loss(logps, ref_logps, preference, cfg.beta, cfg.loss_type, cfg.label)
        t3 = time.perf_counter()

        with torch.no_grad():
            ratio = cfg.beta * (logps.detach() - ref_logps)
            r_chosen, r_rejected, p_chosen, decided = order_pairs(ratio, preference)
            lp_chosen, lp_rejected, _, _ = order_pairs(logps.detach(), preference)
            len_chosen, len_rejected, _, _ = order_pairs(out.lengths.float(), preference)
            margin = r_chosen - r_rejected
            correct = (margin > 0).float() + 0.5 * (margin == 0).float()
            kl = (out.policy_logprobs - ref_tokens).sum(-1)
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
            "length": float(out.lengths.float().mean()),
            "length_chosen": float(len_chosen.mean()),
            "length_rejected": float(len_rejected.mean()),
            "sample_seconds": t1 - t0,
            "judge_seconds": t2 - t1,
            "forward_seconds": t3 - t2,
        }

    def update(self, chunks: list[PromptBatch], step: int) -> dict[str, float]:
        """The trainer's gradient step; then the accuracy over the step's decided pairs."""
        totals = self.trainer.gradient_step(self, chunks, step)
        decided = totals.pop("decided_fraction")
        correct = totals.pop("correct_fraction")
        totals["reward_accuracy"] = correct / decided if decided > 0 else 0.5
        return totals

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def run(config: Config) -> int:
    return train_and_report(config, OnlineDPO, f"online-{config.loss_type}")
