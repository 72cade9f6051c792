"""What the stages of ``nlhf experiment population`` run: the prompts as the trainers read
them and the judges' and routes' trainer configs.

Pure functions of the resolved config and its run folder, so a test can check the budget
arithmetic without training anything; :mod:`nlhf.experiment.stages` and
:mod:`nlhf.experiment.tuning` both build on them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nlhf.data.prompts import PromptFields, load_prompt_texts
from nlhf.experiment.config import Config, Layout
from nlhf.lm_stages import judge_configs
from nlhf.train import nash_md, ppo


def prompt_texts(path: Path) -> list[str]:
    """The prompts of a file as the trainers and judges read them."""
    return load_prompt_texts(PromptFields(prompts=str(path)), seed=0)


def pair_judge_configs(config: Config, layout: Layout) -> dict[str, Any]:
    """The reward-model and preference-model configs: the same labelled pairs, the same
    held-out split."""
    return judge_configs(config, layout, data=str(layout.pairs))


def route_configs(
    config: Config, layout: Layout, tuned: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Each route's trainer config: the same reference, prompts, steps and prompts per step,
    so the same number of judged comparisons (``config.steps × batch_size``); ``tuned``
    (:func:`nlhf.experiment.tuning.tuned_settings`) replaces PPO's and Nash-MD-PG's fields in
    both of their routes."""
    tuned = tuned or {}

    def fields(route: str, judge: str) -> dict[str, Any]:
        return dict(
            policy=config.policy,
            lora_r=config.lora_r,
            dtype=config.dtype,
            prompts=str(layout.train_prompts),
            judge=judge,
            steps=config.steps,
            batch_size=config.batch_size,
            max_new_tokens=config.max_new_tokens,
            seed=config.seed,
            out=str(layout.policy(route)),
            checkpoint_every=max(1, min(5, config.steps)),
            tensorboard=False,
            progress=config.progress,
        )

    def ppo_config(route: str, judge: str) -> Any:
        given = dict(lr=config.ppo_lr, epochs=config.ppo_epochs, init_kl_coef=config.ppo_kl_coef)
        return ppo.Config(**fields(route, judge), **(given | tuned.get("ppo", {})))

    def nash_config(route: str, judge: str) -> Any:
        given = dict(lr=config.nash_lr, tau=config.tau, beta=config.beta)
        return nash_md.Config(**fields(route, judge), **(given | tuned.get("nash-md", {})))

    population = config.population_spec
    return {
        "ppo": ppo_config("ppo", str(layout.judge("reward-model") / "model")),
        "nash-md": nash_config("nash-md", str(layout.judge("preference-model") / "model")),
        # the judge object (AnchoredBradleyTerry) is built at training time
        "ppo-exact": ppo_config("ppo-exact", f"bradley-terry fit of {population}"),
        "nash-md-exact": nash_config("nash-md-exact", population),
    }
