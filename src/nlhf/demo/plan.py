"""What each stage of ``nlhf demo`` runs: the run folder's layout and the per-stage configs.

Pure functions of the (resolved) demo config, so a test can check every choice without
training anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nlhf.demo.config import Config


@dataclass(frozen=True)
class Layout:
    """Where everything of one demo run lives."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def stages(self) -> Path:
        return self.root / "stages.json"

    @property
    def train_prompts(self) -> Path:
        return self.root / "data" / "train_prompts.jsonl"

    @property
    def eval_prompts(self) -> Path:
        return self.root / "data" / "eval_prompts.jsonl"

    def judge(self, kind: str) -> Path:
        return self.root / "judges" / kind

    def policy(self, method: str) -> Path:
        return self.root / "policies" / method

    @property
    def tournament(self) -> Path:
        return self.root / "tournament"

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def curves(self) -> Path:
        return self.root / "curves.png"


@dataclass(frozen=True)
class Method:
    """One policy the demo trains: its name, trainer module, the judge it trains against
    and its config."""

    name: str
    title: str
    module: str
    judge: str
    config: Any
    comparisons_per_step: int = 0
    """judge calls of one step: scores (PPO) or pairwise comparisons."""


def judge_configs(config: Config, layout: Layout) -> dict[str, Any]:
    """The reward-model and preference-model training configs (same data, same split)."""
    from nlhf.train import preference_model, reward_model

    shared = dict(
        data="imdb",
        backbone=config.encoder,
        max_pairs=config.judge_pairs,
        imdb_words=config.judge_words,
        max_length=config.judge_max_length,
        dtype=config.dtype,
        seed=config.seed,
        progress=config.progress,
    )
    return {
        "reward-model": reward_model.Config(out=str(layout.judge("reward-model")), **shared),
        "preference-model": preference_model.Config(
            out=str(layout.judge("preference-model")), rank=config.pm_rank, **shared
        ),
    }


def _online_fields(
    config: Config, layout: Layout, name: str, judge: str, steps: int, batch_size: int
) -> dict[str, Any]:
    return dict(
        policy=config.policy,
        lora_r=config.lora_r,
        dtype=config.dtype,
        prompts=str(layout.train_prompts),
        judge=str(layout.judge(judge) / "model"),
        steps=steps,
        time_limit=config.minutes,
        batch_size=batch_size,
        max_new_tokens=config.max_new_tokens,
        seed=config.seed,
        out=str(layout.policy(name)),
        checkpoint_every=5,
        progress=config.progress,
    )


GROUP_SAMPLES = 4
"""K of the methods that sample K completions per prompt (SPPO, INPO, ONPO, DNO)."""
GROUP_LR = 5e-4
"""Their learning rate: that of their example configs (configs/sppo.yaml, …)."""


def methods(config: Config, layout: Layout) -> list[Method]:
    """RLHF-PPO and Nash-MD-PG; with ``all_methods`` the rest of the Nash family too.

    Every method but PPO takes ``config.steps`` steps; the ones that sample K completions per
    prompt get half the prompts per step, so that each step decodes as many completions as a
    Nash-MD-PG step (policy and opponent: 2 per prompt)."""
    from nlhf.train import dno, inpo, nash_ema, nash_md, online_dpo, ppo, sppo

    nash = dict(lr=config.nash_lr, tau=config.tau)
    n, steps, k = config.batch_size, config.steps, GROUP_SAMPLES

    def fields(name: str, judge: str = "preference-model", **over: Any) -> dict[str, Any]:
        return _online_fields(config, layout, name, judge, steps, n) | over

    chosen = [
        Method(
            "ppo",
            "RLHF-PPO vs the reward model",
            "nlhf.train.ppo",
            "reward-model",
            ppo.Config(
                **fields("ppo", "reward-model", steps=config.ppo_steps),
                lr=config.ppo_lr,
                init_kl_coef=config.ppo_kl_coef,
            ),
            n,
        ),
        Method(
            "nash-md",
            f"Nash-MD-PG (β = {config.beta:g}) vs the preference model",
            "nlhf.train.nash_md",
            "preference-model",
            nash_md.Config(**fields("nash-md"), beta=config.beta, **nash),
            n,
        ),
    ]
    if not config.all_methods:
        return chosen
    groups = dict(batch_size=max(1, n // 2), lr=GROUP_LR)
    half = groups["batch_size"]
    return [
        *chosen,
        Method(
            "self-play",
            "Nash-MD-PG self-play (β = 0) vs the preference model",
            "nlhf.train.nash_md",
            "preference-model",
            nash_md.Config(**fields("self-play"), beta=0.0, **nash),
            n,
        ),
        Method(
            "nash-ema",
            "Nash-EMA vs the preference model",
            "nlhf.train.nash_ema",
            "preference-model",
            nash_ema.Config(**fields("nash-ema"), **nash),
            n,
        ),
        Method(
            "mpo",
            "MPO (magnet reset every 10 steps) vs the preference model",
            "nlhf.train.nash_md",
            "preference-model",
            nash_md.MpoConfig(**fields("mpo"), magnet_every=10, **nash),
            n,
        ),
        Method(
            "online-ipo",
            "online IPO (soft labels) vs the preference model",
            "nlhf.train.online_dpo",
            "preference-model",
            online_dpo.Config(**fields("online-ipo"), loss_type="ipo", label="soft", lr=GROUP_LR),
            n,
        ),
        Method(
            "sppo",
            f"SPPO (K = {k}) vs the preference model",
            "nlhf.train.sppo",
            "preference-model",
            sppo.Config(**fields("sppo", **groups), samples=k),
            half * k * (k - 1) // 2,
        ),
        Method(
            "inpo",
            f"INPO (K = {k}) vs the preference model",
            "nlhf.train.inpo",
            "preference-model",
            inpo.Config(**fields("inpo", **groups), samples=k),
            half * (3 * k // 2 - 1),
        ),
        Method(
            "onpo",
            f"ONPO (K = {k}) vs the preference model",
            "nlhf.train.inpo",
            "preference-model",
            inpo.OnpoConfig(**fields("onpo", **groups), samples=k),
            half * (3 * k // 2 - 1),
        ),
        Method(
            "dno",
            f"DNO (K = {k}) vs the preference model",
            "nlhf.train.dno",
            "preference-model",
            dno.Config(**fields("dno", **groups), samples=k),
            half * k * (k - 1) // 2,
        ),
    ]


def tournament_entrants(config: Config, layout: Layout) -> list[str]:
    """``reference`` and every trained policy, as ``nlhf eval`` specs."""
    return ["reference"] + [
        f"{m.name}={layout.policy(m.name) / 'policy'}" for m in methods(config, layout)
    ]


def tournament_judges(config: Config, layout: Layout) -> dict[str, str]:
    """VADER (no method trained on it), the learned preference model, and ``config.judges``
    (each named by its spec)."""
    named = {"vader": "vader", "preference-model": str(layout.judge("preference-model") / "model")}
    return {**named, **{spec: spec for spec in config.judges}}
