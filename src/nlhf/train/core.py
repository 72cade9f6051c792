"""The one training loop under every trainer: a batch source and an algorithm → steps.

    trainer = Trainer(config, policy, steps=100, batches=source)   # source(step) -> chunks
    last = trainer.run(MyAlgorithm(trainer, config), "my-algorithm")

Online trainers draw prompts, offline and judge trainers a fixed data set; a policy is anything
with trainable parameters that can be saved (a causal LM, a judge, a gymnasium policy).  Each
step (:meth:`Trainer.run`):

1. ``batches(step)``: this process's chunks of the step's global batch, each with its
   ``weight`` (its share of the batch; the weights of every process's chunks sum to 1);
2. ``algorithm.update(chunks, step) -> metrics``: by default one gradient step on the
   algorithm's ``loss`` (:meth:`Trainer.gradient_step`: every process runs the same forwards and
   backwards, a NaN/inf is agreed on before each backward pass, gradients are summed over the
   processes, clipped, one optimizer step), or the trainer's other ``step_rule``
   (:meth:`Trainer.step`: EGPO's extragradient, ONPO's optimistic step);
3. the learning-rate schedule, ``metrics.jsonl`` + TensorBoard + trackers, the progress bar,
   a checkpoint every ``checkpoint_every`` steps (resumed by the same command);
4. at the end the policy is saved to ``<out>/<save_as>``, written to a temp folder and renamed.

Several processes and sharding: ``docs/distributed.md``; the trainers: ``docs/trainers.md``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, get_args

import torch
from torch import nn
from tqdm.auto import tqdm

from nlhf.config import Checked, ConfigError, option, to_dict
from nlhf.files import atomic_write_json, check_folder_option, write_folder_atomically
from nlhf.train import sharding
from nlhf.train.checkpoint import FIX, Checkpointer, CheckpointError, check_fits
from nlhf.train.distributed import Processes
from nlhf.train.metrics_log import MetricsLog, NoLog, check_finite, check_tracker_names
from nlhf.train.optim import OptimizerName, ScheduleName, build_optimizer, lr_factor, parameters_of

SHOWN = ("loss", "win_rate", "kl", "reward", "reward_accuracy", "accuracy")
"""Metrics the progress bar shows when a step logs them."""

StepRule = Literal["plain", "extragradient", "optimistic"]


@dataclass
class TrainFields(Checked):
    """The options of the loop itself, shared by every trainer."""

    optimizer: OptimizerName = option(
        "adamw", "optimizer: adamw, lion, or graft (Lion's direction with AdamW's step size)"
    )
    lr: float = option(1e-3, "learning rate")
    weight_decay: float = option(0.0, "decoupled weight decay")
    schedule: ScheduleName = option(
        "constant",
        "learning-rate schedule after warm-up: linear and cosine decay over the steps (or over "
        "the minutes of time_limit where a trainer has one)",
    )
    warmup_steps: int = option(0, "steps of linear learning-rate warm-up")
    grad_clip: float = option(1.0, "clip the gradient norm to this value (0: off)")
    seed: int = option(0, "seed for data order, sampling and initialization")
    out: str = option("runs/train", "output folder: metrics.jsonl, checkpoints/, the model")
    checkpoint_every: int = option(25, "save a resumable checkpoint every this many steps")
    keep_checkpoints: int = option(
        2, "checkpoints kept, the newest (more: points along the run for nlhf eval --frontier)"
    )
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

    def check(self) -> None:
        check_tracker_names(self.report_to)
        check_folder_option("out", self.out)
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr}")
        self.at_least(1, "checkpoint_every", "keep_checkpoints")
        self.at_least(0, "warmup_steps")


class Trainable(Protocol):
    """What the loop trains: ``model``'s trainable parameters, checkpointed by name."""

    model: nn.Module

    @property
    def device(self) -> torch.device: ...

    def to(self, device: torch.device) -> Any: ...

    def trainable_parameters(self) -> list[Any]:
        """Parameters, or param groups (dicts with ``params`` and maybe their own ``lr``)."""
        ...

    def save(self, folder: Path, state_dict: dict[str, torch.Tensor] | None = None) -> Any: ...


