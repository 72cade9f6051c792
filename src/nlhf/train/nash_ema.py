"""``nlhf train nash-ema``: Nash-EMA, the NLHF paper's policy gradient against a moving average.

    nlhf train nash-ema                                 # SmolLM2 + LoRA, IMDB prompts, VADER judge
    nlhf train nash-ema --judge runs/pm/model tau=0.008 ema_decay=0.99 steps=300
    nlhf train nash-ema --config configs/nash-ema.yaml

Each step, for every prompt x:

1. y ~ π_θ (with log π and log μ of its tokens) and y′ ~ π_θ̄, the policy whose trainable
   weights are θ̄, an exponential moving average of its own (swapped in for that decode:
   :func:`nlhf.train.weights.swapped_weights`);
2. the judge gives P(y ≻ y′ | x) and the loss is Nash-MD-PG's surrogate
   (:func:`nlhf.train.nash_pg.preference_pg_loss`); one optimizer step;
3. θ̄ ← d·θ̄ + (1−d)·θ (θ̄ starts at the initial weights; fp32, checkpointed).

Parameters, their names in the paper and TRL, and the logged metrics: ``docs/trainers.md``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from nlhf.config import option
from nlhf.models import sample
from nlhf.models.sampling import row_generators
from nlhf.train.core import Algorithm
from nlhf.train.nash_pg import preference_pg_loss
from nlhf.train.online import OnlineConfig, PromptBatch, train_and_report
from nlhf.train.sharding import like_parameters, whole_tensors
from nlhf.train.weights import relative_distance, swapped_weights, trainable_weights


@dataclass
class Config(OnlineConfig):
    """Nash-EMA: policy gradient towards the Nash equilibrium of the τ-regularized preference
    game, against the policy whose weights are the moving average of the policy's own."""

    out: str = option("runs/nash-ema", "output folder: metrics.jsonl, checkpoints/, policy/")
    tau: float = option(
        0.05,
        "KL regularization τ (the NLHF paper's τ; TRL NashMDConfig.beta); the paper's Nash-MD "
        "runs used 0.008, 0.05 keeps short CPU runs near the reference",
    )
    ema_decay: float = option(
        0.99,
        "decay d of the opponent's weights θ̄ ← d·θ̄ + (1−d)·θ after each optimizer step "
        "(0: self-play, 1: the initial policy); the paper gives no value, 0.99 averages over "
        "roughly the last 100 steps",
    )

    def check(self) -> None:
        self.at_least(0, "tau")
        if not 0.0 <= self.ema_decay <= 1.0:
            raise ValueError(f"ema_decay must be in [0, 1], got {self.ema_decay}")


@torch.no_grad()
def ema_update(average: dict[str, torch.Tensor], model: nn.Module, decay: float) -> None:
    """θ̄ ← d·θ̄ + (1−d)·θ in place, for every tensor of ``average``."""
    params = dict(model.named_parameters())
    for name, value in average.items():
        value.mul_(decay).add_(params[name].detach().float(), alpha=1.0 - decay)


class NashEMA(Algorithm):
    """The algorithm: a rollout against the EMA policy, the surrogate loss, the EMA update."""

    config: Config

    def __init__(self, trainer: Any, config: Config) -> None:
        super().__init__(trainer, config)
        self.ema = trainable_weights(trainer.policy.model)

    def sample_opponent(self, batch: PromptBatch, step: int) -> Any:
        """y′ ~ π_θ̄ for every prompt of ``batch``; the policy's weights are left as they were."""
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
        loss, metrics = preference_pg_loss(self.trainer, batch, y, opponent, cfg.tau)
        return loss, {**metrics, "sample_seconds": sample_seconds}

    def update(self, chunks: list[PromptBatch], step: int) -> dict[str, float]:
        """One optimizer step (the trainer's default), then the moving average."""
        totals = super().update(chunks, step)
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
