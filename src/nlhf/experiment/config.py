"""The options of ``nlhf experiment population``, its two size presets and its run folder.

Options left at ``None`` take the preset's value (``--quick comparisons=64`` is the quick run
with 64 judged comparisons per route).  Each route's budget is a number of judged comparisons,
the same for all four, so the same command and seed give the same tables on any machine (all
but the equal-time route's, whose steps are PPO's measured seconds); the step counts follow
from it (:meth:`Config.steps`).  The default preset's sizes were chosen from the demo's
measured step times to fit a short CPU run without ``--tune`` (the README gives a measured
run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nlhf.config import option
from nlhf.resumable import Presets, RunFolder, preset_option


@dataclass
class Config(Presets):
    """When does NLHF beat RLHF?  Label reference completions with a population of annotators
    whose majority can cycle, train both judges, predict the answer on the restricted game,
    train PPO and Nash-MD-PG (and their exact-population controls) on one comparison budget,
    run the tournament under the population and each criterion, write report.md."""

    out: str = option("", "run folder (empty: runs/population-<date>-<time>); existing: resume")
    quick: bool = option(False, "toy sizes (a few minutes): every stage runs; wide intervals")
    population: str = option(
        "default", "the annotators: default (positivity, brevity, vocabulary) or a YAML file"
    )
    policy: str = option("smollm2", "reference policy: smollm2 (embedded), a folder or hub name")
    encoder: str = option("minilm", "encoder the judges start from: minilm (embedded), a folder")
    seed: int = option(0, "seed of the prompts, labels, heads, sampling and training")
    dtype: Literal["auto", "float32", "bfloat16"] = option(
        "auto", "policy weights and the judges' autocast (auto: bfloat16 where the CPU has it)"
    )
    tau: float = option(
        0.05,
        "KL regularization τ of Nash-MD-PG and of the restricted game's prediction (the "
        "demo's value for short CPU runs; the paper: 0.008)",
    )
    beta: float = option(0.125, "Nash-MD-PG mixture coefficient β (the paper's best value)")
    lora_r: int = option(16, "LoRA rank of the policies (adapters on every linear layer)")
    nash_lr: float | None = preset_option(
        "AdamW learning rate of Nash-MD-PG", default=2e-3, quick=5e-3
    )
    ppo_lr: float = option(1e-4, "AdamW learning rate of PPO")
    ppo_epochs: int = option(4, "PPO: passes over each rollout (2 mini-batches each)")
    ppo_kl_coef: float = option(0.05, "PPO: initial KL coefficient (adapted towards 6 nats)")
    pm_rank: int = option(8, "rank of the preference model's skew-symmetric interaction")
    annotators: int = option(
        1,
        "annotators drawn from the population per labelled pair, each a label row (the "
        "judges then learn each pair's preference from that many votes)",
    )
    train_prompts: int | None = preset_option(
        "IMDB openings the judges' pairs and the policies' training use (× samples: 4 "
        "completions of 320 give 1,920 labelled pairs)",
        default=320,
        quick=48,
    )
    samples: int | None = preset_option(
        "reference completions per training prompt; every pair is labelled", default=4, quick=4
    )
    eval_prompts: int | None = preset_option(
        "held-out openings of the prediction and the tournament", default=64, quick=16
    )
    eval_samples: int | None = preset_option(
        "K: reference completions per held-out prompt in the restricted game", default=6, quick=4
    )
    comparisons: int | None = preset_option(
        "judged comparisons per route: PPO scores one completion per prompt and step, "
        "Nash-MD-PG compares one pair per prompt and step (448: 7 steps of 64 prompts; a PPO "
        "step costs about four Nash-MD-PG steps, so the three PPO-length routes set the time)",
        default=448,
        quick=32,
    )
    batch_size: int | None = preset_option("prompts per training step", default=64, quick=16)
    max_new_tokens: int | None = preset_option(
        "tokens per completion everywhere", default=16, quick=12
    )
    judge_max_length: int | None = preset_option(
        "tokens per judged (prompt, completion)", default=64, quick=48
    )
    tournament_samples: int | None = preset_option(
        "tournament completions per prompt and policy", default=4, quick=2
    )
    tune: bool = option(
        False,
        "before the routes train, try each one's settings on a small grid in short runs and "
        "keep those the population prefers on validation prompts (nlhf.experiment.tuning; "
        "without it: the options as given)",
    )
    tune_prompts: int | None = preset_option(
        "validation openings of the tuning stage, apart from the others", default=32, quick=8
    )
    tune_steps: int | None = preset_option("steps of each tuning run", default=4, quick=1)
    progress: bool = option(True, "show progress bars")

    def check(self) -> None:
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta must lie in [0, 1], got {self.beta}")
        for name in ("tau", "ppo_lr"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        self.at_least(1, "ppo_epochs", "lora_r", "annotators")
        self.at_least(0, "ppo_kl_coef", "pm_rank")
        for name in ("samples", "eval_samples"):
            value = getattr(self, name)
            if value is not None and value < 3:
                raise ValueError(f"{name} must be ≥ 3 so that triples exist, got {value}")
        if self.batch_size is not None and self.batch_size % 2:
            raise ValueError(f"batch_size must be even (PPO's mini-batches), got {self.batch_size}")

    @property
    def population_spec(self) -> str:
        return f"population:{self.population}"

    @property
    def steps(self) -> int:
        """Steps of every route: ``comparisons`` judged comparisons at one per prompt."""
        return max(1, math.ceil(self.comparisons / self.batch_size))


ROUTES = ("ppo", "nash-md", "ppo-exact", "nash-md-exact")
"""The four routes at one comparison budget: the two routes, then their exact-population
controls."""

TIMED = "nash-md-time"
"""The fifth policy: Nash-MD-PG against the learned preference model for as many steps as fit
in PPO's training time on this machine (the equal wall-clock comparison)."""

POLICIES = (*ROUTES, TIMED)
"""Every trained policy, in the tournament's order after the reference."""

ROUTE_TITLES = {
    "ppo": "RLHF: PPO vs the learned reward model",
    "nash-md": "NLHF: Nash-MD-PG vs the learned preference model",
    "ppo-exact": "control: PPO vs the Bradley–Terry fit of the exact population",
    "nash-md-exact": "control: Nash-MD-PG vs the exact population",
    TIMED: "NLHF in PPO's time: Nash-MD-PG vs the learned preference model",
}


@dataclass(frozen=True)
class Layout(RunFolder):
    """Where everything of one run lives: the files every run has and the experiment's own."""

    tune_prompts = property(lambda self: self.root / "data" / "tune_prompts.jsonl")
    tuning = property(lambda self: self.root / "tuning" / "tuning.json")
    completions = property(lambda self: self.root / "data" / "reference_completions.json")
    pairs = property(lambda self: self.root / "data" / "pairs.jsonl")
    judge_evaluation = property(lambda self: self.root / "judges" / "evaluation.json")
    prediction = property(lambda self: self.root / "prediction.json")
    plot = property(lambda self: self.root / "results.png")

    def tuning_run(self, name: str) -> Path:
        return self.root / "tuning" / name
