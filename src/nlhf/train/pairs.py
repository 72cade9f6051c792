"""Training on a fixed data set (DPO, IPO, SFT, the reward and preference models): the data
options, the batch source and what these trainers add to the core loop.

    batches = EpochBatches(train, config, procs)              # batches(step) -> [Share]
    trainer = Trainer(config, policy, batches.steps, batches)
    result = train_and_evaluate(trainer, MyObjective(trainer, config, batches, held_out), "dpo")

1. the pairs of ``--data`` split into train and held-out, grouped by prompt, seeded;
2. each epoch a seeded permutation of the training examples, cut into batches in order; a
   process takes its contiguous share of each batch, weighted by its units (pairs, response
   tokens, pair weights) over the batch's;
3. held-out metrics before training (the policy trainers), every ``eval_every`` steps, and at
   the end, written to ``<out>/metrics.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlhf import data
from nlhf.config import Checked, ConfigError, option, to_dict
from nlhf.data.errors import DataError
from nlhf.data.loader import check_source
from nlhf.data.movie_reviews import review_pairs
from nlhf.files import atomic_write_json
from nlhf.train.core import Algorithm, Trainer
from nlhf.train.distributed import Processes

HELD_OUT = 0.2
"""The share of the pairs every trainer holds out for evaluation by default."""

DATA_SETS = ("hh", "imdb")
"""The pair sets that ``data`` names without a file."""


@dataclass
class DataFields(Checked):
    """Which pairs to train on, how many passes, and how to evaluate."""

    data: str = option(
        "hh",
        "preference pairs: hh (the packaged Anthropic HH harmless pairs), imdb (movie-reviews: "
        "a positive review ≻ a negative one), or a .jsonl/.csv file with prompt, chosen and "
        "rejected columns",
    )
    held_out: float = option(
        HELD_OUT, "fraction of the pairs held out for evaluation (grouped by prompt)"
    )
    max_pairs: int | None = option(None, "use at most this many pairs (none: all)")
    imdb_words: int = option(64, "imdb only: keep the first this many words of each review")
    skip_bad_rows: bool = option(False, "skip and count malformed rows instead of stopping")
    epochs: int = option(1, "passes over the training examples")
    max_steps: int | None = option(None, "stop after this many optimizer steps (none: epochs)")
    batch_size: int = option(8, "examples per optimizer step (across all processes)")
    eval_every: int = option(0, "evaluate on the held-out set every this many steps (0: at end)")
    eval_batch_size: int = option(16, "examples per forward during evaluation")

    def check(self) -> None:
        if not 0 < self.held_out < 1:
            raise ValueError(f"held_out must lie in (0, 1), got {self.held_out}")
        self.at_least(1, "epochs", "batch_size", "eval_batch_size")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be ≥ 1 or none, got {self.max_steps}")
        self.at_least(0, "eval_every")


# --------------------------------------------------------------------------- 1. data


def load_training_pairs(config: DataFields, seed: int) -> tuple[Any, Any]:
    """(train, held_out) PreferenceDatasets of ``config.data``, split by prompt."""
    check_source("data", config.data, DATA_SETS)
    if config.data == "hh":
        pairs = data.load_hh_harmless()
    elif config.data == "imdb":
        try:
            pairs = review_pairs(config.max_pairs, words=config.imdb_words, seed=seed)
        except ValueError as exc:  # too many pairs asked, or too few words
            options = f"max_pairs={config.max_pairs}, imdb_words={config.imdb_words}"
            raise ConfigError(f"data imdb ({options}): {exc}") from None
    else:
        pairs = data.load_pairs(config.data, skip_bad_rows=config.skip_bad_rows)
        if pairs.skipped:
            print(f"{config.data}: {pairs.skipped.summary()}")
    if config.max_pairs is not None and len(pairs) > config.max_pairs:
        pairs = pairs[: config.max_pairs]
    prompts = {json.dumps(p.to_dict()["prompt"], sort_keys=True) for p in pairs}
    try:
        return pairs.split(config.held_out, seed=seed, by_prompt=len(prompts) > 1)
    except ValueError as exc:  # too few pairs (or prompts) for both sides
        raise too_few(config.data, len(pairs), "pair", exc) from None


def too_few(source: str, n: int, what: str, detail: object = "") -> DataError:
    """The error for a data set too small to split into training and held-out examples."""
    why = f" ({detail})" if detail else ""
    return DataError(
        "no_rows",
        f"{n} {what}{'' if n == 1 else 's'}: too few to train on and hold some out{why}",
        source=source,
    )


def split_indices(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """A seeded (train, held-out) split of range(n) with round(fraction·n) held out (≥ 1)."""
    if n < 2:
        raise ValueError(f"{n} example(s): too few to hold any out for evaluation")
    held = min(max(1, round(fraction * n)), n - 1)
    order = np.random.default_rng([seed, 1]).permutation(n)
    return sorted(order[held:].tolist()), sorted(order[:held].tolist())


# --------------------------------------------------------------------------- 2. batches


def batch_order(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The batches of one epoch: a fresh seeded permutation of range(n), cut in order."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


@dataclass
class Share:
    """This process's share of one step's batch."""

    examples: list[Any]
    weight: float
    """Its units over the whole batch's (0: a stand-in row, see :class:`EpochBatches`)."""
    units: float
    """The whole batch's units, every process's together."""


