"""``nlhf control eval``: how good trained acting policies are, alone and against each other.

    nlhf control eval --policies runs/rlhf/policy,runs/nlhf/policy --episodes 100
    nlhf control eval --policies a/policy,b/policy --labeler population --pairs 200

1. true return: ``episodes`` whole episodes of each policy (actions sampled, one game copy per
   episode), the mean with its 95% t interval (:func:`nlhf.eval.stats.mean_interval`);
2. head to head, for every two policies A and B: ``pairs`` start states, each reached by
   ``warmup`` steps of A or B (alternately), copied onto two game copies (saved env state);
   A continues on one and B on the other for ``length`` steps (an episode end continues in the
   end state with reward 0, as the routes' segments); the labeler's P(A's segment ≻ B's)
   averaged over the states, with a 95% interval;
3. the tables are printed (the head-to-head also as the tournament's k × k matrix of
   P(row ≻ column)); ``--out`` also writes ``eval.json``, ``eval.md`` and ``heatmap.png``
   (the language-model tournament's heat map).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from nlhf.config import Checked, ConfigError, option
from nlhf.control import require
from nlhf.control.envs import check_restorable
from nlhf.control.labelers import make_labeler
from nlhf.control.labelling import parse_options
from nlhf.control.nash import segments_of
from nlhf.control.policy import ActingPolicy
from nlhf.control.rollout import Runner, episode_returns
from nlhf.control.segments import Segment
from nlhf.eval.report import format_interval, markdown_table, matrix_table, plot_heatmap
from nlhf.eval.stats import mean_interval
from nlhf.files import atomic_write_json, atomic_write_text


@dataclass
class Config(Checked):
    """True returns with 95% intervals, and win rates from paired continuations."""

    policies: list[str] = option([], "policy folders (model.safetensors + config.json), 1 or more")
    env: str = option("CartPole-v1", "gymnasium id the policies play")
    episodes: int = option(100, "episodes per policy for the true return")
    sticky: float | None = option(
        None,
        "probability that the game repeats the previous action (Atari default 0; evaluate at "
        "the setting the policies trained at, ale-py's v5 default is 0.25)",
    )
    labeler: str = option(
        "oracle", "labeler of the head-to-head comparisons: oracle, a B-Pref teacher, population"
    )
    labeler_options: list[str] = option([], "key=value options of the labeler")
    pairs: int = option(100, "start states per pair of policies (0: no head-to-head)")
    warmup: int = option(100, "steps played before a start state is copied")
    length: int = option(200, "steps of each continuation")
    seed: int = option(1, "seed of the evaluation games and of the action sampling")
    out: str = option("", "folder for eval.json and eval.md ('' : print only)")

    def check(self) -> None:
        if not self.policies:
            raise ConfigError("policies: give at least one policy folder")
        twice = sorted({p for p in self.policies if self.policies.count(p) > 1})
        if twice:
            raise ConfigError(f"policies: {twice[0]} is given twice")
        self.at_least(1, "episodes", "length")
        self.at_least(0, "pairs", "warmup")


def head_to_head(
    a: Any,
    b: Any,
    env_id: str,
    labeler: Any,
    pairs: int,
    warmup: int,
    length: int,
    seed: int,
    sticky: float | None = None,
) -> list[float]:
    """P(A ≻ B) under ``labeler`` at each of ``pairs`` start states (module doc, step 2)."""
    runner = Runner(env_id, 2 * pairs, seed, sticky=sticky)
    first = torch.arange(2 * pairs) % 4 < 2  # states 0, 2, … reached by A; 1, 3, … by B

    def driven(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = torch.where(first[:, None], a.logits(obs), b.logits(obs))
        return logits, torch.zeros(len(obs))

    with torch.no_grad():
        if warmup:
            runner.collect(driven, warmup)
        for s in range(pairs):
            runner.restore(2 * s + 1, runner.snapshot(2 * s))
        plays_a = torch.arange(2 * pairs) % 2 == 0

        def paired(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            logits = torch.where(plays_a[:, None], a.logits(obs), b.logits(obs))
            return logits, torch.zeros(len(obs))

        rollout = runner.collect(paired, length)
    runner.close()
    c = segments_of(rollout, list(range(2 * pairs)))

    def segment(i: int) -> Segment:
        return Segment(c.obs[i].numpy(), c.actions[i].numpy(), c.rewards[i].numpy())

    judged = [(segment(2 * s), segment(2 * s + 1)) for s in range(pairs)]
    return labeler.prob(judged).tolist()


def evaluate(config: Config) -> dict[str, Any]:
    """The numbers of the module doc as a dict (``returns``, ``head_to_head``)."""
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    labeler = make_labeler(config.labeler, **parse_options(config.labeler_options))
    if config.pairs and len(config.policies) > 1:  # the head-to-head continues saved states
        check_restorable(config.env, config.sticky)
    policies = [ActingPolicy.load(p) for p in config.policies]
    returns = {
        path: mean_interval(
            episode_returns(p, config.env, config.episodes, config.seed, sticky=config.sticky)
        ).as_dict()
        for path, p in zip(config.policies, policies, strict=True)
    }
    games = []
    for i in range(len(policies)):
        for j in range(i + 1, len(policies)):
            if not config.pairs:
                continue
            p = head_to_head(
                policies[i], policies[j], config.env, labeler, config.pairs, config.warmup,
                config.length, config.seed, config.sticky,
            )  # fmt: skip
            rate = mean_interval(np.asarray(p), bounds=(0.0, 1.0)).as_dict()
            games.append({"a": config.policies[i], "b": config.policies[j], **rate})
    return {
        "env": config.env,
        "labeler": config.labeler,
        "names": short_names(config.policies),
        "returns": returns,
        "head_to_head": games,
    }


def short_names(paths: list[str]) -> list[str]:
    """``runs/x/rlhf/policy`` → ``rlhf`` (a folder's own name otherwise); the paths themselves
    when two short names would clash."""
    names = [Path(p).parent.name if Path(p).name == "policy" else Path(p).name for p in paths]
    return names if len(set(names)) == len(names) else list(paths)


def win_matrix(result: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, low, high) k × k of P(row ≻ column) from the pairwise games (½ on the diagonal,
    1 − P and the mirrored interval below it)."""
    paths = list(result["returns"])
    k = len(paths)
    mean, low, high = np.full((k, k), 0.5), np.full((k, k), np.nan), np.full((k, k), np.nan)
    for g in result["head_to_head"]:
        a, b = paths.index(g["a"]), paths.index(g["b"])
        lo, hi = (math.nan if g[end] is None else g[end] for end in ("low", "high"))
        mean[a, b], low[a, b], high[a, b] = g["mean"], lo, hi
        mean[b, a], low[b, a], high[b, a] = 1 - g["mean"], 1 - hi, 1 - lo
    return mean, low, high


def plot(result: dict[str, Any], path: Path) -> Path:
    """The head-to-head matrix as the language-model tournament draws it."""
    mean, low, high = win_matrix(result)
    rates = SimpleNamespace(mean=mean, low=low, high=high)
    view = SimpleNamespace(names=result["names"], win_rates={result["labeler"]: rates})
    return plot_heatmap(view, path)


def markdown(result: dict[str, Any]) -> str:
    returns = [[path, format_interval(r, 1), str(r["n"])] for path, r in result["returns"].items()]
    lines = [
        f"True return on {result['env']} (mean, 95% interval, episodes):",
        "",
        *markdown_table(["policy", "return", "n"], returns, "lrr"),
    ]
    if result["head_to_head"]:
        games = [
            [g["a"], g["b"], format_interval(g, 3), str(g["n"])] for g in result["head_to_head"]
        ]
        lines += [
            "",
            f"Head to head under the {result['labeler']} labeler, P(A ≻ B) from paired "
            "continuations:",
            "",
            *markdown_table(["A", "B", "P(A ≻ B)", "states"], games, "llrr"),
        ]
        if len(result["returns"]) > 2:
            table = matrix_table(result["names"], *win_matrix(result), "P(row ≻ col)", digits=3)
            lines += ["", table]
    return "\n".join(lines) + "\n"


def run(config: Config) -> int:
    require("gymnasium")
    result = evaluate(config)
    text = markdown(result)
    print(text, end="")
    if config.out:
        atomic_write_json(Path(config.out) / "eval.json", result)
        atomic_write_text(Path(config.out) / "eval.md", text)
        written = "eval.json, eval.md"
        if result["head_to_head"]:
            plot(result, Path(config.out) / "heatmap.png")
            written += ", heatmap.png"
        print(f"→ {config.out}/{written}")
    return 0
