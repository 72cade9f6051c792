"""The options of ``nlhf demo`` and its two size presets (the default run and ``--quick``).

Options left at ``None`` take the preset's value, so ``nlhf demo --quick steps=12`` is the
quick run with 12 steps per method.  The budget of each method is a number of steps (fixed per
preset, chosen to fit the time budget on 2 cores), so the same command and seed give the same
tables on any machine; ``minutes`` can cap a method's time as well.  :func:`resolved`
returns the config with every preset value filled in; that is what the stages read and what
the report prints.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from nlhf.config import option
from nlhf.files import check_folder_option


@dataclass(frozen=True)
class Sizes:
    """The knobs that set how long the demo takes."""

    judge_pairs: int
    judge_words: int
    judge_max_length: int
    steps: int
    ppo_steps: int
    batch_size: int
    max_new_tokens: int
    train_prompts: int
    eval_prompts: int
    samples_per_prompt: int
    nash_lr: float


PRESETS = {
    # about 6 minutes of training per method on 2 cores (the latest run's times and win rates:
    # the README's demo section); 64 prompts per step, because the preference model's
    # per-sample signal is noisy and larger batches paid more than more steps; a PPO step is a
    # rollout followed by 4 epochs × 2 mini-batches, about four Nash-MD-PG steps of time
    "default": Sizes(
        judge_pairs=2000,
        judge_words=48,
        judge_max_length=128,
        steps=34,
        ppo_steps=9,
        batch_size=64,
        max_new_tokens=16,
        train_prompts=1024,
        eval_prompts=64,
        samples_per_prompt=4,
        nash_lr=2e-3,
    ),
    # a few minutes: every stage runs, and a large Nash learning rate moves the policy
    # visibly in its few steps (far from the reference, at a large KL); intervals are wide
    "quick": Sizes(
        judge_pairs=1000,
        judge_words=32,
        judge_max_length=96,
        steps=8,
        ppo_steps=3,
        batch_size=32,
        max_new_tokens=12,
        train_prompts=128,
        eval_prompts=16,
        samples_per_prompt=2,
        nash_lr=5e-3,
    ),
}


@dataclass
class Config:
    """RLHF-PPO against Nash-MD-PG on the embedded SmolLM2: train both judges on IMDB human
    labels, train both policies for the same time, run the tournament, write report.md."""

    out: str = option("", "run folder (empty: runs/demo-<date>-<time>); an existing one resumes")
    quick: bool = option(
        False, "toy sizes (a few minutes in all): every stage runs; wide intervals"
    )
    all_methods: bool = option(
        False,
        "also train self-play (β = 0), Nash-EMA, MPO, SPPO, INPO, ONPO, DNO and online IPO, "
        "each for the same number of steps",
    )
    policy: str = option("smollm2", "reference policy: smollm2 (embedded), a folder or hub name")
    encoder: str = option("minilm", "encoder the judges start from: minilm (embedded), a folder")
    seed: int = option(0, "seed of the data splits, the heads, sampling and training")
    dtype: Literal["auto", "float32", "bfloat16"] = option(
        "auto",
        "the policies' frozen weights in training and tournament, and the judges' autocast: "
        "float32, bfloat16, or auto (bfloat16 where the hardware has bf16 units, which makes "
        "the policy and judge steps faster)",
    )
    lora_r: int = option(16, "LoRA rank of the policies (adapters on every linear layer)")
    nash_lr: float | None = option(
        None, "AdamW learning rate of the Nash methods (default 2e-3; quick 5e-3)"
    )
    tau: float = option(
        0.05, "KL regularization τ of the Nash methods (set for short CPU runs; the paper: 0.008)"
    )
    beta: float = option(0.125, "Nash-MD-PG mixture coefficient β (the paper's best value)")
    ppo_lr: float = option(1e-4, "AdamW learning rate of PPO (4 epochs × 2 mini-batches)")
    ppo_kl_coef: float = option(0.05, "PPO: initial KL coefficient (adapted towards 6 nats)")
    pm_rank: int = option(8, "rank of the preference model's skew-symmetric interaction")
    judge_pairs: int | None = option(
        None, "IMDB pairs for the judges, 80% train / 20% held out (default 2000; quick 1000)"
    )
    judge_words: int | None = option(
        None, "words kept of each review in the judges' pairs (default 48; quick 32)"
    )
    judge_max_length: int | None = option(
        None, "tokens per judged (prompt, response) (default 128; quick 96)"
    )
    steps: int | None = option(None, "training steps of each method but PPO (default 34; quick 8)")
    ppo_steps: int | None = option(
        None, "PPO's steps, each a rollout and 4 epochs × 2 mini-batches (default 9; quick 3)"
    )
    minutes: float = option(
        0.0,
        "also stop each method after this many minutes of training steps (0: no cap; a capped "
        "run's tables depend on the machine's speed)",
    )
    batch_size: int | None = option(None, "prompts per training step (default 64; quick 32)")
    max_new_tokens: int | None = option(
        None, "tokens per completion, in training and tournament (default 16; quick 12)"
    )
    train_prompts: int | None = option(
        None, "IMDB review openings the policies train on (default 1024; quick 128)"
    )
    eval_prompts: int | None = option(
        None, "held-out openings in the tournament (default 64; quick 16)"
    )
    samples_per_prompt: int | None = option(
        None, "tournament completions per prompt and policy (default 4; quick 2)"
    )
    judges: list[str] = option(
        [],
        "more tournament judges beside VADER and the trained preference model: any --judge "
        "spec (a hub classifier or reward model, a pairwise LM, population:default, …)",
    )
    progress: bool = option(True, "show progress bars")

    def __post_init__(self) -> None:
        for name in ("lora_r", "pm_rank"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta must lie in [0, 1], got {self.beta}")
        for name in ("tau", "ppo_lr", "ppo_kl_coef", "minutes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        for field in dataclasses.fields(Sizes):
            value = getattr(self, field.name)
            if value is not None and value <= 0:
                raise ValueError(f"{field.name} must be > 0, got {value}")
        if self.out:
            check_folder_option("out", self.out)

    @property
    def preset(self) -> Sizes:
        return PRESETS["quick" if self.quick else "default"]

    @property
    def sizes(self) -> Sizes:
        """The preset with every option the user set put in place."""
        chosen = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(Sizes)
            if getattr(self, f.name) is not None
        }
        return dataclasses.replace(self.preset, **chosen)


def resolved(config: Config) -> Config:
    """``config`` with every preset-valued option filled in and ``auto`` dtype decided."""
    from nlhf.models.policy import resolve_dtype

    return dataclasses.replace(
        config, dtype=resolve_dtype(config.dtype), **dataclasses.asdict(config.sizes)
    )
