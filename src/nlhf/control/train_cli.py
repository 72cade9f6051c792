"""``nlhf control train``: one preference route on a game, from labels to a saved policy.

    nlhf control train --env CartPole-v1 --route rlhf --labeler oracle
    nlhf control train --route nlhf --labeler noisy --budget 500 --time-limit 3
    nlhf control train --route rlhf --labeler mistake --labeler-options mistake=0.2
    nlhf control train --route nlhf --labeler human --db labels.sqlite   # people label clips
    nlhf control train --route rlhf --trainer n_envs=8,fit_epochs=10    # any route field

The route's own config (:class:`nlhf.control.routes.RLHFConfig`, ``NLHFConfig``) holds every
field of its trainer (PPO or Nash-MD-PG) and of the labelling; this command sets the common
ones and passes ``--trainer key=value`` items on.  Writes into ``--out``: ``policy/`` (the
acting policy), ``metrics.jsonl`` (per step: the true ``episode_return``, ``labels``, the
judge's accuracies, …), ``checkpoints/`` (the same command resumes), ``config.json`` and
``summary.json`` (route, labeler, steps, labels, wall time, last return).  Without gymnasium
the command stops with one line naming ``pip install 'nlhf[control]'``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from nlhf.config import ConfigError, build_config, option
from nlhf.control import require
from nlhf.files import atomic_write_json

Route = Literal["rlhf", "nlhf"]
Labeler = Literal["oracle", "noisy", "mistake", "skip", "myopic", "equal", "population", "human"]
SHARED = (
    "env", "labeler", "labeler_options", "budget", "initial", "seed", "out", "time_limit",
    "checkpoint_every", "resume", "progress", "tensorboard", "db",
)  # fmt: skip


@dataclass
class Config:
    """Train a policy from pairwise segment labels: RLHF (reward model + PPO) or NLHF
    (preference model + Nash-MD-PG)."""

    env: str = option("CartPole-v1", "gymnasium id: CartPole-v1, ALE/Pong-v5, MinAtar/<Game>-v1")
    route: Route = option("rlhf", "rlhf: Bradley–Terry r̂ + PPO; nlhf: P̂ + Nash-MD-PG")
    labeler: Labeler = option(
        "oracle",
        "oracle, a B-Pref teacher (noisy, mistake, skip, myopic, equal), population (CartPole "
        "annotator groups) or human (clips in --db, answered in `nlhf label serve`)",
    )
    labeler_options: list[str] = option(
        [], "key=value options of the labeler, e.g. mistake=0.2 or temperature=0.05"
    )
    budget: int = option(1000, "labels in all over the run")
    initial: int = option(200, "labels from the initial policy, before the first update")
    steps: int = option(
        0, "core steps, one rollout each (0: 300 for rlhf, 250 for nlhf: CartPole in minutes)"
    )
    time_limit: float = option(0.0, "stop after this many minutes of training (0: no limit)")
    seed: int = option(0, "seed of the game copies, the policy, the labels and the fits")
    out: str = option("runs/control-train", "output folder: policy/, metrics.jsonl, summary.json")
    db: str = option("", "labeler=human: the labeling database that `nlhf label serve` serves")
    trainer: list[str] = option(
        [],
        "key=value fields of the route's config (nlhf.control.routes.RLHFConfig or "
        "NLHFConfig: PPO's n_envs, lr…; Nash's states, beta, tau…; segment, fit_epochs…)",
    )
    checkpoint_every: int = option(50, "save a resumable checkpoint every this many steps")
    resume: bool = option(True, "continue from the latest checkpoint in --out if there is one")
    progress: bool = option(True, "show a progress bar")
    tensorboard: bool = option(False, "also write TensorBoard events (<out>/tensorboard)")


DEFAULT_STEPS = {"rlhf": 300, "nlhf": 250}


def route_config(config: Config) -> Any:
    """The route's own config: the shared fields, then the ``trainer`` items."""
    from nlhf.control.routes import NLHFConfig, RLHFConfig

    cls = RLHFConfig if config.route == "rlhf" else NLHFConfig
    values: dict[str, Any] = {name: getattr(config, name) for name in SHARED}
    values["steps"] = config.steps or DEFAULT_STEPS[config.route]
    sources = {name: f"--{name.replace('_', '-')}" for name in values}
    for item in config.trainer:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"trainer: {item!r} is not key=value")
        values[key], sources[key] = raw, "--trainer"
    return build_config(cls, values, sources)


def run(config: Config) -> int:
    require("gymnasium")
    from nlhf.control import routes

    route = route_config(config)
    start = time.perf_counter()
    algorithm, last = routes.train(route)
    seconds = time.perf_counter() - start
    summary = {
        "route": config.route,
        "env": route.env,
        "labeler": config.labeler,
        "steps": algorithm.trainer.steps_done,
        "agent_steps": last.get("agent_steps"),
        "labels": algorithm.labelling.buffer.added,
        "labels_asked": algorithm.labelling.asked,
        "wall_seconds": seconds,
        "episode_return": last.get("episode_return"),
    }
    atomic_write_json(route.out + "/summary.json", summary)
    ret = summary["episode_return"]
    print(
        f"nlhf control train: {config.route} on {route.env}, {summary['steps']} steps, "
        f"{summary['labels']} labels ({config.labeler}), {seconds:.0f} s; "
        f"last return {'n/a' if ret is None else f'{ret:.1f}'} → {route.out}/policy"
    )
    print(json.dumps(summary))
    return 0
