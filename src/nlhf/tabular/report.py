"""Markdown tables and PNG plots for tabular experiments (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

from nlhf.files import atomic_path
from nlhf.tabular.experiment import ALGORITHMS, GameResult, rlhf_gap

ROW_LABELS = {name: label for name, (label, _) in ALGORITHMS.items()}
ROW_LABELS |= {"rlhf": "RLHF (Bradley–Terry reward, π ∝ μ·e^{r/τ})", "reference": "reference μ"}
KL_FLOOR = 1e-16  # rounding level of the KL computation; plotted values are clipped to it


def game_table(result: GameResult) -> str:
    """One markdown table: the final policy of every algorithm, RLHF and μ, measured."""
    lines = [
        "| policy | KL(π*‖π) | exploitability (τ) | exploitability (τ=0) | P(π ≻ π*) | P(π ≻ μ) "
        "| KL(π‖μ) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result.rows:
        lines.append(
            f"| {ROW_LABELS.get(row.name, row.name)} | {row.kl_to_nash:.2e} | "
            f"{row.exploitability:.2e} | {row.exploitability_unregularized:.4f} | "
            f"{row.win_vs_nash:.4f} | {row.win_vs_reference:.4f} | {row.kl_to_reference:.4f} |"
        )
    return "\n".join(lines)


def rlhf_table(results: list[GameResult]) -> str:
    """RLHF's answer against the Nash equilibrium, one row per game."""
    lines = [
        "| game | BT fit error max\\|σ(r_i−r_j)−P_ij\\| | TV(π_RLHF, π*) | exploitability of "
        "π_RLHF (τ) | P(π* ≻ π_RLHF) |",
        "|---|---:|---:|---:|---:|",
    ]
    for result in results:
        gap = rlhf_gap(result)
        lines.append(
            f"| {result.game.name} | {gap['reward_fit_error']:.2e} | {gap['tv_rlhf_to_nash']:.4f} "
            f"| {gap['rlhf_exploitability']:.2e} | {gap['nash_win_vs_rlhf']:.4f} |"
        )
    return "\n".join(lines)


def sweep_table(sweeps: dict[str, dict[float, float]]) -> str:
    """TV(π_RLHF, π*) per game (rows) and τ (columns)."""
    taus = sorted(next(iter(sweeps.values())), reverse=True)
    lines = [
        "| game | " + " | ".join(f"τ = {tau:g}" for tau in taus) + " |",
        "|---|" + "---:|" * len(taus),
    ]
    for name, by_tau in sweeps.items():
        lines.append(f"| {name} | " + " | ".join(f"{by_tau[tau]:.4f}" for tau in taus) + " |")
    return "\n".join(lines)


def plot_kl(results: list[GameResult], path: str | Path, schedule: str) -> Path:
    """log KL(π*‖π_t) against t for every algorithm, one panel per game, with Theorem 1's bound."""
    cols = min(3, len(results))
    rows = int(np.ceil(len(results) / cols))
    fig = Figure(figsize=(5.2 * cols, 3.8 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, result in zip(axes.flat, results, strict=False):
        steps = np.arange(len(result.bound))
        for name, curve in result.curves.items():
            ax.semilogy(steps, np.maximum(curve, KL_FLOOR), label=ROW_LABELS[name], lw=1.4)
        ax.semilogy(steps, result.bound, "k--", lw=1.2, label="Theorem 1 bound for Nash-MD")
        if schedule == "theorem":
            t = steps[1:]
            ax.semilogy(t, 8 / (result.tau**2 * (t + 1)), "k:", lw=1.2, label="8/(τ²(t+1))")
            ax.set_xscale("log")
        ax.set_title(f"{result.game.name} (n={result.game.n}, τ={result.tau:g})", fontsize=10)
        ax.set_xlabel("iteration t")
        ax.set_ylabel("KL(π* ‖ π_t)")
        ax.set_ylim(KL_FLOOR / 2, max(1.0, float(result.bound.max())) * 3)
        ax.grid(True, which="major", alpha=0.3)
    for ax in list(axes.flat)[len(results) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=9, frameon=False
    )
    fig.tight_layout(rect=(0, 0.08 if rows == 1 else 0.05, 1, 1))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    return Path(path)
