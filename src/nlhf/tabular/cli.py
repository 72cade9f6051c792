"""``nlhf tabular``: run learning dynamics on preference games and compare them with RLHF.

    nlhf tabular                                   # every game, default settings
    nlhf tabular --games cycle,condorcet tau=0.05 steps=5000 --out runs/lab
    nlhf tabular --schedule constant --eta 1       # constant steps: linear rates, Nash-MD biased
    nlhf tabular --study convergence steps=20000   # the Nash family's rates against its claims

The ``dynamics`` study writes ``summary.json`` (config, equilibria, every measure and curve),
``report.md`` (tables) and ``kl.png`` (log KL to the equilibrium against iteration, with
Theorem 1's bound) to --out.  The ``convergence`` study (nlhf.tabular.convergence) runs the
general-preference family (SPPO, INPO, ONPO, online IPO, EGPO, Nash-MP, MMD, magnet reset)
on the random, cycle and Condorcet games and writes ``report.md``, ``summary.json`` and one
rate plot per game; of the options it reads ``steps``, ``seed`` and ``out``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from tqdm.auto import tqdm

from nlhf.config import Checked, option, to_dict
from nlhf.files import atomic_write_json, atomic_write_text, check_folder_option
from nlhf.tabular.convergence import run_study
from nlhf.tabular.experiment import ALGORITHMS, compare, rlhf_gap, rlhf_sweep
from nlhf.tabular.games import GAMES, make_game, reference_policy
from nlhf.tabular.report import game_table, plot_kl, rlhf_table, sweep_table


@dataclass
class Config(Checked):
    """Tabular NLHF lab: exact regularized Nash equilibria, learning dynamics and RLHF on
    matrix preference games P[i, j] = P(i ≻ j).  Writes summary.json, report.md and kl.png."""

    study: Literal["dynamics", "convergence"] = option(
        "dynamics",
        "dynamics: the dynamics below against RLHF on --games; convergence: the Nash family's "
        "measured rates beside each paper's claim (reads steps, seed, out)",
    )
    games: list[str] = option(list(GAMES), f"games to run, any of: {', '.join(GAMES)}")
    n: int = option(
        5,
        "number of actions for the games whose size is free (random, cycle, "
        "cycle-dominated, bradley-terry)",
    )
    seed: int = option(0, "random seed for random games and a random reference policy")
    reference: Literal["uniform", "random"] = option(
        "random", "reference policy μ: uniform, or random (Dirichlet, bounded away from 0)"
    )
    tau: float = option(0.1, "KL regularization τ of the game P(π ≻ π′) − τKL(π‖μ) + τKL(π′‖μ)")
    schedule: Literal["constant", "theorem"] = option(
        "theorem",
        "step sizes: theorem: η_t = 2/(τ(t+2)) (Theorem 1's last-iterate rate), or constant η",
    )
    eta: float = option(1.0, "constant step size η (with schedule=constant); needs η·τ ≤ 1")
    steps: int = option(2000, "iterations T of every algorithm")
    algorithms: list[str] = option(
        list(ALGORITHMS), f"dynamics to run, any of: {', '.join(ALGORITHMS)}"
    )
    ema: float = option(0.1, "Nash-EMA averaging rate α of the opponent (log-space EMA)")
    out: str = option("runs/tabular", "output folder")
    progress: bool = option(True, "show progress bars")

    def check(self) -> None:
        unknown = [g for g in self.games if g not in GAMES]
        if unknown:
            raise ValueError(f"unknown game(s) {unknown}; choose from {', '.join(GAMES)}")
        unknown = [a for a in self.algorithms if a not in ALGORITHMS]
        if unknown:
            raise ValueError(f"unknown algorithm(s) {unknown}; choose from {', '.join(ALGORITHMS)}")
        self.at_least(2, "n")
        self.at_least(1, "steps")
        if not (math.isfinite(self.tau) and self.tau > 0):
            raise ValueError(f"tau must be a finite number > 0, got {self.tau}")
        if self.schedule == "constant" and not (math.isfinite(self.eta) and self.eta > 0):
            raise ValueError(f"eta must be a finite number > 0, got {self.eta}")
        if not 0 < self.ema <= 1:
            raise ValueError(f"ema must be in (0, 1], got {self.ema}")
        if self.schedule == "constant" and self.eta * self.tau > 1:
            raise ValueError(
                f"eta·tau must be ≤ 1, got {self.eta}·{self.tau} = {self.eta * self.tau:g}"
            )
        check_folder_option("out", self.out)


def _curve_points(curve: np.ndarray, points: int = 200) -> dict[str, list]:
    """A log-spaced subsample of a KL curve, small enough for JSON."""
    idx = np.unique(np.geomspace(1, len(curve), points).astype(int) - 1)
    return {"t": idx.tolist(), "kl": curve[idx].tolist()}


def run_convergence(config: Config) -> int:
    out = Path(config.out)
    summary = run_study(out, steps=config.steps, seed=config.seed)
    print(f"{len(summary['rows'])} cases in {summary['seconds']:.1f} s")
    print(f"report: {out / 'report.md'}\nsummary: {out / 'summary.json'}")
    return 0


def run(config: Config) -> int:
    if config.study == "convergence":
        return run_convergence(config)
    out = Path(config.out)
    results = []
    bar = tqdm(config.games, desc="games", unit="game", disable=not config.progress)
    for name in bar:
        bar.set_postfix_str(name)
        game = make_game(name, config.n, config.seed)
        mu = reference_policy(game.n, config.reference, config.seed)
        results.append(
            compare(
                game,
                mu,
                tau=config.tau,
                eta=config.eta,
                steps=config.steps,
                algorithms=config.algorithms,
                schedule=config.schedule,
                ema=config.ema,
                progress=config.progress and config.steps >= 20000,
            )
        )

    summary = {"config": to_dict(config), "games": {}}
    sweeps = {r.game.name: rlhf_sweep(r.game, r.mu) for r in results}
    sections = [
        "# Tabular NLHF lab",
        "",
        f"τ = {config.tau:g}, {config.steps} steps, step size "
        + ("η_t = 2/(τ(t+2))" if config.schedule == "theorem" else f"η = {config.eta:g}")
        + f", reference μ: {config.reference}.  π* is the exact regularized Nash equilibrium; "
        "exploitability (τ) is max_π′[P(π′ ≻ π) − τKL(π′‖μ)] + τKL(π‖μ) − ½, zero only at π*; "
        "exploitability (τ=0) is max_y P(y ≻ π) − ½.",
        "",
        "## RLHF against the Nash equilibrium",
        "",
        rlhf_table(results),
        "",
        "At τ > 0 the equilibrium trades win rate for staying close to μ, so P(π* ≻ π_RLHF) can "
        "fall below ½; the regularized exploitability is the fair yardstick.  As τ shrinks, the "
        "two answers coincide on Bradley–Terry-consistent games and stay apart on the others "
        "(total variation distance between π_RLHF and π*):",
        "",
        sweep_table(sweeps),
        "",
        "![KL to the Nash equilibrium](kl.png)",
    ]
    for result in results:
        summary["games"][result.game.name] = {
            "description": result.game.description,
            "P": result.game.P.tolist(),
            "mu": result.mu.tolist(),
            "pi_star": result.pi_star.tolist(),
            "bradley_terry_reward": result.reward.tolist(),
            "rlhf_vs_nash": rlhf_gap(result),
            "rlhf_tv_by_tau": {str(k): v for k, v in sweeps[result.game.name].items()},
            "policies": {row.name: row.as_dict() for row in result.rows},
            "kl_curves": {k: _curve_points(v) for k, v in result.curves.items()},
        }
        sections += [
            "",
            f"## {result.game.name}: {result.game.description}",
            "",
            game_table(result),
        ]
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(out / "report.md", "\n".join(sections) + "\n")
    plot_kl(results, out / "kl.png", config.schedule)
    print("\n".join(sections[4:14]))
    print(
        f"\nreport: {out / 'report.md'}\nplot:   {out / 'kl.png'}\nsummary: {out / 'summary.json'}"
    )
    return 0
