"""``nlhf control demo``: RLHF and NLHF from the same label budget on one game, side by side.

    nlhf control demo                         # CartPole, 3 minutes per route, oracle labels
    nlhf control demo --minutes 1 --labeler noisy --budget 500 --env Acrobot-v1

1. three runs of at most ``minutes`` each (a run stops once it reaches ``target_return``) into
   ``<out>/{ppo,rlhf,nlhf}``: PPO on the true reward (the
   reference curve), the RLHF route (reward model + PPO) and the NLHF route (preference model
   + Nash-MD-PG), both routes with the same labeler and label budget;
2. each policy's true return over ``episodes`` episodes with a 95% interval
   (:func:`nlhf.eval.stats.mean_interval`);
3. the two routes head to head under the demo's labeler (:func:`nlhf.control.eval_cli.head_to_head`:
   ``pairs`` shared start states, a continuation of each policy from each), with the verdict
   decided by the 95% interval; under ``--labeler population`` this is the answer to "which
   route wins under annotators whose majority cycles";
4. ``report.md``: the table (return, interval, labels used, steps, wall time), ``curves.png``
   (true episode return, the policy's entropy and its KL to μ per step against training
   minutes, so a collapse shows) and one GIF clip per policy (``clip-<run>.gif``: the game's
   ``render()`` frames where it draws them, else :func:`~nlhf.control.human.observation_frame`);
   a clip that fails is named missing, with why, and the run's numbers are kept.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nlhf.config import option
from nlhf.control import ppo, require, routes
from nlhf.control.envs import check_restorable, make_env, spec_of
from nlhf.control.eval_cli import head_to_head
from nlhf.control.human import observation_frame
from nlhf.control.labelers import make_labeler
from nlhf.control.rollout import episode_returns
from nlhf.eval.report import format_interval, markdown_table
from nlhf.eval.stats import mean_interval
from nlhf.files import atomic_path, atomic_write_text
from nlhf.label.clips import gif_bytes
from nlhf.reporting import curve, figure, read_metrics, save_png, verdict


@dataclass
class Config:
    """The RLHF and NLHF routes against each other on one game from one label budget."""

    env: str = option("CartPole-v1", "gymnasium id with discrete actions")
    minutes: float = option(3.0, "training minutes of each of the three runs, at most")
    target_return: float = option(
        475.0,
        "stop a run once its last 20 episodes average this (CartPole's solved; 0: train all "
        "the minutes)",
    )
    labeler: str = option("oracle", "labeler of both routes: oracle, a B-Pref teacher, population")
    budget: int = option(1000, "labels each route may use")
    episodes: int = option(50, "evaluation episodes per policy")
    clip_steps: int = option(200, "steps of each policy's GIF clip")
    pairs: int = option(200, "start states of the routes' head-to-head under the labeler (0: none)")
    pair_steps: int = option(50, "steps of each continuation in the head-to-head")
    seed: int = option(0, "seed of the runs (evaluation uses seed + 1)")
    out: str = option("runs/control-demo", "output folder: report.md, curves.png, clips, runs")
    progress: bool = option(True, "show progress bars")


def clip(policy: Any, env_id: str, steps: int, seed: int) -> bytes:
    """A GIF of one episode (at most ``steps`` steps) of ``policy``, actions sampled, at most
    25 frames a second."""
    env = make_env(env_id, seed, render=True)
    obs, _ = env.reset(seed=seed)
    generator = torch.Generator().manual_seed(seed)
    frames: list[np.ndarray] = []
    rendered = True
    for _ in range(steps):
        if rendered:
            try:  # ALE draws itself; classic control needs pygame, MinAtar seaborn
                frames.append(np.asarray(env.render(), np.uint8))
            except Exception:
                rendered = False
        if not rendered:
            frames.append(observation_frame(env_id, obs))
        with torch.no_grad():
            p = torch.softmax(policy.logits(torch.as_tensor(obs, dtype=torch.float32)), -1)
        action = int(torch.multinomial(p, 1, generator=generator))
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    fps = spec_of(env).fps
    env.close()
    every = max(1, round(fps / 25))
    return gif_bytes(frames[::every], fps=fps / every)


def run(config: Config) -> int:
    require("gymnasium")
    if config.pairs:  # before any training: the head-to-head continues saved states
        check_restorable(config.env)
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    out = Path(config.out)
    shared = dict(
        env=config.env, seed=config.seed, steps=100_000, time_limit=config.minutes,
        target_return=config.target_return,
        progress=config.progress, tensorboard=False,
    )  # fmt: skip
    labelled = dict(labeler=config.labeler, budget=config.budget)
    runs = {
        "ppo": (ppo.Config(out=str(out / "ppo"), **shared), None),
        "rlhf": (routes.RLHFConfig(out=str(out / "rlhf"), **shared, **labelled), routes.train),
        "nlhf": (routes.NLHFConfig(out=str(out / "nlhf"), **shared, **labelled), routes.train),
    }
    rows, policies, clips = {}, {}, {}
    for name, (cfg, train) in runs.items():
        start = time.perf_counter()
        algorithm, _ = ppo.train(cfg) if train is None else train(cfg)
        seconds = time.perf_counter() - start
        policies[name] = algorithm.policy
        returns = episode_returns(algorithm.policy, config.env, config.episodes, config.seed + 1)
        labels = algorithm.labelling.buffer.added if train is not None else None
        rows[name] = {
            "return": mean_interval(returns).as_dict(),
            "labels": labels,
            "steps": algorithm.trainer.steps_done,
            "seconds": seconds,
        }
        try:  # a clip is not worth the run: a failing one is reported missing
            gif = clip(algorithm.policy, config.env, config.clip_steps, config.seed + 1)
            with atomic_path(out / f"clip-{name}.gif") as temp:
                temp.write_bytes(gif)
            clips[name] = f"![{name}](clip-{name}.gif)"
        except Exception as exc:
            clips[name] = f"clip missing ({type(exc).__name__}: {exc})"
    games = {}
    if config.pairs:
        judge = make_labeler(config.labeler)
        p = head_to_head(
            policies["nlhf"], policies["rlhf"], config.env, judge, config.pairs,
            warmup=100, length=config.pair_steps, seed=config.seed + 1,
        )  # fmt: skip
        games["nlhf vs rlhf"] = mean_interval(np.asarray(p), bounds=(0.0, 1.0)).as_dict()
    plot(out, list(runs), config.target_return)
    results = {**rows, "head_to_head": games}
    atomic_write_text(out / "results.json", json.dumps(results, indent=2) + "\n")
    atomic_write_text(out / "report.md", report(config, rows, games, clips))
    print(f"nlhf control demo: {out}/report.md")
    return 0


LABELS = {"ppo": "PPO, true reward", "rlhf": "RLHF: r̂ + PPO", "nlhf": "NLHF: P̂"}
COLOURS = {"ppo": "tab:blue", "rlhf": "tab:orange", "nlhf": "tab:green"}


PANELS = {
    "episode_return": "true episode return (last 20 episodes)",
    "entropy": "policy entropy (nats)",
    "kl_per_step": "KL(π‖μ) per step (nats)",
}
"""The logged metric of each panel of ``curves.png`` (PPO logs no KL to μ)."""


def plot(out: Path, names: list[str], target: float = 475.0) -> Path:
    """Each run's :data:`PANELS` against its training minutes (``target``: a grey line where
    the returns reach it)."""
    fig, axes = figure(len(PANELS), (15, 4))
    rows = {name: read_metrics(out / name / "metrics.jsonl") for name in names}
    for ax, (key, title) in zip(axes, PANELS.items(), strict=True):
        for name in names:
            x, y = curve(rows[name], key)
            if len(x):
                style = "--" if name == "ppo" else "-"
                ax.plot(x, y, label=LABELS[name], linestyle=style, color=COLOURS[name])
        ax.set_xlabel("training minutes")
        ax.set_title(title, fontsize=10)
        if ax.get_lines():
            ax.legend()
    low, high = axes[0].get_ylim()
    if target and low <= target <= high:
        axes[0].axhline(target, color="grey", linewidth=0.5)
    return save_png(fig, out / "curves.png", dpi=120)


def report(
    config: Config,
    rows: dict[str, Any],
    games: dict[str, Any] | None = None,
    clips: dict[str, str] | None = None,
) -> str:
    """The markdown of ``report.md``; ``clips``: each run's clip line (default: its GIF)."""
    table = [
        [
            name,
            format_interval(r["return"], 1),
            "—" if r["labels"] is None else str(r["labels"]),
            str(r["steps"]),
            f"{r['seconds']:.0f}",
        ]
        for name, r in rows.items()
    ]
    heads = ["run", "true return", "labels used", "steps", "wall seconds"]
    lines = [
        f"# RLHF against NLHF on {config.env}",
        "",
        f"Labeler {config.labeler}, label budget {config.budget} per route, {config.minutes:g} "
        f"minutes of training per run; true return over {config.episodes} episodes "
        "(mean, 95% interval).",
        "",
        *markdown_table(heads, table),
    ]
    for game in (games or {}).values():
        lines += [
            "",
            f"Head to head under the {config.labeler} labeler: from {game['n']} shared start "
            f"states each policy plays {config.pair_steps} steps and the labeler compares the "
            f"two segments; {verdict(game, 'NLHF', 'RLHF', 3)}.",
        ]
    lines += ["", "True return, entropy and KL(π‖μ) per step over training:", ""]
    lines += ["![curves](curves.png)", ""]
    clips = clips or {name: f"![{name}](clip-{name}.gif)" for name in rows}
    lines += [f"{name}: {clips[name]}" for name in rows]
    return "\n".join(lines) + "\n"
