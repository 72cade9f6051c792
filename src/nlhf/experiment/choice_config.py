"""The options of ``nlhf experiment decoy`` and ``cycle``, their presets and their run folder.

Both commands share :class:`ChoiceConfig`: the forced choice (three options named A, B, C,
then ``other``), the annotators' noise, the reference and judges, and the sizes each preset
sets (options left at ``None`` take the preset's value).  :class:`DecoyConfig` adds the
voters' share w and the cells' decoy shares ρ; :class:`CycleConfig` the cells' quality
shares λ.  Every route of a cell trains for the same steps on the same prompts per step, so
on one comparison budget.  Each cell has its own folder per seed (:meth:`ChoiceLayout.cell`):
the labelled pairs, both judges and every route's policy and measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from nlhf.config import option
from nlhf.resumable import Presets, RunFolder, preset_option

ROUTES = ("ppo", "nash-md", "online-ipo", "ppo-exact", "nash-md-exact")
"""Every route a cell can train: against the learned reward model (PPO), against the learned
preference model (Nash-MD-PG, online IPO), then the exact-population controls."""

ROUTE_TITLES = {
    "ppo": "RLHF: PPO vs the learned reward model",
    "nash-md": "NLHF: Nash-MD-PG vs the learned preference model",
    "online-ipo": "NLHF: online IPO vs the learned preference model",
    "ppo-exact": "control: PPO vs the Bradley–Terry fit of the exact population",
    "nash-md-exact": "control: Nash-MD-PG vs the exact population",
}

RLHF_ROUTES = ("ppo", "ppo-exact")
"""The routes whose target is RLHF's (the others': the Nash equilibrium)."""


@dataclass
class ChoiceConfig(Presets):
    """The options both forced-choice experiments share."""

    out: str = option("", "run folder (empty: runs/<command>-<date>-<time>); existing: resume")
    quick: bool = option(False, "toy sizes (a few minutes): every stage runs; wide intervals")
    policy: str = option("smollm2", "reference policy: smollm2 (embedded), a folder or hub name")
    encoder: str = option("minilm", "encoder the judges start from: minilm (embedded), a folder")
    seed: int = option(0, "seed of the samples, labels, judges and training")
    seeds: int = option(
        1,
        "run every cell from this many seeds (seed, seed + 1, …), each with its own labels, "
        "judges and training; head-to-heads and worst cases bootstrap over the seeds' runs",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = option(
        "auto", "policy weights and the judges' autocast (auto: bfloat16 where the CPU has it)"
    )
    options: list[str] = option(
        ["blue", "green", "red"],
        "the answers A, B, C (A the Borda pick, B the Condorcet winner, C the decoy; in the "
        "cycle, 0 ≻ 1 ≻ 2 by quality): the reference's most frequent answer as A makes RLHF's "
        "pick the cheapest in KL",
    )
    noise: float = option(
        0.05, "annotator noise ε: each annotator reverses its ranking's preference this often"
    )
    other_share: float = option(
        0.1, "share of answers that name no single option among the judges' training pairs"
    )
    tau: float = option(
        0.02,
        "KL regularization τ of the Nash routes (online IPO's β); PPO's KL coefficient β is "
        "paired to it by equal KL of the type distribution, per cell",
    )
    nash_beta: float = option(0.125, "Nash-MD-PG mixture coefficient β (the paper's best value)")
    routes: list[str] = option(list(ROUTES), f"routes each cell trains: {', '.join(ROUTES)}")
    lora_r: int = option(8, "LoRA rank of the policies (adapters on every linear layer)")
    nash_lr: float = option(1e-3, "AdamW learning rate of Nash-MD-PG and online IPO")
    exact_kl: bool = option(
        False, "Nash-MD-PG's KL term from the exact KL over the vocabulary (nash-md exact_kl)"
    )
    ppo_lr: float = option(1e-4, "AdamW learning rate of PPO")
    ppo_epochs: int = option(2, "PPO: passes over each rollout (2 mini-batches each)")
    pm_rank: int = option(4, "rank of the preference model's skew-symmetric interaction")
    reference_samples: int | None = preset_option(
        "reference completions whose types estimate μ and that the judges' pairs are drawn from",
        default=1000,
        quick=200,
    )
    pairs: int | None = preset_option("labelled pairs per cell", default=2048, quick=128)
    judge_epochs: int | None = preset_option(
        "passes of each judge's trainer over its cell's pairs", default=2, quick=1
    )
    judge_head_lr: float = option(
        1e-2,
        "learning rate of both judges' freshly initialized heads (the trainers' default, "
        "1e-3, under-fits a cell's per-type label frequencies in two passes)",
    )
    steps: int | None = preset_option("training steps of every route", default=16, quick=3)
    batch_size: int | None = preset_option(
        "completions per training step (PPO's rollout, one pair per prompt for the Nash routes)",
        default=16,
        quick=8,
    )
    measure_samples: int | None = preset_option(
        "completions of each trained policy whose types are counted", default=1000, quick=100
    )
    max_new_tokens: int | None = preset_option(
        "tokens per completion everywhere", default=4, quick=3
    )
    judge_max_length: int | None = preset_option(
        "tokens per judged (prompt, completion), the prompt cut from the left: its end and the "
        "answer are what the judges need (the judges mean-pool their tokens, so the prompt's "
        "tokens, the same in every pair, dilute the answer's)",
        default=16,
        quick=16,
    )
    progress: bool = option(True, "show progress bars")

    def check(self) -> None:
        if len(self.options) != 3 or len({o.lower() for o in self.options}) != 3:
            raise ValueError(f"options must be three different answers, got {self.options}")
        if not 0.0 < self.noise < 0.5:
            raise ValueError(f"noise must lie in (0, 0.5), got {self.noise}")
        if not 0.0 < self.other_share < 1.0:
            raise ValueError(f"other_share must lie in (0, 1), got {self.other_share}")
        if not 0.0 <= self.nash_beta <= 1.0:
            raise ValueError(f"nash_beta must lie in [0, 1], got {self.nash_beta}")
        for name in ("tau", "nash_lr", "ppo_lr", "judge_head_lr"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        self.at_least(1, "lora_r", "ppo_epochs", "seeds")
        self.at_least(0, "pm_rank")
        unknown = [r for r in self.routes if r not in ROUTES]
        if unknown or not self.routes:
            raise ValueError(f"routes must be some of {', '.join(ROUTES)}, got {self.routes}")
        if self.batch_size is not None and self.batch_size % 2:
            raise ValueError(f"batch_size must be even (PPO's mini-batches), got {self.batch_size}")

    @property
    def cells(self) -> list[float]:
        """The dial's value of every cell, in order."""
        raise NotImplementedError

    def for_seed(self, k: int) -> ChoiceConfig:
        """This config for the run of seed ``seed + k`` (``k`` < ``seeds``)."""
        return replace(self, seed=self.seed + k)