class Module:
    """Any ``nn.Module`` as a :class:`Trainable`: every parameter that requires a gradient is
    trained, those whose names contain one of ``head_names`` with their own ``head_lr``."""

    def __init__(
        self,
        model: nn.Module,
        save: Callable[[Path], Any],
        head_names: Sequence[str] = (),
        head_lr: float | None = None,
    ) -> None:
        self.model, self._save = model, save
        self.head_names, self.head_lr = tuple(head_names), head_lr

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: torch.device) -> Module:
        self.model.to(device)
        return self

    def trainable_parameters(self) -> list[Any]:
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        heads = [p for n, p in named if any(h in n for h in self.head_names)]
        body = [p for n, p in named if not any(h in n for h in self.head_names)]
        if not heads:
            return body
        return [{"params": body}, {"params": heads, "lr": self.head_lr}]

    def save(self, folder: Path, state_dict: dict[str, torch.Tensor] | None = None) -> Any:
        return self._save(folder)


class NonFiniteError(FloatingPointError):
    """A NaN/inf in a named quantity; the loop names the step (as in ``metrics.jsonl``)."""

    def __init__(self, quantity: str) -> None:
        self.quantity = quantity
        super().__init__(f"{quantity} is not finite")


class Algorithm:
    """One step of a method: ``update(chunks, step) -> metrics``.

    The default update takes one gradient step on ``loss(chunk, step) -> (loss, metrics)``, the
    loss a mean over the chunk; a method that needs more (PPO's epochs, Nash-MP's two phases, an
    average of the weights) overrides ``update`` and calls the trainer's steps itself.  State
    that must survive a resume goes in ``state_dict``.
    """

    finished = ""
    """Set by ``update`` to end the run early (the reason, said when it stops), e.g. a
    control run that reached its target return."""

    step_rules: ClassVar[tuple[StepRule, ...]] = get_args(StepRule)
    """The trainer's step rules the method can run under (:meth:`Trainer.step`)."""

    def __init__(self, trainer: Trainer, config: Any) -> None:
        if trainer.step_rule not in self.step_rules:
            raise ConfigError(
                f"step_rule={trainer.step_rule}: {type(self).__name__} takes "
                f"{' or '.join(self.step_rules)} only"
            )
        self.trainer, self.config = trainer, config

    def loss(self, chunk: Any, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError(f"{type(self).__name__} defines neither loss nor update")

    def update(self, chunks: list[Any], step: int) -> dict[str, float]:
        return self.trainer.step(lambda chunk: self.loss(chunk, step), chunks)

    def before_training(self) -> None:
        """Called once per run after the checkpoint is restored, before the first step."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def weighted_mean(rows: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """Σ w·m / Σ w of every key, over (weight, metrics) rows (rows of weight 0 dropped)."""
    rows = [(w, m) for w, m in rows if w > 0]
    total = sum(w for w, _ in rows)
    keys = list(dict.fromkeys(k for _, m in rows for k in m))
    return {k: sum(w * m[k] for w, m in rows if k in m) / total for k in keys}


class Trainer:
    """The loop: holds the policy, the optimizer, the schedule and the processes."""

    def __init__(
        self,
        config: TrainFields,
        policy: Trainable,
        steps: int,
        batches: Callable[[int], list[Any]],
        *,
        judge: Any = None,
        procs: Processes | None = None,
        time_limit: float = 0.0,
        fsdp: bool = False,
        save_as: str = "policy",
        step_rule: StepRule = "plain",
        record: dict[str, Any] | None = None,
    ) -> None:
        self.config, self.steps, self.batches, self.judge = config, steps, batches, judge
        self.procs = procs if procs is not None else Processes()
        self.accelerator = self.procs.accelerator
        self.time_limit, self.fsdp, self.save_as = time_limit, fsdp, save_as
        self.step_rule = step_rule
        self.record = record or {}  # config.json's entries beside the config
        sharding.check_processes(fsdp, self.procs.count)
        self.policy = policy
        if policy.device != self.procs.device:
            policy.to(self.procs.device)
        if fsdp:
            self.procs.broadcast_parameters(parameters_of(policy.trainable_parameters()))
            sharding.shard_policy(policy)
        self.groups = policy.trainable_parameters()
        self.elapsed = 0.0  # seconds of training steps so far, resumed runs included
        self._build_optimizer()
        self.out = Path(config.out)
        self.checkpoints = Checkpointer(self.out / "checkpoints", config.keep_checkpoints)
        self.steps_done = 0  # the step reached when run() returned
        self.last_gradient: list[torch.Tensor] | None = None  # optimism's prediction

    def _build_optimizer(self) -> None:
        cfg = self.config
        self.params = parameters_of(self.groups)
        self.optimizer = build_optimizer(cfg.optimizer, self.groups, cfg.lr, cfg.weight_decay)
        factor = lr_factor(
            self.steps, cfg.warmup_steps, cfg.schedule, self.time_limit, lambda: self.elapsed
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor)

    def add_parameters(self, module: nn.Module) -> None:
        """Train ``module`` (a head beside the policy) with the policy: one optimizer, one
        schedule, one clip; checkpointed with the optimizer state.  Call before :meth:`run`;
        the module's weights themselves belong in the algorithm's ``state_dict``."""
        groups = self.groups if isinstance(self.groups[0], dict) else [{"params": self.groups}]
        self.groups = [*groups, {"params": list(module.parameters())}]
        self._build_optimizer()

    def say(self, *args: Any) -> None:
        """``print`` on the main process only."""
        if self.procs.is_main:
            print(*args)

    # ------------------------------------------------------------------ one step
    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate ``loss``, already weighted by its share of the update."""
        self.accelerator.backward(loss)

    def clip_and_step(self, keep: bool = False) -> float:
        """Sum the gradients over the processes, clip their norm, check it, take the
        optimizer step; returns the norm (before clipping).  ``keep`` stores the summed,
        clipped gradient as :attr:`last_gradient`."""
        # sharded: FSDP has summed the sharded parameters' gradients, not a head's beside them
        self.procs.sync_gradients(sharding.replicated(self.params) if self.fsdp else self.params)
        limit = self.config.grad_clip if self.config.grad_clip > 0 else float("inf")
        norm = float(sharding.whole(self.accelerator.clip_grad_norm_(self.params, limit)))
        if not math.isfinite(norm):
            raise NonFiniteError("grad_norm")
        if keep:
            self.last_gradient = [
                torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                for p in self.params
            ]
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def accumulate(
        self, loss_fn: Callable[[Any], tuple[torch.Tensor, dict[str, float]]], chunks: list[Any]
    ) -> dict[str, float]:
        """Backpropagate ``loss_fn(chunk)`` of every chunk weighted by ``chunk.weight``; returns
        the metrics as weighted means over every process's chunks.

        Every process runs the same forwards and backwards (under ``fsdp`` each one is a
        collective): a process with fewer chunks repeats its last one with weight 0, and a
        NaN/inf anywhere (the loss, a metric, a :class:`NonFiniteError` raised by ``loss_fn``)
        is agreed on before each backward pass, so all processes raise together."""
        most = max(self.procs.objects([len(chunks)]))
        if self.fsdp and len(chunks) < most:
            if not chunks:
                raise ValueError("under fsdp every process needs a chunk (weight 0 if empty)")
            chunks = chunks + [replace(chunks[-1], weight=0.0)] * (most - len(chunks))
        rows = []
        for i in range(most):
            loss, bad = None, None
            if i < len(chunks):  # else: nothing left here, but the others agree on theirs
                try:
                    loss, metrics = loss_fn(chunks[i])
                    bad = check_finite(loss, metrics)
                except NonFiniteError as exc:
                    bad = exc.quantity
            bad = self.procs.agree(bad)
            if bad:
                raise NonFiniteError(bad)
            if loss is not None:
                self.backward(loss * chunks[i].weight)
                rows.append((chunks[i].weight, {"loss": float(loss.detach()), **metrics}))
        return weighted_mean(self.procs.objects(rows))

    def gradient_step(
        self, loss_fn: Callable[[Any], tuple[torch.Tensor, dict[str, float]]], chunks: list[Any]
    ) -> dict[str, float]:
        """One optimizer step on the chunks' weighted losses; their metrics and ``grad_norm``."""
        self.optimizer.zero_grad(set_to_none=True)
        metrics = self.accumulate(loss_fn, chunks)
        metrics["grad_norm"] = self.clip_and_step()
        return metrics

    def step(
        self, loss_fn: Callable[[Any], tuple[torch.Tensor, dict[str, float]]], chunks: list[Any]
    ) -> dict[str, float]:
        """One update under the trainer's ``step_rule``: :meth:`gradient_step` (plain),
        :meth:`extragradient_step` or :meth:`optimistic_step`."""
        if self.step_rule == "extragradient":
            return self.extragradient_step(loss_fn, chunks)
        if self.step_rule == "optimistic":
            return self.optimistic_step(loss_fn, chunks)
        return self.gradient_step(loss_fn, chunks)

    def extragradient_step(
        self, loss_fn: Callable[[Any], tuple[torch.Tensor, dict[str, float]]], chunks: list[Any]
    ) -> dict[str, float]:
        """The extragradient update (EGPO, Zhou et al. 2025): a look-ahead step θ → θ½ with
        the gradient at θ, then the weights and the optimizer state put back to θ and one step
        from there with the gradient at θ½ (the losses at θ½ sample and judge afresh).  The
        metrics are those of θ½, ``grad_norm`` the norm of its gradient."""
        if self.fsdp:
            raise ValueError("extragradient does not run with fsdp=true yet")
        saved = [p.detach().clone() for p in self.params]
        saved_optimizer = copy.deepcopy(self.optimizer.state_dict())
        self.gradient_step(loss_fn, chunks)  # θ → θ½
        metrics = self.accumulate(loss_fn, chunks)  # the gradient at θ½
        with torch.no_grad():
            for p, value in zip(self.params, saved, strict=True):
                p.copy_(value)
        self.optimizer.load_state_dict(saved_optimizer)
        metrics["grad_norm"] = self.clip_and_step()
        return metrics

    def optimistic_step(
        self, loss_fn: Callable[[Any], tuple[torch.Tensor, dict[str, float]]], chunks: list[Any]
    ) -> dict[str, float]:
        """Optimism (ONPO, Zhang et al. 2025; Popov's past extragradient): a predictor step
        θ → θ̂ along the previous step's gradient (no samples, no judge), the step's losses
        sampled and judged at θ̂, then the weights and the optimizer state put back to θ and
        one step from there with that gradient; one gradient per step, as plain steps.  The
        first step has no prediction and is a plain one."""
        if self.fsdp:
            raise ValueError("optimistic does not run with fsdp=true yet")
        self.optimizer.zero_grad(set_to_none=True)
        if self.last_gradient is None:
            metrics = self.accumulate(loss_fn, chunks)
            metrics["grad_norm"] = self.clip_and_step(keep=True)
            return metrics
        saved = [p.detach().clone() for p in self.params]
        saved_optimizer = copy.deepcopy(self.optimizer.state_dict())
        for p, g in zip(self.params, self.last_gradient, strict=True):
            p.grad = g.to(p.device, copy=True)
        self.optimizer.step()  # θ → θ̂ (the stored gradient is already summed and clipped)
        self.optimizer.zero_grad(set_to_none=True)
        metrics = self.accumulate(loss_fn, chunks)  # the gradient at θ̂
        with torch.no_grad():
            for p, value in zip(self.params, saved, strict=True):
                p.copy_(value)
        self.optimizer.load_state_dict(saved_optimizer)
        metrics["grad_norm"] = self.clip_and_step(keep=True)
        return metrics

    # ------------------------------------------------------------------ hooks
    def after_step(self, step: int) -> None:
        """Called after step ``step`` (1-based) and before its checkpoint (a subclass may
        change what the algorithm uses, e.g. reset the reference)."""

    def extra_state(self) -> dict[str, Any]:
        """What a subclass's :meth:`after_step` changed, for the checkpoint."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, step: int, algorithm: Algorithm) -> None:
        """The main process writes the checkpoint; the others wait until it is complete."""
        main = self.procs.is_main
        # sharded: gathering the weights (the algorithm's too) is a collective
        weights = sharding.checkpoint_weights(self.policy.model, self.optimizer, self.fsdp, main)
        algorithm_state = algorithm.state_dict() if main or self.fsdp else {}
        if main:
            self.checkpoints.save(
                step,
                {
                    **weights,
                    "scheduler": self.scheduler.state_dict(),
                    "algorithm": algorithm_state,
                    "trainer": self.extra_state(),
                    "last_gradient": self.last_gradient,
                    "config": to_dict(self.config),
                    "elapsed": self.elapsed,
                },
            )
        self.procs.barrier()

    def restore(self, algorithm: Algorithm) -> int:
        """Load the latest checkpoint (when ``resume``); the step to start from."""
        state = self.checkpoints.load_latest() if self.config.resume else None
        if state is None:
            return 0
        folder = self.checkpoints.folder
        check_fits(folder, state["trainable"], self.policy.model)
        try:
            sharding.restore_weights(self.policy.model, self.optimizer, state)
        except ValueError as exc:  # torch: the optimizer's parameter groups differ
            raise CheckpointError(
                f"{folder}: the checkpoint's optimizer state does not fit this run ({exc}); {FIX}"
            ) from None
        self.scheduler.load_state_dict(state["scheduler"])
        algorithm.load_state_dict(state["algorithm"])
        self.load_extra_state(state.get("trainer", {}))
        self.last_gradient = state.get("last_gradient")
        self.elapsed = float(state.get("elapsed", 0.0))
        return int(state["step"])

    # ------------------------------------------------------------------ the loop
    def run(self, algorithm: Algorithm, name: str) -> dict[str, float]:
        """Train to ``steps`` (or the time limit); save the policy; the last step's metrics."""
        cfg, procs, main = self.config, self.procs, self.procs.is_main
        start = self.restore(algorithm)
        procs.broadcast_parameters(self.params)  # identical start even if inits differ
        if start and main:
            print(f"resuming from step {start} of {self.steps} ({self.checkpoints.folder})")
        algorithm.before_training()
        log: MetricsLog | NoLog = NoLog()
        if main:
            run_config = {"algorithm": name, **to_dict(cfg), "processes": procs.count}
            run_config |= self.record
            log = MetricsLog(
                self.out, cfg.tensorboard, start, cfg.report_to, cfg.project, run_config
            )
            atomic_write_json(self.out / "config.json", run_config)
        limit = self.time_limit * 60.0
        bar = tqdm(  # a time-limited run counts seconds, any other one steps
            total=round(limit) if limit else self.steps,
            initial=round(min(self.elapsed, limit)) if limit else start,
            desc=name,
            unit="s" if limit else "step",
            disable=not (cfg.progress and main),
        )
        last: dict[str, float] = {}
        self.steps_done = start
        for step in range(start, self.steps):
            if limit and procs.agree("time" if self.elapsed >= limit else None):
                self.say(
                    f"{name}: time limit of {self.time_limit:g} min reached after {step} steps"
                )
                break
            t0 = time.perf_counter()
            # 1. this process's chunks; 2. the algorithm's update
            chunks = self.batches(step)
            try:
                metrics = algorithm.update(chunks, step)
            except NonFiniteError as exc:
                message = f"step {step + 1}: {exc}"
                if cfg.on_nonfinite == "stop":
                    bar.close()
                    log.close()
                    raise FloatingPointError(
                        f"{message} (on_nonfinite=skip would skip the update)"
                    ) from None
                self.say(f"{message}; update skipped")
                self.optimizer.zero_grad(set_to_none=True)
                metrics = {"skipped": 1.0}
            # 3. schedule, metrics, checkpoint
            self.scheduler.step()
            metrics["lr"] = self.scheduler.get_last_lr()[0]
            # the slowest process's time: every process then decays its learning rate over
            # the time budget by the same amount, and the copies of the model stay equal
            metrics["step_seconds"] = max(procs.objects([time.perf_counter() - t0]))
            log.write(step + 1, metrics)
            last = metrics
            self.elapsed += metrics["step_seconds"]
            bar.update(round(min(self.elapsed, limit)) - bar.n if limit else 1)
            shown = {k: f"{v:.3g}" for k, v in metrics.items() if k in SHOWN}
            bar.set_postfix({"step": step + 1} | shown)
            self.steps_done = step + 1
            self.after_step(step + 1)
            if algorithm.finished:
                self.say(f"{name}: {algorithm.finished} after {step + 1} steps")
                break
            if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < self.steps:
                self.save_checkpoint(step + 1, algorithm)
        bar.close()
        log.close()
        # 4. the trained policy
        whole_model = sharding.saved_state(self.policy, main) if self.fsdp else None
        if main:
            write_folder_atomically(
                lambda folder: self.policy.save(folder, whole_model), self.out / self.save_as
            )
        procs.barrier()
        return last


def summary(name: str, steps: int, last: dict[str, float]) -> str:
    """The line a trainer prints when it is done: steps run and the last step's metrics."""
    return f"{name}: {steps} steps; last step: " + ", ".join(
        f"{k} {v:.4g}" for k, v in last.items()
    )
