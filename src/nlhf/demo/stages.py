"""The stages of ``nlhf demo`` in order (:func:`stages`), each one idempotent: a stage that
finished is skipped, a stage that was interrupted continues from its trainers' checkpoints."""

from __future__ import annotations

import importlib
from functools import partial
from pathlib import Path
from typing import Any

from nlhf.data import load_prompts
from nlhf.demo.config import Config
from nlhf.demo.plan import (
    Method,
    frontier_runs,
    imdb_judge_configs,
    methods,
    tournament_entrants,
    tournament_judges,
)
from nlhf.lm_stages import frontier, tournament, train_judges, write_prompts
from nlhf.reporting import read_metrics
from nlhf.resumable import RunFolder, Stages

FRONTIER = "frontier"
"""The frontier's folder in the run (frontier.json, frontier.md, frontier.png)."""


def train_policy(method: Method) -> dict[str, Any]:
    """One method's trainer, which resumes from its own checkpoints."""
    importlib.import_module(type(method.config).__module__).run(method.config)
    rows = read_metrics(Path(method.config.out) / "metrics.jsonl")
    return {"steps": rows[-1]["step"] if rows else 0}


def run_tournament(config: Config, layout: RunFolder) -> dict[str, Any]:
    """Reference and trained policies on the held-out prompts, judged by VADER and the
    preference model (every pair of samples compared)."""
    result = tournament(
        config,
        tournament_entrants(config, layout),
        [p.content for p in load_prompts(layout.eval_prompts)],
        tournament_judges(config, layout),
        config.samples_per_prompt,
        show_samples=4,
        out=layout.tournament,
    )
    return {"seconds_inside": result.seconds}


def run_frontier(config: Config, layout: RunFolder) -> dict[str, Any]:
    """Every checkpoint of PPO's and Nash-MD-PG's runs on the held-out prompts under VADER
    (no method trained on it): the frontier and the head-to-head at matched KL."""
    result = frontier(
        config,
        frontier_runs(config, layout),
        [p.content for p in load_prompts(layout.eval_prompts)],
        "vader",
        config.frontier_samples,
        config.targets,
        config.best_of_n,
        layout.root / FRONTIER,
    )
    return {"points": len(result.points)}


def stages(config: Config, layout: RunFolder) -> Stages:
    """Disjoint IMDB openings (``eval_prompts`` held out for the tournament), both judges, every
    method, the tournament."""
    prompts = {layout.eval_prompts: config.eval_prompts, layout.train_prompts: config.train_prompts}
    return {
        "prompts": lambda: write_prompts(config.seed, prompts),
        "judges": lambda: train_judges(imdb_judge_configs(config, layout)),
        **{f"train {m.name}": partial(train_policy, m) for m in methods(config, layout)},
        "tournament": lambda: run_tournament(config, layout),
        "frontier": lambda: run_frontier(config, layout),
    }
