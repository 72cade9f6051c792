"""Online training: the core loop fed with prompts, for the trainers that sample and judge.

    trainer = Trainer(config)                        # policy, judge and prompts from config
    trainer = Trainer(config, policy=p, judge=j, prompts=["a", "b"])
    last = trainer.run(NashMDPG(trainer, config), "nash-md")

Each step's ``batch_size`` prompts are drawn from a seeded permutation of the pool
(:func:`step_rows`), the same whatever the number of processes; process k takes the k-th
contiguous share and splits it into ``grad_accum`` chunks (:class:`PromptSource`).  Every
completion's generator is seeded by (seed, step, global row)
(:func:`nlhf.models.sampling.row_generators`), so a resumed or multi-process run samples
exactly what one uninterrupted process samples.  The rest is :mod:`nlhf.train.core`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from nlhf.config import ConfigError, option
from nlhf.data.prompts import PromptFields, load_prompt_texts
from nlhf.models.judges import load_judge
from nlhf.models.judges.load import JUDGE_HELP, JudgeFields
from nlhf.models.text import tokenize_prompts
from nlhf.train import core
from nlhf.train.core import StepRule, TrainFields
from nlhf.train.distributed import Processes
from nlhf.train.policy_fields import PolicyFields, load_policy


@dataclass
class OnlineConfig(TrainFields, PolicyFields, PromptFields, JudgeFields):
    """Fields shared by every online algorithm."""

    judge: str = option("vader", JUDGE_HELP)
    step_rule: StepRule = option(
        "plain",
        "the outer loop: plain (one gradient step); extragradient (EGPO, Zhou, Fazel and Du "
        "2025: a look-ahead step, then the step from the same point with the look-ahead's "
        "gradient; twice the samples and judge calls per step); optimistic (ONPO, Zhang et al. "
        "2025: each step's samples and gradient taken after a predictor step along the last "
        "step's gradient, then the step from the same point; one gradient per step)",
    )
    magnet_every: int = option(
        0,
        "MPO's and COMAL's magnet reset: every this many steps the reference μ becomes the "
        "current policy, so the regularized equilibria approach the unregularized one (0: "
        "never; under LoRA the reference becomes the base plus a frozen copy of the adapter)",
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
    out: str = option("runs/online", "output folder: metrics.jsonl, checkpoints/, policy/")

    def check(self) -> None:
        if self.step_rule != "plain" and self.fsdp:
            raise ValueError(f"step_rule={self.step_rule} does not run with fsdp=true yet")
        self.at_least(0, "magnet_every", "time_limit")
        if self.magnet_every and self.fsdp:
            raise ValueError("magnet_every does not run with fsdp=true yet")
        self.at_least(1, "steps", "batch_size", "grad_accum", "max_new_tokens")
        if self.batch_size % self.grad_accum:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of "
                f"grad_accum ({self.grad_accum})"
            )
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")


@dataclass
class PromptBatch:
    """Left-padded prompt tokens of one chunk, their texts, their global row numbers, and the
    chunk's share of the step's prompts."""

    texts: list[str]
    ids: torch.Tensor
    mask: torch.Tensor
    rows: list[int]
    weight: float = 1.0


def step_rows(step: int, batch_size: int, pool: int, seed: int) -> list[int]:
    """The prompt indices of one step: a fresh seeded permutation per pass over the pool."""
    rows = []
    for k in range(step * batch_size, (step + 1) * batch_size):
        epoch, position = divmod(k, pool)
        order = torch.randperm(pool, generator=torch.Generator().manual_seed(seed * 7919 + epoch))
        rows.append(int(order[position]))
    return rows


class PromptSource:
    """``source(step)``: this process's share of the step's prompts, in ``grad_accum`` chunks."""

    def __init__(
        self, prompts: list[str], policy: Any, config: OnlineConfig, procs: Processes
    ) -> None:
        self.prompts, self.policy, self.config, self.procs = prompts, policy, config, procs

    def __call__(self, step: int) -> list[PromptBatch]:
        cfg = self.config
        rows = step_rows(step, cfg.batch_size, len(self.prompts), cfg.seed)
        numbered = self.procs.share(list(enumerate(rows, start=step * cfg.batch_size)))
        size = len(numbered) // cfg.grad_accum
        out = []
        for start in range(0, len(numbered), size):
            part = numbered[start : start + size]
            texts = [self.prompts[r] for _, r in part]
            ids, mask = tokenize_prompts(self.policy.tokenizer, texts, self.policy.device)
            out.append(PromptBatch(texts, ids, mask, [n for n, _ in part], size / cfg.batch_size))
        return out


class Trainer(core.Trainer):
    """The core loop over prompts; loads what is not given (policy, judge, prompt pool)."""

    def __init__(
        self,
        config: OnlineConfig,
        policy: Any = None,
        judge: Any = None,
        prompts: list[str] | None = None,
        accelerator: Any = None,
    ) -> None:
        procs = Processes(accelerator)
        if config.batch_size % (procs.count * config.grad_accum):
            raise ConfigError(
                f"batch_size ({config.batch_size}) must be a multiple of the number of "
                f"processes ({procs.count}) × grad_accum ({config.grad_accum})"
            )
        torch.manual_seed(config.seed)
        policy = policy if policy is not None else load_policy(config)
        if judge is None:
            judge = load_judge(config.judge, config.judge_options())
        if prompts is None:
            prompts = load_prompt_texts(config, config.seed, policy.tokenizer)
        if not prompts:
            raise ValueError(f"{config.prompts}: no prompts")
        self.prompts = prompts
        try:  # a population judge's groups (its YAML file may change after the run)
            record = {"judge_definition": judge.definition}
        except AttributeError:
            record = {}
        super().__init__(
            config,
            policy,
            config.steps,
            PromptSource(prompts, policy, config, procs),
            judge=judge,
            procs=procs,
            time_limit=config.time_limit,
            fsdp=config.fsdp,
            step_rule=config.step_rule,
            record=record,
        )

    def after_step(self, step: int) -> None:
        every = self.config.magnet_every
        if every and step % every == 0 and step < self.steps:
            self.policy.reset_reference()

    def extra_state(self) -> dict[str, Any]:
        return {"reference": self.policy.reference_state()} if self.config.magnet_every else {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if state.get("reference"):
            self.policy.load_reference_state(state["reference"])


def train_and_report(config: OnlineConfig, algorithm: type[core.Algorithm], name: str) -> int:
    """``nlhf train <name>``: build the trainer, run ``algorithm(trainer, config)``, say where
    the policy went."""
    trainer = Trainer(config)
    last = trainer.run(algorithm(trainer, config), name)
    trainer.say(
        f"{core.summary(name, trainer.steps_done, last)}\npolicy saved to {config.out}/policy"
    )
    return 0
