"""The stages of ``nlhf demo``, each one idempotent: a stage that finished is skipped, a stage
that was interrupted continues from its trainers' checkpoints.

``stages.json`` in the run folder records every finished stage and its wall-clock seconds
(written atomically after the stage's own outputs, so "recorded" implies "complete").
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

from nlhf.data.prompts import PromptFields
from nlhf.demo.config import Config
from nlhf.demo.plan import (
    Layout,
    judge_configs,
    methods,
    tournament_entrants,
    tournament_judges,
)
from nlhf.resumable import StageLog


def prepare_prompts(config: Config, layout: Layout) -> dict[str, Any]:
    """Disjoint IMDB review openings: ``train_prompts`` to train on, ``eval_prompts`` held
    out for the tournament."""
    from nlhf.data.movie_reviews import review_prompts

    pool = review_prompts(
        config.train_prompts + config.eval_prompts,
        words=PromptFields().prompt_words,  # the trainers' default opening length
        seed=config.seed,
    )
    pool[: config.eval_prompts].to_jsonl(layout.eval_prompts)
    pool[config.eval_prompts :].to_jsonl(layout.train_prompts)
    return {
        "train_prompts": config.train_prompts,
        "eval_prompts": config.eval_prompts,
        "cpus": os.cpu_count(),  # for the report: how big the machine was
    }


def train_judges(config: Config, layout: Layout) -> dict[str, Any]:
    """The reward model and the preference model on the same IMDB pairs and split."""
    from nlhf.train import preference_model, reward_model

    runners = {"reward-model": reward_model.run, "preference-model": preference_model.run}
    accuracy = {}
    for kind, judge_config in judge_configs(config, layout).items():
        metrics_path = layout.judge(kind) / "metrics.json"
        if not metrics_path.exists():
            runners[kind](judge_config)
        accuracy[kind] = json.loads(metrics_path.read_text())["held_out"]["accuracy"]
    return {"held_out_accuracy": accuracy}


def train_policy(method) -> dict[str, Any]:
    """One method's trainer, which resumes from its own checkpoints."""
    importlib.import_module(method.module).run(method.config)
    lines = (Path(method.config.out) / "metrics.jsonl").read_text().splitlines()
    last = json.loads(lines[-1]) if lines else {}
    return {"steps": last.get("step", 0)}


def run_tournament(config: Config, layout: Layout) -> dict[str, Any]:
    """Reference and trained policies on the held-out prompts, judged by VADER and the
    preference model (every pair of samples compared)."""
    from nlhf.assets import resolve_model
    from nlhf.data import load_prompts
    from nlhf.eval import run_tournament as tournament
    from nlhf.eval.rollouts import Sampling

    prompts = [p.content for p in load_prompts(layout.eval_prompts)]
    result = tournament(
        tournament_entrants(config, layout),
        prompts,
        tournament_judges(config, layout),
        reference=resolve_model(config.policy, "policy"),
        sampling=Sampling(
            samples_per_prompt=config.samples_per_prompt,
            max_new_tokens=config.max_new_tokens,
            seed=config.seed,
            dtype=config.dtype,
        ),
        show_samples=4,
        progress=config.progress,
        out=layout.tournament,
    )
    return {"seconds_inside": result.seconds}


def run_all(config: Config, layout: Layout) -> StageLog:
    """Every stage in order; returns the stage log."""
    log = StageLog(layout.stages, "demo")
    log.run("prompts", lambda: prepare_prompts(config, layout))
    log.run("judges", lambda: train_judges(config, layout))
    for method in methods(config, layout):
        log.run(f"train {method.name}", lambda m=method: train_policy(m))
    log.run("tournament", lambda: run_tournament(config, layout))
    return log
