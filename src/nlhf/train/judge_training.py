"""What ``nlhf train reward-model`` and ``nlhf train preference-model`` share: their options, the
Bradley–Terry objective and the held-out report; the loop is :mod:`nlhf.train.core`'s.

    nlhf train reward-model --data imdb max_pairs=2000 dtype=bfloat16

Both judges give the log-odds that the chosen response beats the rejected one (a reward
model: r(x, y_w) − r(x, y_l); a preference model: its antisymmetric logit).  Each step:

1. the batch's share of this process (:class:`nlhf.train.pairs.EpochBatches`, weighted by the
   pairs' weights);
2. :func:`nlhf.losses.bradley_terry_loss`, −log σ(logit) weighted by each pair's weight, with
   the encoder in ``dtype`` autocast; one optimizer step (the fresh heads at ``head_lr``);
3. held-out accuracy with its 95% interval, margin, log-loss, calibration and the length
   baseline (:func:`evaluate`), at the end and every ``eval_every`` steps.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from nlhf.config import option
from nlhf.data import length_baseline_accuracy
from nlhf.data.chat import render_prompt
from nlhf.judge.evaluation import accuracy, calibration_error
from nlhf.losses import bradley_terry_loss
from nlhf.metrics import log_loss
from nlhf.models.policy import resolve_dtype
from nlhf.train.core import Module, Trainer, TrainFields
from nlhf.train.distributed import Processes
from nlhf.train.pairs import (
    DataFields,
    EpochBatches,
    Objective,
    Share,
    train_and_evaluate,
)

# logit(model, prompts, chosen, rejected) -> log-odds that chosen ≻ rejected, shape (B,)
PairLogit = Callable[[nn.Module, list[str], list[str], list[str]], torch.Tensor]


@dataclass
class JudgeTrainConfig(TrainFields, DataFields):
    """Fields shared by the reward-model and preference-model trainers."""

    backbone: str = option(
        "minilm", "encoder to start from: minilm (the embedded MiniLM-L6), a folder or a hub name"
    )
    out: str = option("runs/judge", "output folder: model/, metrics.json, metrics.jsonl")
    batch_size: int = option(16, "pairs per optimizer step (across all processes)")
    eval_batch_size: int = option(64, "pairs per forward during evaluation")
    lr: float = option(5e-5, "learning rate of the encoder")
    head_lr: float = option(1e-3, "learning rate of the freshly initialized heads")
    schedule: Literal["constant", "linear", "cosine"] = option(
        "linear", "learning-rate schedule after warm-up"
    )
    warmup_steps: int = option(10, "steps of linear learning-rate warm-up")
    max_length: int = option(256, "tokens per (prompt, response); the prompt is cut from the left")
    dtype: Literal["float32", "bfloat16", "auto"] = option(
        "float32",
        "autocast dtype of the encoder's training forward (bfloat16 is faster on GPUs and CPUs "
        "with bf16 units; auto: bfloat16 where the hardware has them)",
    )
    checkpoint_every: int = option(50, "save a resumable checkpoint every this many steps")

    def check(self) -> None:
        self.at_least(1, "max_length")


def prompt_text(pair: Any) -> str:
    """A pair's prompt as the judges read it (chat turns rendered as plain text)."""
    return render_prompt(pair.prompt)


def pair_logits(model: nn.Module, logit: PairLogit, pairs: Any) -> torch.Tensor:
    """The log-odds that each pair's chosen response beats its rejected one."""
    return logit(
        model,
        [prompt_text(p) for p in pairs],
        [p.chosen for p in pairs],
        [p.rejected for p in pairs],
    )


@torch.no_grad()
def evaluate(
    model: nn.Module, logit: PairLogit, pairs: Any, batch_size: int = 64
) -> dict[str, Any]:
    """Held-out accuracy (95% Wilson interval), mean logit margin, log-loss, calibration."""
    model.eval()
    logits = [
        pair_logits(model, logit, pairs[i : i + batch_size]).float().cpu()
        for i in range(0, len(pairs), batch_size)
    ]
    margin = torch.cat(logits).numpy().astype(np.float64)
    p = 1.0 / (1.0 + np.exp(-margin))
    acc, low, high = accuracy(0.5 + 0.5 * np.sign(margin))  # a zero margin counts half
    return {
        "pairs": len(margin),
        "accuracy": acc,
        "accuracy_ci95": [low, high],
        "mean_margin": float(margin.mean()),
        "log_loss": log_loss(p, np.ones_like(p)),
        "ece": calibration_error(p),  # over both orders: right and honest either way
        "shorter_preferred_baseline": length_baseline_accuracy(pairs),
    }


class BradleyTerry(Objective):
    """The judges' objective: −log σ(logit) of each pair, weighted by its weight."""

    evaluate_first = False
    config: JudgeTrainConfig

    def __init__(
        self,
        trainer: Trainer,
        config: JudgeTrainConfig,
        batches: EpochBatches,
        held_out: Any,
        logit: PairLogit,
    ) -> None:
        super().__init__(trainer, config, batches, held_out)
        self.logit = logit
        self.dtype = torch.bfloat16 if resolve_dtype(config.dtype) == "bfloat16" else None

    def loss(self, share: Share, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        model = self.trainer.policy.model
        model.train()
        device = self.trainer.procs.device
        with torch.autocast(device.type, dtype=self.dtype, enabled=self.dtype is not None):
            logits = pair_logits(model, self.logit, share.examples).float()
        weights = torch.tensor([p.weight for p in share.examples], device=logits.device)
        loss = bradley_terry_loss(logits, torch.zeros_like(logits), weight=weights)
        right = ((logits.detach() > 0).float() * weights).sum() / weights.sum()
        return loss, {"accuracy": float(right)}  # weighted as the loss is

    def evaluate(self) -> dict[str, Any]:
        model = self.trainer.policy.model
        return evaluate(model, self.logit, self.held_out, self.config.eval_batch_size)


def train_judge(
    config: JudgeTrainConfig,
    model: nn.Module,
    logit: PairLogit,
    head_names: tuple[str, ...],
    name: str,
    pairs: tuple[Any, Any],
) -> dict[str, Any]:
    """Train ``model`` on the (train, held-out) ``pairs``; save it to ``<out>/model``, say how
    it did; returns the metrics.json content."""
    procs = Processes()
    train, held_out = pairs
    batches = EpochBatches(list(train), config, config.seed, procs, units=lambda p: p.weight)
    trainable = Module(model, model.save, head_names, config.head_lr)
    trainer = Trainer(config, trainable, batches.steps, batches, procs=procs, save_as="model")
    objective = BradleyTerry(trainer, config, batches, held_out, logit)
    result = train_and_evaluate(trainer, objective, name)
    if procs.is_main:  # the encoder's checkpoints are large; the model is saved
        shutil.rmtree(Path(config.out) / "checkpoints", ignore_errors=True)
    trainer.say(f"{name.replace('-', ' ')}: {summary_line(result)}\nsaved to {config.out}/model")
    return result


def summary_line(metrics: dict[str, Any]) -> str:
    h = metrics["held_out"]
    low, high = h["accuracy_ci95"]
    return (
        f"held-out accuracy {h['accuracy']:.3f} (95% CI {low:.3f}–{high:.3f}) on {h['pairs']} "
        f"pairs; mean margin {h['mean_margin']:.3f}; log-loss {h['log_loss']:.3f}; "
        f"ECE {h['ece']:.3f}; shorter-preferred baseline {h['shorter_preferred_baseline']:.3f}"
    )