@dataclass
class DecoyConfig(ChoiceConfig):
    """The decoy dial: voters w rank A ≻ C ≻ B and 1 − w rank B ≻ A ≻ C; each cell draws the
    judges' pairs with the decoy C at share ρ.  RLHF should take A once ρ > 1 − 2w; the Nash
    equilibrium stays on B."""

    w: float = option(0.4, "share of the voters who rank A ≻ C ≻ B (the rest: B ≻ A ≻ C)")
    rho: list[float] = option(
        [],
        "the cells: share ρ of the decoy C among the options in the judges' pairs (empty: "
        "0.05,0.15,0.3,0.45; with --quick 0.05,0.45)",
    )

    exact_kl: bool = option(
        True,
        "Nash-MD-PG's KL term from the exact KL over the vocabulary (nash-md exact_kl): with "
        "the sampled tokens' estimate alone, τ = 0.02 let a policy run off to answers no judge "
        "prefers",
    )

    def check(self) -> None:
        if not 0.0 < self.w < 0.5:
            raise ValueError(f"w must lie in (0, 0.5) so that B is the Condorcet winner: {self.w}")
        if any(not 0.0 <= r < 1.0 for r in self.rho):
            raise ValueError(f"rho must be shares in [0, 1), got {self.rho}")

    @property
    def cells(self) -> list[float]:
        if self.rho:
            return list(self.rho)
        return [0.05, 0.45] if self.quick else [0.05, 0.15, 0.3, 0.45]


@dataclass
class CycleConfig(ChoiceConfig):
    """The cycle dial: three voter types rank the three rotations of 0 ≻ 1 ≻ 2, mixed with a
    transitive quality 0 ≻ 1 ≻ 2 of share λ; the majority cycles while λ < ¼.  The judges'
    pairs draw the three options equally."""

    strength: list[float] = option(
        [0.1, 0.4], "the cells: share λ of the quality voters (below and above ¼, the overturn)"
    )
    tau: float = option(
        0.05,
        "KL regularization τ of the Nash routes (online IPO's β), larger than the decoy's: "
        "at τ = 0.02 no step size takes exact Nash-MD to π*_τ of the cycling cell in 16 steps",
    )
    nash_lr: float = option(
        4e-4,
        "AdamW learning rate of Nash-MD-PG and online IPO (below the decoy's: at 1e-3 the "
        "routes fall onto one answer within a few steps, before the cycle can turn)",
    )

    def check(self) -> None:
        if not self.strength or any(not 0.0 <= s <= 1.0 for s in self.strength):
            raise ValueError(f"strength must be one or more shares in [0, 1], got {self.strength}")

    @property
    def cells(self) -> list[float]:
        return list(self.strength)


@dataclass(frozen=True)
class ChoiceLayout(RunFolder):
    """The run's own files: the question, the reference's types, the predictions, the cells."""

    question = property(lambda self: self.root / "data" / "question.json")
    reference = property(lambda self: self.root / "data" / "reference.json")
    predictions = property(lambda self: self.root / "predictions.json")
    plot = property(lambda self: self.root / "results.png")

    def cell(self, value: float, k: int = 0) -> Path:
        """The folder of cell ``value``'s run from seed ``seed + k``."""
        return self.root / "cells" / (f"{value:g}" + (f"-seed{k}" if k else ""))
