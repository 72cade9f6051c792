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


def _online_fields(config: Config, layout: Layout, name: str, judge: str) -> dict[str, Any]:
    return dict(
        policy=config.policy,
        lora_r=config.lora_r,
        dtype=config.dtype,
        prompts=str(layout.train_prompts),
        judge=str(layout.judge(judge) / "model"),
        steps=config.max_steps,
        time_limit=config.minutes,
        batch_size=config.batch_size,
        max_new_tokens=config.max_new_tokens,
        seed=config.seed,
        out=str(layout.policy(name)),
        checkpoint_every=5,
        progress=config.progress,
    )


def methods(config: Config, layout: Layout) -> list[Method]:
    """RLHF-PPO and Nash-MD-PG; with ``all_methods`` also self-play and Nash-EMA."""
    from nlhf.train import nash_ema, nash_md, ppo

    nash = dict(lr=config.nash_lr, tau=config.tau)
    chosen = [
        Method(
            "ppo",
            "RLHF-PPO vs the reward model",
            "nlhf.train.ppo",
            "reward-model",
            ppo.Config(
                **_online_fields(config, layout, "ppo", "reward-model"),
                lr=config.ppo_lr,
                init_kl_coef=config.ppo_kl_coef,
            ),
        ),
        Method(
            "nash-md",
            f"Nash-MD-PG (β = {config.beta:g}) vs the preference model",
            "nlhf.train.nash_md",
            "preference-model",
            nash_md.Config(
                **_online_fields(config, layout, "nash-md", "preference-model"),
                beta=config.beta,
                **nash,
            ),
        ),
    ]
    if config.all_methods:
        chosen += [
            Method(
                "self-play",
                "Nash-MD-PG self-play (β = 0) vs the preference model",
                "nlhf.train.nash_md",
                "preference-model",
                nash_md.Config(
                    **_online_fields(config, layout, "self-play", "preference-model"),
                    beta=0.0,
                    **nash,
                ),
            ),
            Method(
                "nash-ema",
                "Nash-EMA vs the preference model",
                "nlhf.train.nash_ema",
                "preference-model",
                nash_ema.Config(
                    **_online_fields(config, layout, "nash-ema", "preference-model"), **nash
                ),
            ),
        ]
    return chosen


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
