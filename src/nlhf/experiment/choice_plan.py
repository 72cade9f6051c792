"""What one cell of ``nlhf experiment decoy`` or ``cycle`` trains: its population, its judges'
pair distribution and every route's trainer config.

    P, pairs = cell_game(config, value)           # the exact P and the types of the pairs
    configs = route_configs(config, folder, beta) # route → trainer config (same budget)

Pure functions of the resolved config, so a test can check the budget and the pairing without
training.  Every route trains on the one question for ``steps`` steps of ``batch_size``
completions; PPO's KL coefficient is the cell's β (paired to τ by equal KL of the type
distribution, fixed: no adaptive KL), the Nash routes' regularization is τ (online IPO's β,
whose fixed point is the same regularized equilibrium).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nlhf.experiment.choice_config import ChoiceConfig, CycleConfig, DecoyConfig
from nlhf.lm_stages import judge_configs
from nlhf.resumable import RunFolder
from nlhf.tabular.lottery import (
    cycle_rankings,
    decoy_rankings,
    pair_distribution,
    ranking_population,
)
from nlhf.train import nash_md, online_dpo, ppo

LEARNED_JUDGE = {
    "ppo": "reward-model",
    "nash-md": "preference-model",
    "online-ipo": "preference-model",
}
"""The learned judge each learned route trains against."""


def cell_rankings(config: ChoiceConfig, value: float) -> tuple[list[Any], list[float]]:
    """The annotator types of one cell: their rankings of (A, B, C, other) and shares."""
    if isinstance(config, DecoyConfig):
        return decoy_rankings(config.w)
    if isinstance(config, CycleConfig):
        return cycle_rankings(value)
    raise TypeError(f"not a forced-choice experiment: {type(config).__name__}")


def cell_game(config: ChoiceConfig, value: float) -> tuple[np.ndarray, np.ndarray]:
    """(P, pairs): the cell's exact population P over (A, B, C, other) and the distribution of
    the types its judges' training pairs are drawn from."""
    P = ranking_population(*cell_rankings(config, value), noise=config.noise)
    decoy = value if isinstance(config, DecoyConfig) else None
    return P, pair_distribution(decoy, config.other_share)


def cell_judge_configs(config: ChoiceConfig, folder: RunFolder) -> dict[str, Any]:
    """The cell's reward-model and preference-model configs, on its labelled pairs."""
    data = str(folder.root / "pairs.jsonl")
    return judge_configs(
        config, folder, data=data, epochs=config.judge_epochs, head_lr=config.judge_head_lr
    )


def route_configs(config: ChoiceConfig, folder: RunFolder, beta: float) -> dict[str, Any]:
    """Each route of ``config.routes``: the same reference, steps and completions per step."""
    shared = dict(
        policy=config.policy,
        lora_r=config.lora_r,
        dtype=config.dtype,
        steps=config.steps,
        batch_size=config.batch_size,
        max_new_tokens=config.max_new_tokens,
        seed=config.seed,
        checkpoint_every=max(1, min(5, config.steps)),
        tensorboard=False,
        progress=config.progress,
        judge_max_length=config.judge_max_length,
        judge_cache=False,
    )

    def judge(route: str) -> str:
        if route in LEARNED_JUDGE:
            return str(folder.judge(LEARNED_JUDGE[route]) / "model")
        return "exact-population"  # the judge object is built at training time

    def build(route: str) -> Any:
        fields = dict(shared, out=str(folder.policy(route)), judge=judge(route))
        if route.startswith("ppo"):
            return ppo.Config(
                **fields,
                lr=config.ppo_lr,
                init_kl_coef=beta,
                adaptive_kl=False,
                epochs=config.ppo_epochs,
            )
        if route.startswith("nash-md"):
            return nash_md.Config(
                **fields,
                lr=config.nash_lr,
                tau=config.tau,
                beta=config.nash_beta,
                exact_kl=config.exact_kl,
            )
        return online_dpo.OnlineIpoConfig(**fields, lr=config.nash_lr, beta=config.tau)

    return {route: build(route) for route in config.routes}
