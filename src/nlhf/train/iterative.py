"""The batched-iterative regime of the K-sample trainers (SPPO, INPO, ONPO, DNO).

    nlhf train sppo iteration_steps=8 iteration_epochs=2     # 8 steps' prompts per iteration

Fully online (``iteration_steps=0``, the default), every step samples its prompts' K
completions from the current policy, judges them and takes one gradient step.  Batched-
iterative, the regime the papers' published numbers come from, every iteration:

1. freezes π_t (the policy as the iteration starts) and, for the prompts of
   ``iteration_steps`` steps, samples the K completions and judges them (:meth:`prepare`);
2. takes ``iteration_epochs`` passes over those prepared batches, one gradient step each, in
   a seeded order per pass; every loss keeps π_t as its anchor (the log-probs of sampling);
3. repeats with the policy reached.  ``steps`` counts gradient steps, so an iteration is
   ``iteration_steps × iteration_epochs`` of them.  The prepared batches are checkpointed, so a
   run stopped inside an iteration resumes on the same data.

An algorithm opts in by splitting its ``loss`` into ``prepare(batch, step) -> dict`` (no
gradient: sampling and judging) and ``objective(Prepared) -> (loss, metrics)``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from nlhf.config import Checked, option
from nlhf.train.core import Algorithm

SETUP = ("sample_seconds", "judge_seconds")
"""Metrics of the preparation: logged on the step that prepared, 0 on the steps reusing it."""


@dataclass
class Prepared:
    """One chunk's prompts and what ``prepare`` made of them; ``weight`` as the chunk's."""

    batch: Any
    data: dict[str, Any]
    weight: float = 1.0


@dataclass
class IterationFields(Checked):
    """The regime: fully online, or batched iterations against a frozen π_t."""

    iteration_steps: int = option(
        0,
        "batched-iterative regime: each iteration samples and judges the prompts of this many "
        "steps with the policy frozen as π_t, then trains on them (0: fully online, a fresh "
        "sample every step; the papers: one iteration per pass over their prompt set)",
    )
    iteration_epochs: int = option(
        1, "passes over each iteration's prepared batches (batched-iterative regime only)"
    )

    def check(self) -> None:
        self.at_least(0, "iteration_steps")
        self.at_least(1, "iteration_epochs")


class IterativeAlgorithm(Algorithm):
    """An algorithm with ``prepare`` and ``objective``, run in either regime."""

    def __init__(self, trainer: Any, config: Any) -> None:
        super().__init__(trainer, config)
        self.iteration = -1  # the iteration whose batches are prepared
        self.prepared: dict[int, list[Any]] = {}  # prompt step → this process's batches

    def prepare(self, batch: Any, step: int) -> dict[str, Any]:
        raise NotImplementedError

    def objective(self, prepared: Prepared) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError

    def prepared_chunk(self, batch: Any, step: int) -> Prepared:
        return Prepared(batch, self.prepare(batch, step), batch.weight)

    def loss(self, batch: Any, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        return self.objective(self.prepared_chunk(batch, step))

    def prompt_step(self, step: int) -> tuple[int, int]:
        """(iteration, the prompt step whose batches gradient step ``step`` trains on)."""
        cfg = self.config
        m, epochs = cfg.iteration_steps, cfg.iteration_epochs
        iteration, within = divmod(step, m * epochs)
        epoch, position = divmod(within, m)
        seed = cfg.seed * 7919 + iteration * 104_729 + epoch
        order = torch.randperm(m, generator=torch.Generator().manual_seed(seed))
        return iteration, iteration * m + int(order[position])

    def update(self, chunks: list[Any], step: int) -> dict[str, float]:
        if not self.config.iteration_steps:
            return super().update(chunks, step)
        iteration, prompt_step = self.prompt_step(step)
        seconds = 0.0
        if iteration != self.iteration:  # 1. π_t frozen: sample and judge the iteration
            t0 = time.perf_counter()
            m = self.config.iteration_steps
            with torch.no_grad():
                self.prepared = {
                    p: [self.prepared_chunk(batch, p) for batch in self.trainer.batches(p)]
                    for p in range(iteration * m, (iteration + 1) * m)
                }
            self.iteration, seconds = iteration, time.perf_counter() - t0
        batches = self.prepared[prompt_step]  # 2. a gradient step on one prepared batch
        metrics = self.trainer.step(self.objective, batches)
        for key in SETUP:
            if key in metrics:
                metrics[key] = 0.0
        if seconds:
            metrics["sample_seconds"] = seconds  # the whole iteration's sampling and judging
        return metrics

    def state_dict(self) -> dict[str, Any]:
        if not self.config.iteration_steps:
            return {}
        return {"iteration": self.iteration, "prepared": self.prepared}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state.get("iteration", -1))
        self.prepared = state.get("prepared", {})