class EpochBatches:
    """``batches(step)``: this process's :class:`Share` of the step's batch (see step 2).

    A process whose share is empty gets none, or under ``fsdp`` (where every process must run
    each forward) the batch's first example with weight 0.  ``units(example)`` is what an
    example counts for in the loss (default 1: a mean over the batch's examples)."""

    def __init__(
        self,
        examples: list[Any],
        config: DataFields,
        seed: int,
        procs: Processes,
        fsdp: bool = False,
        units: Callable[[Any], float] = lambda example: 1.0,
    ) -> None:
        if not examples:
            raise ValueError("no training examples")
        self.examples, self.config, self.seed, self.procs = examples, config, seed, procs
        self.fsdp, self.units = fsdp, units
        self.per_epoch = math.ceil(len(examples) / config.batch_size)
        steps = self.per_epoch * config.epochs
        self.steps = steps if config.max_steps is None else min(steps, config.max_steps)

    def epoch(self, step: int) -> float:
        """Epochs done after ``step`` (0-based), as a fraction."""
        epoch, position = divmod(step, self.per_epoch)
        return epoch + (position + 1) / self.per_epoch

    def __call__(self, step: int) -> list[Share]:
        epoch, position = divmod(step, self.per_epoch)
        order = batch_order(len(self.examples), self.config.batch_size, self.seed, epoch)
        batch = [self.examples[int(i)] for i in order[position]]
        units = [self.units(example) for example in batch]
        total = sum(units)
        mine = self.procs.split(list(range(len(batch))))
        if mine:
            weight = sum(units[i] for i in mine) / total
            return [Share([batch[i] for i in mine], weight, total)]
        return [Share(batch[:1], 0.0, total)] if self.fsdp else []


# --------------------------------------------------------------------------- 3. evaluation


def scalars(prefix: str, metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric entries of ``metrics``, renamed ``<prefix><key>``."""
    return {
        f"{prefix}{k}": float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


class Objective(Algorithm):
    """An algorithm on a fixed data set: one gradient step on ``loss`` per batch, plus the
    held-out evaluation (``evaluate``), before training when ``evaluate_first``."""

    evaluate_first = True

    def __init__(
        self, trainer: Trainer, config: Any, batches: EpochBatches, held_out: list[Any]
    ) -> None:
        super().__init__(trainer, config)
        if not held_out:
            raise ValueError("no held-out examples")
        self.batches, self.held_out = batches, held_out
        self.held_out_start: dict[str, Any] | None = None

    def evaluate(self) -> dict[str, Any]:
        raise NotImplementedError

    def before_training(self) -> None:
        if self.evaluate_first and self.held_out_start is None:
            self.held_out_start = self.evaluate()  # every process: the same result

    def update(self, chunks: list[Share], step: int) -> dict[str, float]:
        metrics = super().update(chunks, step)
        metrics["epoch"] = self.batches.epoch(step)
        every = self.config.eval_every
        if every and (step + 1) % every == 0 and step + 1 < self.batches.steps:
            metrics.update(scalars("eval_", self.evaluate()))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"held_out_start": self.held_out_start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.held_out_start = state["held_out_start"]


def train_and_evaluate(trainer: Trainer, objective: Objective, name: str) -> dict[str, Any]:
    """Run the trainer, evaluate the held-out set, write and return ``<out>/metrics.json``."""
    trainer.run(objective, name)
    result = {
        "algorithm": name,
        "config": to_dict(trainer.config),
        "train_examples": len(objective.batches.examples),
        "held_out_examples": len(objective.held_out),
        "steps": trainer.steps,
        **({"held_out_start": objective.held_out_start} if objective.evaluate_first else {}),
        "held_out": objective.evaluate(),
    }
    if trainer.procs.is_main:
        atomic_write_json(trainer.out / "metrics.json", result)
    trainer.procs.barrier()
    return result
