"""``nlhf train nash-ema``: Nash-EMA, the NLHF paper's policy gradient against a moving average.

    nlhf train nash-ema                                 # SmolLM2 + LoRA, IMDB prompts, VADER judge
    nlhf train nash-ema --judge runs/pm/model tau=0.008 ema_decay=0.99 steps=300
    nlhf train nash-ema --config configs/nash-ema.yaml

Each step, for every prompt x: y ~ π_θ (with the log-probs of y under π_θ and the reference μ,
from one KV-cached decode) and y′ ~ π_θ̄, the policy whose trainable weights are an exponential
moving average θ̄ of the policy's own trainable weights (under LoRA: the adapter's; with
``lora_r=0``: every weight).  The judge gives P(y ≻ y′ | x) and the loss is
:func:`nlhf.losses.nash_md_pg_loss`, the same surrogate as Nash-MD-PG, whose gradient estimates
−∇[P(π_θ ≻ π_θ̄) − τ·KL(π_θ‖μ)].  After every optimizer step θ̄ ← d·θ̄ + (1−d)·θ, so after k
steps θ̄_k = d^k·θ_0 + (1−d)·Σ_{j=1..k} d^{k−j}·θ_j (θ̄ starts at the initial weights; the tabular
counterpart is :func:`nlhf.tabular.nash_ema` with ``ema = 1 − d``).

Sampling from θ̄: its tensors are swapped into the model's parameters for the opponent's decode
(:func:`swapped_weights`, which re-points ``param.data``: no copy, no second model) and the
policy's own tensors are put back afterwards, bit for bit.  Measured on the tiny test model
(1 thread, 8 prompts × 24 tokens) the swap and restore take 0.11 ms against 29–35 ms for the
opponent's decode, full fine-tune or LoRA, so the opponent costs one extra decode per step.
(A second peft adapter would need per-row adapters for three weight sets in one decode, which
:mod:`nlhf.models.sampling` does not do, and an EMA copy into that adapter every step.)
θ̄ lives in the algorithm's state, fp32, and is checkpointed.

Parameters and their names elsewhere: ``tau`` is the paper's τ (TRL's NashMDConfig calls it
``beta``); ``ema_decay`` is d, the weight kept by the average at each step (d = 0: self-play
against the current policy; d = 1: the opponent stays the initial policy, which under LoRA is
the reference).  The NLHF paper describes Nash-EMA in its deep-learning section without a value
that this module could confirm; 0.99 (an average over roughly the last 100 steps) is a default
to tune, not the paper's number.

Logged metrics (metrics.jsonl, TensorBoard): ``loss``; ``win_rate`` = mean P(y ≻ y′), the
policy against its moving average; ``kl`` = mean Σ_t log π/μ of y (a sample estimate of
KL(π‖μ)); ``length`` and ``opponent_length`` (tokens, EOS included); ``ema_distance`` =
‖θ − θ̄‖ / ‖θ̄‖ over the trainable weights after the update; ``grad_norm``; ``lr``;
``step_seconds``, ``sample_seconds``, ``judge_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

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
from nlhf.train.sharding import like_parameters, whole, whole_tensors


@dataclass
class Config(OnlineConfig):
    """Nash-EMA: policy gradient towards the Nash equilibrium of the τ-regularized preference
    game, against the policy whose weights are the moving average of the policy's own."""

    out: str = option("runs/nash-ema", "output folder: metrics.jsonl, checkpoints/, policy/")
    tau: float = option(0.05, "KL regularization τ (the paper's τ; TRL NashMDConfig.beta)")
    ema_decay: float = option(
        0.99,
        "decay d of the opponent's weights θ̄ ← d·θ̄ + (1−d)·θ after each optimizer step "
        "(0: self-play, 1: the initial policy)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tau < 0:
            raise ValueError(f"tau must be ≥ 0, got {self.tau}")
        if not 0.0 <= self.ema_decay <= 1.0:
            raise ValueError(f"ema_decay must be in [0, 1], got {self.ema_decay}")


# --------------------------------------------------------------------------- weights


def trainable_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """An fp32 copy of every trainable parameter, by name (the adapter's only, under LoRA)."""
    return {
        name: p.detach().to(torch.float32, copy=True)
        for name, p in model.named_parameters()
        if p.requires_grad
    }


@torch.no_grad()
def ema_update(average: dict[str, torch.Tensor], model: nn.Module, decay: float) -> None:
    """θ̄ ← d·θ̄ + (1−d)·θ in place, for every tensor of ``average``."""
    params = dict(model.named_parameters())
    for name, value in average.items():
        value.mul_(decay).add_(params[name].detach().float(), alpha=1.0 - decay)


@torch.no_grad()
def relative_distance(weights: dict[str, torch.Tensor], model: nn.Module) -> float:
    """‖θ − w‖ / ‖w‖ over the tensors of ``weights`` (θ: the model's current parameters)."""
    params = dict(model.named_parameters())
    diff = sum((params[n].float() - w).pow(2).sum() for n, w in weights.items())
    norm = sum(w.pow(2).sum() for w in weights.values())
    # sharded: both sums stay partial until this one gather
    diff, norm = (float(x) for x in whole(torch.stack([diff, norm])))
    return (diff / max(norm, 1e-30)) ** 0.5


@contextmanager
def swapped_weights(model: nn.Module, weights: dict[str, torch.Tensor]) -> Iterator[None]:
    """Run the block with ``weights`` (name → tensor) in place of those parameters' values.

    The parameters' own tensors are re-pointed, not copied, and put back on exit (also on an
    error), so the model's weights afterwards are exactly what they were.  Tensors whose dtype
    or device differs from the parameter's are converted (a copy) for the block.  Parameters
    sharded by FSDP (``fsdp=true``) are copied into instead (FSDP gathers from its own
    storage, which re-pointing would bypass), and copied back on exit.
    """
    params = dict(model.named_parameters())
    unknown = sorted(set(weights) - set(params))
    if unknown:
        raise KeyError(f"swapped_weights: the model has no parameters named {unknown[:3]}")
    from torch.distributed.tensor import DTensor

    saved: dict[str, torch.Tensor] = {}
    copied: dict[str, torch.Tensor] = {}
    try:
        with torch.no_grad():
            for name, value in weights.items():
                p = params[name]
                if value.shape != p.shape:
                    raise ValueError(
                        f"swapped_weights: {name} has shape {tuple(value.shape)}, "
                        f"the parameter {tuple(p.shape)}"
                    )
                if isinstance(p, DTensor):
                    copied[name] = p.detach().clone()
                    p.copy_(value.to(p.dtype))
                else:
                    saved[name] = p.data
                    p.data = value.to(device=p.device, dtype=p.dtype)
        yield
    finally:
        with torch.no_grad():
            for name, original in saved.items():
                params[name].data = original
            for name, original in copied.items():
                params[name].copy_(original)


# --------------------------------------------------------------------------- loss


def preference_loss_step(
    trainer: Trainer,
    batch: PromptBatch,
    y: Any,
    opponent: Any,
    tau: float,
    ref_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Judge y against y′ and return the Nash-MD-PG surrogate loss and its metrics.

    ``ref_logprobs`` (default ``y.ref_logprobs``) is what the KL term compares π_θ with; a
    caller that regularizes towards several policies passes their weighted log-prob mix.
    """
    policy = trainer.policy
    tok = policy.tokenizer
    t0 = time.perf_counter()
    preference = trainer.judge(
        batch.texts, decode(tok, y.tokens, y.mask), decode(tok, opponent.tokens, opponent.mask)
    ).to(policy.device)
    judge_seconds = time.perf_counter() - t0
    logprobs = policy.logprobs(batch.ids, batch.mask, y.tokens, y.mask)
    target = y.ref_logprobs if ref_logprobs is None else ref_logprobs
    loss = nash_md_pg_loss(logprobs, target, y.mask.bool(), preference, tau)
    kl = (y.policy_logprobs - y.ref_logprobs).sum(-1)
    return loss, {
        "win_rate": float(preference.mean()),
        "kl": float(kl.mean()),
        "length": float(y.lengths.float().mean()),
        "opponent_length": float(opponent.lengths.float().mean()),
        "judge_seconds": judge_seconds,
    }


# --------------------------------------------------------------------------- the algorithm


class NashEMA:
    """The algorithm: a rollout against the EMA policy, the surrogate loss, the EMA update."""

    def __init__(self, trainer: Trainer, config: Config) -> None:
        self.trainer = trainer
        self.config = config
        self.ema = trainable_weights(trainer.policy.model)

    def sample_opponent(self, batch: PromptBatch, step: int) -> Any:
        """y′ ~ π_θ̄ for every prompt of ``batch``; the policy's weights are left as they were."""
        from nlhf.models import sample

        cfg, policy = self.config, self.trainer.policy
        with swapped_weights(policy.model, self.ema):
            return sample(
                policy,
                batch.ids,
                batch.mask,
                cfg.max_new_tokens,
                temperature=cfg.temperature,
                generator=row_generators(cfg.seed, step, batch.rows, salt=1),
            )

    def loss(self, batch: PromptBatch, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        from nlhf.models import sample

        cfg, policy = self.config, self.trainer.policy
        t0 = time.perf_counter()
        y = sample(
            policy,
            batch.ids,
            batch.mask,
            cfg.max_new_tokens,
            reference=policy.reference,
            temperature=cfg.temperature,
            generator=row_generators(cfg.seed, step, batch.rows),
        )
        opponent = self.sample_opponent(batch, step)
        sample_seconds = time.perf_counter() - t0
        loss, metrics = preference_loss_step(self.trainer, batch, y, opponent, cfg.tau)
        return loss, {**metrics, "sample_seconds": sample_seconds}

    def update(self, chunks: list[PromptBatch], step: int) -> dict[str, float]:
        """One optimizer step (the trainer's default), then the moving average."""
        totals = self.trainer.gradient_step(self, chunks, step)
        ema_update(self.ema, self.trainer.policy.model, self.config.ema_decay)
        totals["ema_distance"] = relative_distance(self.ema, self.trainer.policy.model)
        return totals

    def state_dict(self) -> dict[str, Any]:
        # sharded: a collective; only the main process, which writes it, keeps a copy
        return {"ema": whole_tensors(self.ema, keep=self.trainer.procs.is_main)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state["ema"]
        if saved.keys() != self.ema.keys():
            missing = sorted(set(self.ema) ^ set(saved))[:3]
            raise ValueError(
                f"checkpoint: the saved EMA weights do not match the policy's trainable "
                f"parameters (e.g. {missing}); was it written with another lora_r or model?"
            )
        model = self.trainer.policy.model
        for name, value in like_parameters(model, saved).items():
            self.ema[name] = value.to(torch.float32).clone()


def run(config: Config) -> int:
    return train_and_report(config, NashEMA, "nash-ema")
