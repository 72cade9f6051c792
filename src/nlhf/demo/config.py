"""The options of ``nlhf demo`` and its two size presets (the default run and ``--quick``).

Options left at ``None`` take the preset's value, so ``nlhf demo --quick steps=12`` is the
quick run with 12 steps per method.  The budget of each method is a number of steps (fixed per
preset), so the same command and seed give the same tables on any machine; ``minutes`` can cap
a method's time as well.  :func:`nlhf.resumable.resolved` returns the config with every preset
value filled in; that is what the stages read and what the report prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nlhf.config import option
from nlhf.resumable import Presets, preset_option


@dataclass
class Config(Presets):
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
    nash_lr: float | None = preset_option(
        "AdamW learning rate of the Nash methods (the quick one moves the policy visibly in its "
        "few steps, far from the reference)",
        default=2e-3,
        quick=5e-3,
    )
    tau: float = option(
        0.05, "KL regularization τ of the Nash methods (set for short CPU runs; the paper: 0.008)"
    )
    beta: float = option(0.125, "Nash-MD-PG mixture coefficient β (the paper's best value)")
    ppo_lr: float = option(1e-4, "AdamW learning rate of PPO (4 epochs × 2 mini-batches)")
    ppo_kl_coef: float = option(0.05, "PPO: initial KL coefficient (adapted towards 6 nats)")
    pm_rank: int = option(8, "rank of the preference model's skew-symmetric interaction")
    judge_pairs: int | None = preset_option(
        "IMDB pairs for the judges, 80% train / 20% held out", default=2000, quick=500
    )
    judge_words: int | None = preset_option(
        "words kept of each review in the judges' pairs", default=48, quick=32
    )
    judge_max_length: int | None = preset_option(
        "tokens per judged (prompt, response)", default=128, quick=96
    )
    steps: int | None = preset_option("training steps of each method but PPO", default=34, quick=8)
    ppo_steps: int | None = preset_option(
        "PPO's steps, each a rollout and 4 epochs × 2 mini-batches (about four Nash-MD-PG "
        "steps of time)",
        default=9,
        quick=3,
    )
    minutes: float = option(
        0.0,
        "also stop each method after this many minutes of training steps (0: no cap; a capped "
        "run's tables depend on the machine's speed)",
    )
    batch_size: int | None = preset_option(
        "prompts per training step (the preference model's per-sample signal is noisy: larger "
        "batches paid more than more steps, README)",
        default=64,
        quick=16,
    )
    max_new_tokens: int | None = preset_option(
        "tokens per completion, in training and tournament", default=16, quick=12
    )
    train_prompts: int | None = preset_option(
        "IMDB review openings the policies train on", default=1024, quick=128
    )
    eval_prompts: int | None = preset_option(
        "held-out openings in the tournament", default=64, quick=8
    )
    samples_per_prompt: int | None = preset_option(
        "tournament completions per prompt and policy", default=4, quick=2
    )
    judges: list[str] = option(
        [],
        "more tournament judges beside VADER and the trained preference model: any --judge "
        "spec (a hub classifier or reward model, a pairwise LM, population:default, …)",
    )
    seeds: int = option(
        1,
        "train every method from this many seeds (seed, seed + 1, …); the frontier's bands "
        "and matched-KL verdicts bootstrap over the seeds' runs and the prompts",
    )
    frontier: bool = option(
        False,
        "sweep each method's strength (PPO's fixed KL coefficient, Nash-MD-PG's τ) so that "
        "their KL ranges overlap; every run's checkpoints are points of the frontier",
    )
    ppo_kl_coefs: list[float] = option(
        [0.01, 0.01],
        "--frontier: PPO's KL coefficients β (held fixed), beside the default run's adaptive β "
        "(whose checkpoints hold PPO's low KLs); each run's checkpoints fill in the KLs below "
        "its last",
    )
    ppo_lrs: list[float] = option(
        [1e-3, 2e-3],
        "--frontier: PPO's learning rate at each coefficient of ppo_kl_coefs, in order (in "
        "ppo_steps rollouts a lower β alone does not take PPO further from the reference)",
    )
    taus: list[float] = option(
        [0.01, 0.3], "--frontier: Nash-MD-PG's τ values, beside the default run's τ"
    )
    targets: list[float] = option(
        [0.5, 1.0, 2.0, 4.0, 8.0], "KLs (nats) at which the methods play head to head"
    )
    frontier_samples: int | None = preset_option(
        "completions per held-out prompt and checkpoint in the frontier", default=2, quick=1
    )
    best_of_n: list[int] = option(
        [1, 2, 4, 8], "best-of-n of the reference in the frontier (a curve at KL log n − (n−1)/n)"
    )
    progress: bool = option(True, "show progress bars")

    def check(self) -> None:
        self.at_least(1, "seeds")
        if any(v <= 0 for v in [*self.ppo_kl_coefs, *self.ppo_lrs, *self.taus, *self.targets]):
            raise ValueError("ppo_kl_coefs, ppo_lrs, taus and targets must be > 0")
        if len(self.ppo_lrs) != len(self.ppo_kl_coefs):
            raise ValueError(
                f"ppo_lrs has {len(self.ppo_lrs)} values, ppo_kl_coefs {len(self.ppo_kl_coefs)}: "
                "one learning rate per coefficient"
            )
        self.at_least(0, "lora_r", "pm_rank", "tau", "ppo_lr", "ppo_kl_coef", "minutes")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta must lie in [0, 1], got {self.beta}")
