"""The online training core: prompts → rollout → judge → loss → optimizer step → metrics.

Every online algorithm (``nlhf train nash-md`` …) is a small class with one method,
``loss(batch, step) -> (loss, metrics)``, that samples what it needs, asks the judge and
returns a differentiable loss; this module owns everything around it:

- the policy (any causal LM; LoRA through peft with the adapter-disabled model as the
  reference), the prompts, the judge;
- AdamW or Lion, learning-rate schedule, gradient clipping, gradient accumulation;
- deterministic sampling: the generator of each completion is seeded by (seed, step, row),
  so a resumed run samples exactly what the uninterrupted run would have;
- checkpoints every ``checkpoint_every`` steps (policy weights or adapter, optimizer,
  scheduler, RNG states, step, algorithm state), written to a temp folder and renamed;
  a killed run restarted with the same command resumes from the last complete one;
- metrics: ``metrics.jsonl`` always, TensorBoard when installed, a progress bar;
- NaN/inf in the loss or a logged quantity stops the run naming the step and the quantity
  (``on_nonfinite=skip`` skips that update instead);
- devices and processes through Hugging Face Accelerate (below).

Several processes (data parallel).  Start the same command under ``accelerate launch``:

    accelerate launch --multi_gpu --num_processes 2 -m nlhf.cli train nash-md batch_size=16
    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \
        --dynamo_backend no -m nlhf.cli train ppo ...   # no GPU: 2 CPU processes (gloo)
    torchrun --nproc_per_node 2 -m nlhf.cli train nash-md ...   # the same without accelerate

On a machine without GPUs the processes form a gloo group on the CPU
(:func:`nlhf.train.distributed.spawned_without_accelerator`); note that ``accelerate launch
--cpu`` starts one process only, whatever ``--num_processes`` says.
(``accelerate launch ... $(which nlhf) train ...`` works too; without a saved ``accelerate
config`` the launcher asks for the flags of the second line.)  ``batch_size`` is the
*global* batch: each step's ``batch_size`` prompts are the same whatever the number of
processes, process k of P takes the contiguous share ``rows[k·B/P : (k+1)·B/P]`` and splits it
into ``grad_accum`` chunks, so ``batch_size`` must be a multiple of P × ``grad_accum``.  Every
completion's generator is seeded by its global row (:func:`row_generators`), so the union of
the processes' samples is exactly what one process samples, and a process's chunks are the
chunks one process would form with ``grad_accum`` × P.  Each process backpropagates its
losses scaled by its share of the batch and the gradients are summed over the processes
before clipping (:mod:`nlhf.train.distributed`), so the update is that of the global batch;
metrics are global averages.  Only the main process writes ``metrics.jsonl``, TensorBoard,
checkpoints and ``policy/`` and shows the progress bar; every process resumes from the same
checkpoint.  Each process holds a whole copy of the model on its device (``accelerate``
picks the GPU of each process), or with ``fsdp=true`` a shard of it (:mod:`nlhf.train.sharding`:
the same updates; sampling keeps the processes decoding in step; PPO's value head stays
whole and its gradients are summed here); FSDP/DeepSpeed settings in an ``accelerate
config`` are not read, the ``fsdp`` option is.  With one process nothing is gathered or copied.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from tqdm.auto import tqdm

from nlhf.config import option, to_dict
from nlhf.files import atomic_write_json, write_folder_atomically
from nlhf.train import sharding
from nlhf.train.checkpoint import Checkpointer
from nlhf.train.distributed import Processes
from nlhf.train.metrics_log import MetricsLog, check_tracker_names
from nlhf.train.policy_fields import PolicyFields, load_policy


@dataclass
class OnlineConfig(PolicyFields):
    """Fields shared by every online algorithm."""

    prompts: str = option(
        "imdb", "prompts: imdb (openings of movie reviews), hh (HH-RLHF dialogues) or a file"
    )
    prompt_words: int = option(8, "imdb prompts: the first this many words of a review")
    chat_template: bool = option(
        False, "render prompts with the tokenizer's chat template (else plain continuation)"
    )
    judge: str = option(
        "vader", "judge: vader, or a folder from nlhf train reward-model|preference-model"
    )
    steps: int = option(100, "optimizer steps")
    time_limit: float = option(
        0.0,
        "stop after this many minutes of training steps, at a step boundary, and save the "
        "policy (0: no limit; time spent before a resume counts)",
    )
    batch_size: int = option(8, "prompts per optimizer step (across all processes)")
    grad_accum: int = option(1, "split each step's prompts into this many sequential chunks")
    max_new_tokens: int = option(24, "tokens sampled per completion")
    temperature: float = option(1.0, "sampling temperature (1: sample the policy itself)")
    optimizer: Literal["adamw", "lion"] = option("adamw", "optimizer")
    lr: float = option(1e-3, "learning rate")
    weight_decay: float = option(0.0, "decoupled weight decay")
    schedule: Literal["constant", "linear", "cosine"] = option(
        "constant",
        "learning-rate schedule after warm-up: linear and cosine decay over the steps, or over "
        "the minutes of time_limit when one is set",
    )
    warmup_steps: int = option(0, "steps of linear warm-up")
    grad_clip: float = option(1.0, "clip the gradient norm to this value (0: off)")
    seed: int = option(0, "seed for prompts order, sampling and initialization")
    out: str = option("runs/online", "output folder: metrics.jsonl, checkpoints/, policy/")
    checkpoint_every: int = option(25, "save a resumable checkpoint every this many steps")
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
        for name in ("steps", "batch_size", "grad_accum", "max_new_tokens", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.batch_size % self.grad_accum:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of "
                f"grad_accum ({self.grad_accum})"
            )
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.time_limit < 0:
            raise ValueError(f"time_limit must be ≥ 0, got {self.time_limit}")


@dataclass
class PromptBatch:
    """Left-padded prompt tokens of one chunk, their texts, and their global row numbers."""

    texts: list[str]
    ids: torch.Tensor
    mask: torch.Tensor
    rows: list[int]


class Algorithm(Protocol):
    """``loss`` for one chunk of prompts; the trainer accumulates, clips and steps.

    An algorithm that needs several optimizer steps per rollout (PPO's epochs) defines
    ``update(chunks, step) -> metrics`` instead, calling ``trainer.clip_and_step()`` itself
    and raising :class:`NonFiniteError` on a NaN/inf.
    """

    def loss(self, batch: PromptBatch, step: int) -> tuple[torch.Tensor, dict[str, float]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


# --------------------------------------------------------------------------- components


def load_prompt_texts(config: OnlineConfig, tokenizer=None) -> list[str]:
    """The prompt pool as model-input texts (chat template applied when asked)."""
    from nlhf.data.chat import render_prompt

    if config.prompts == "imdb":
        from nlhf.data.movie_reviews import review_prompts

        prompts = review_prompts(words=config.prompt_words, seed=config.seed)
    elif config.prompts == "hh":
        from nlhf.data import load_hh_harmless

        prompts = [pair.prompt for pair in load_hh_harmless()]
    else:
        from nlhf.data import load_prompts

        prompts = load_prompts(config.prompts)
    texts = []
    for p in prompts:
        content = getattr(p, "content", p)
        if config.chat_template or not isinstance(content, str):
            texts.append(render_prompt(content, tokenizer if config.chat_template else None))
        else:
            texts.append(content)
    return texts


def step_rows(step: int, batch_size: int, pool: int, seed: int) -> list[int]:
    """The prompt indices of one step: a fresh seeded permutation per pass over the pool."""
    rows = []
    for k in range(step * batch_size, (step + 1) * batch_size):
        epoch, position = divmod(k, pool)
        order = torch.randperm(pool, generator=torch.Generator().manual_seed(seed * 7919 + epoch))
        rows.append(int(order[position]))
    return rows


def row_generators(seed: int, step: int, rows: list[int], salt: int = 0) -> list[torch.Generator]:
    """One generator per sampled row, seeded by (seed, step, row): independent of batching."""
    return [
        torch.Generator().manual_seed(((seed * 1_000_003 + step) * 65_537 + row) * 31 + salt)
        for row in rows
    ]


def tokenize(tokenizer, texts: list[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def decode(tokenizer, tokens: torch.Tensor, mask: torch.Tensor) -> list[str]:
    return [
        tokenizer.decode(row[m.bool()].tolist(), skip_special_tokens=True)
        for row, m in zip(tokens, mask, strict=True)
    ]


def build_optimizer(config: OnlineConfig, params) -> torch.optim.Optimizer:
    if config.optimizer == "lion":
        from nlhf.train.lion import Lion

        return Lion(params, lr=config.lr, weight_decay=config.weight_decay)
    params = list(params)
    # torch's fused AdamW (one kernel over all tensors; 1.8 ms instead of 5.5 ms per step for
    # 3.7M parameters on 2 CPU cores), except for parameters sharded by FSDP
    fused = len(sharding.replicated(params)) == len(params)
    return torch.optim.AdamW(
        params, lr=config.lr, weight_decay=config.weight_decay, fused=fused or None
    )


def lr_factor(config: OnlineConfig, elapsed: Callable[[], float] | None = None):
    """The learning-rate multiplier of each step; with ``config.time_limit`` and ``elapsed``
    (seconds trained so far) the decay follows the time budget instead of the step count."""
    limit = getattr(config, "time_limit", 0.0) * 60.0

    def factor(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        if config.schedule == "constant":
            return 1.0
        if limit and elapsed is not None:
            progress = elapsed() / limit
        else:
            progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
        if config.schedule == "linear":
            return max(0.0, 1.0 - progress)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


class NoLog:
    """What processes other than the main one log: nothing."""

    def write(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def close(self) -> None:
        pass


def check_finite(step: int, loss: torch.Tensor, metrics: dict[str, float]) -> str | None:
    """The name of the first non-finite quantity, or None."""
    if not torch.isfinite(loss).all():
        return "loss"
    for key, value in metrics.items():
        if not math.isfinite(value):
            return key
    return None


# --------------------------------------------------------------------------- the loop


class NonFiniteError(FloatingPointError):
    """A NaN/inf in a named quantity at a step."""

    def __init__(self, quantity: str, step: int | None = None) -> None:
        self.quantity, self.step = quantity, step
        where = f"step {step}: " if step is not None else ""
        super().__init__(f"{where}{quantity} is not finite")


class Trainer:
    """Holds the policy, judge, optimizer and prompts; runs an :class:`Algorithm`."""

    def __init__(
        self, config: OnlineConfig, policy=None, judge=None, prompts=None, accelerator=None
    ) -> None:
        self.config = config
        self.procs = Processes(accelerator)
        self.accelerator = self.procs.accelerator
        if config.batch_size % (self.procs.count * config.grad_accum):
            raise ValueError(
                f"batch_size ({config.batch_size}) must be a multiple of the number of "
                f"processes ({self.procs.count}) × grad_accum ({config.grad_accum})"
            )
        sharding.check_processes(config.fsdp, self.procs.count)
        torch.manual_seed(config.seed)
        self.policy = policy if policy is not None else load_policy(config)
        if self.policy.device != self.procs.device:
            self.policy.to(self.procs.device)
        if config.fsdp:
            self.procs.broadcast_parameters(self.policy.trainable_parameters())
            sharding.shard_policy(self.policy)
        if judge is None:
            from nlhf.models.judges import load_judge

            judge = load_judge(config.judge)
        self.judge = judge
        self.prompts = (
            prompts if prompts is not None else load_prompt_texts(config, self.policy.tokenizer)
        )
        if not self.prompts:
            raise ValueError(f"{config.prompts}: no prompts")
        self.params = self.policy.trainable_parameters()
        self.optimizer = build_optimizer(config, self.params)
        self.elapsed = 0.0  # seconds of training steps so far, resumed runs included
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_factor(config, lambda: self.elapsed)
        )
        self.out = Path(config.out)
        self.checkpoints = Checkpointer(self.out / "checkpoints")
        self.steps_done = 0  # the step reached when run() returned

    def batches(self, step: int) -> list[PromptBatch]:
        """This process's share of the step's prompts, in ``grad_accum`` chunks."""
        cfg = self.config
        rows = step_rows(step, cfg.batch_size, len(self.prompts), cfg.seed)
        first = step * cfg.batch_size
        numbered = self.procs.share(list(enumerate(rows, start=first)))
        chunk = len(numbered) // cfg.grad_accum
        out = []
        for start in range(0, len(numbered), chunk):
            part = numbered[start : start + chunk]
            texts = [self.prompts[r] for _, r in part]
            ids, mask = tokenize(self.policy.tokenizer, texts, self.policy.device)
            out.append(PromptBatch(texts, ids, mask, [n for n, _ in part]))
        return out

    def save_checkpoint(self, step: int, algorithm: Algorithm) -> None:
        """The main process writes the checkpoint; the others wait until it is complete."""
        main, fsdp = self.procs.is_main, self.config.fsdp
        # sharded: gathering the weights (the algorithm's too) is a collective
        weights = sharding.checkpoint_weights(self.policy.model, self.optimizer, fsdp, main)
        algorithm_state = algorithm.state_dict() if main or fsdp else {}
        if main:
            self.checkpoints.save(
                step,
                {
                    **weights,
                    "scheduler": self.scheduler.state_dict(),
                    "algorithm": algorithm_state,
                    "config": to_dict(self.config),
                    "elapsed": self.elapsed,
                },
            )
        self.procs.barrier()

    def restore(self, algorithm: Algorithm) -> int:
        state = self.checkpoints.load_latest() if self.config.resume else None
        if state is None:
            return 0
        sharding.restore_weights(self.policy.model, self.optimizer, state)
        self.scheduler.load_state_dict(state["scheduler"])
        algorithm.load_state_dict(state["algorithm"])
        self.elapsed = float(state.get("elapsed", 0.0))
        return int(state["step"])

    def say(self, *args: Any) -> None:
        """``print`` on the main process only."""
        if self.procs.is_main:
            print(*args)

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate ``loss``, already scaled by this process's share of the update."""
        self.accelerator.backward(loss)

    def clip_and_step(self, params=None, optimizer=None) -> float:
        """Sum the gradients over the processes, clip their norm, check it, take the
        optimizer step; returns the norm (before clipping)."""
        params = self.params if params is None else params
        optimizer = self.optimizer if optimizer is None else optimizer
        # sharded: FSDP has summed the sharded parameters' gradients, not a head's beside them
        self.procs.sync_gradients(sharding.replicated(params) if self.config.fsdp else params)
        limit = self.config.grad_clip if self.config.grad_clip > 0 else float("inf")
        norm = float(sharding.whole(self.accelerator.clip_grad_norm_(params, limit)))
        if not math.isfinite(norm):
            raise NonFiniteError("grad_norm")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm

    def accumulate(self, loss_fn, chunks: list[PromptBatch], step: int) -> dict[str, float]:
        """Backpropagate ``loss_fn(batch) -> (loss, metrics)`` of every chunk, each loss a mean
        over its rows scaled by the chunk's share of the global batch; returns the metrics
        averaged over the chunks of every process.  A NaN/inf anywhere (in the loss, a
        metric, or a :class:`NonFiniteError` raised by ``loss_fn``) raises
        :class:`NonFiniteError` in every process, agreed before each backward pass: under
        ``fsdp`` a backward pass is a collective that no process may skip alone."""
        share = len(chunks) * self.procs.count
        totals: dict[str, float] = {}
        for batch in chunks:
            try:
                loss, metrics = loss_fn(batch)
                bad = check_finite(step, loss, metrics)
            except NonFiniteError as exc:
                bad = exc.quantity
            bad = self.procs.agree(bad)
            if bad:
                raise NonFiniteError(bad, step)
            self.backward(loss / share)
            for key, value in {"loss": loss.item(), **metrics}.items():
                totals[key] = totals.get(key, 0.0) + value / len(chunks)
        return self.procs.mean_metrics(totals)

    def gradient_step(self, algorithm: Algorithm, chunks: list[PromptBatch], step: int) -> dict:
        """The default update: one loss per chunk, gradients accumulated, one optimizer step."""
        self.optimizer.zero_grad(set_to_none=True)
        totals = self.accumulate(lambda batch: algorithm.loss(batch, step), chunks, step)
        try:
            totals["grad_norm"] = self.clip_and_step()
        except NonFiniteError as exc:
            raise NonFiniteError(exc.quantity, step) from None
        return totals

    def run(self, algorithm: Algorithm, name: str) -> dict[str, Any]:
        cfg = self.config
        main = self.procs.is_main
        start = self.restore(algorithm)
        self.procs.broadcast_parameters(self.params)  # identical start even if inits differ
        if start and main:
            print(f"resuming from step {start} of {cfg.steps} ({self.checkpoints.folder})")
        log: MetricsLog | NoLog = NoLog()
        if main:
            log = MetricsLog(
                self.out,
                cfg.tensorboard,
                start,
                cfg.report_to,
                cfg.project,
                {"algorithm": name, **to_dict(cfg)},
            )
            atomic_write_json(
                self.out / "config.json",
                {"algorithm": name, **to_dict(cfg), "processes": self.procs.count},
            )
        limit = cfg.time_limit * 60.0
        bar = tqdm(  # a time-limited run counts seconds, any other one steps
            total=round(limit) if limit else cfg.steps,
            initial=round(min(self.elapsed, limit)) if limit else start,
            desc=name,
            unit="s" if limit else "step",
            disable=not (cfg.progress and main),
        )
        last: dict[str, float] = {}
        self.steps_done = start
        for step in range(start, cfg.steps):
            if limit and self.procs.agree("time" if self.elapsed >= limit else None):
                if main:
                    print(
                        f"{name}: time limit of {cfg.time_limit:g} min reached after {step} steps"
                    )
                break
            t0 = time.perf_counter()
            chunks = self.batches(step)
            update = getattr(algorithm, "update", None)
            try:
                totals = (
                    update(chunks, step) if update else self.gradient_step(algorithm, chunks, step)
                )
            except NonFiniteError as exc:
                if cfg.on_nonfinite == "stop":
                    log.close()
                    raise FloatingPointError(
                        f"{exc} (on_nonfinite=skip would skip the update)"
                    ) from None
                if main:
                    print(f"{exc}; update skipped")
                self.optimizer.zero_grad(set_to_none=True)
                totals = {"skipped": 1.0}
            self.scheduler.step()
            totals["lr"] = self.scheduler.get_last_lr()[0]
            seconds = time.perf_counter() - t0
            # the slowest process's time: every process then decays its learning rate over
            # the time budget by the same amount, and the copies of the model stay equal
            totals["step_seconds"] = max(self.procs.objects([seconds]))
            log.write(step + 1, totals)
            last = totals
            self.elapsed += totals["step_seconds"]
            if limit:
                bar.update(round(min(self.elapsed, limit)) - bar.n)
            else:
                bar.update(1)
            bar.set_postfix(
                {"step": step + 1}
                | {
                    k: f"{v:.3g}"
                    for k, v in totals.items()
                    if k in ("loss", "win_rate", "kl", "reward")
                }
            )
            self.steps_done = step + 1
            if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
                self.save_checkpoint(step + 1, algorithm)
        bar.close()
        log.close()
        whole_model = sharding.saved_state(self.policy, main) if cfg.fsdp else None
        if main:
            write_folder_atomically(
                lambda folder: self.policy.save(folder, whole_model), self.out / "policy"
            )
        self.procs.barrier()
        return last


def summary(name: str, steps: int, last: dict[str, float]) -> str:
    """The line a trainer prints when it is done: steps run and the last step's metrics."""
    return f"{name}: {steps} steps; last step: " + ", ".join(
        f"{k} {v:.4g}" for k, v in last.items()
    )


def train_and_report(config: OnlineConfig, algorithm, name: str) -> int:
    """``nlhf train <name>``: build the trainer, run ``algorithm(trainer, config)``, say where
    the policy went."""
    trainer = Trainer(config)
    last = trainer.run(algorithm(trainer, config), name)
    trainer.say(f"{summary(name, trainer.steps_done, last)}\npolicy saved to {config.out}/policy")
    return 0
