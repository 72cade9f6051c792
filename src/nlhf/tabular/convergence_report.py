"""Markdown tables and PNG plots of the convergence study (matplotlib, no display needed).

Rows are :class:`nlhf.tabular.convergence.Row` objects: ``game``, ``case`` (with ``label``,
``metric``, ``claim``), ``curves`` (name ↦ error per iteration), ``measured`` and ``holds``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from nlhf.files import atomic_path

FLOOR = 1e-17  # plotted errors are clipped here (rounding level is ~1e-16)
METRICS = {
    "kl": "KL(π*‖π_t)",
    "kl_limit": "KL(π_T‖π_t)",
    "gap": "gap, last iterate",
    "gap_avg": "gap, average iterate",
}
CONTEXT = {"kl": "gap", "kl_limit": "kl", "gap": "gap_avg", "gap_avg": "gap"}


def rates_table(rows: list) -> str:
    """One markdown row per (case, game): the claim, what was measured, and final errors."""
    lines = [
        "| method | game | claim (source) | error | measured | holds | KL(π*‖π_T) | gap last "
        "| gap avg | gap₀ last | gap₀ avg |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    order = {row.case.key: i for i, row in enumerate(rows)}
    for row in sorted(rows, key=lambda r: order[r.case.key]):
        c, claim = row.curves, row.case.claim
        lines.append(
            f"| {row.case.label} | {row.game} | {claim.text} ({claim.source}) "
            f"| {METRICS[row.case.metric]} | {row.measured} | {'yes' if row.holds else '**no**'} "
            f"| {c['kl'][-1]:.1e} | {c['gap'][-1]:.1e} | {c['gap_avg'][-1]:.1e} "
            f"| {c['gap0'][-1]:.1e} | {c['gap0_avg'][-1]:.1e} |"
        )
    return "\n".join(lines)


def noise_table(floors: dict[str, dict[str, float]]) -> str:
    """Noise floor per method (rows) and number of comparisons m (columns), with the slope
    of log floor against log m (−1 when the floor is the oracle's variance)."""
    ms = list(next(iter(floors.values())))
    lines = [
        "| method | " + " | ".join(f"m = {m}" for m in ms) + " | slope in m |",
        "|---|" + "---:|" * (len(ms) + 1),
    ]
    for label, by_m in floors.items():
        slope = np.polyfit(np.log([float(m) for m in ms]), np.log(list(by_m.values())), 1)[0]
        values = " | ".join(f"{by_m[m]:.2e}" for m in ms)
        lines.append(f"| {label} | {values} | {slope:.2f} |")
    return "\n".join(lines)


def _claim_line(ax, row, err: np.ndarray) -> None:
    """Draw the claimed rate beside the curve, anchored 3× above it where the fit starts."""
    claim = row.case.claim
    below = np.flatnonzero(err <= 1e-11)
    end = int(below[0]) if len(below) else len(err)
    if claim.kind == "power":
        start = max(1, (end - 1) // 100)
        t = np.arange(start, len(err))
        line = 3 * err[start] * (t / start) ** -claim.order
        ax.loglog(t, line, "k--", lw=1.1, label=f"claimed t^-{claim.order:g}")
    elif claim.kind in ("linear", "biased") and claim.factor is not None:
        start = max(1, end // 2)
        t = np.arange(start, min(len(err), 2 * end + 10))
        line = 3 * err[start] * claim.factor ** (t - start)
        ax.loglog(t, line, "k--", lw=1.1, label=f"claimed {claim.factor:.3g}^t")


def plot_rates(rows: list, path: str | Path, title: str) -> Path:
    """One log-log panel per case: its error curve, the claimed rate, and in grey the other
    iterate's curve for context."""
    cols = 4
    nrows = int(np.ceil(len(rows) / cols))
    fig = Figure(figsize=(4.3 * cols, 3.1 * nrows))
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax, row in zip(axes.flat, rows, strict=False):
        metric, other = row.case.metric, CONTEXT[row.case.metric]
        err = row.curves[metric]
        t = np.unique(np.geomspace(1, len(err) - 1, 600).astype(int))  # log-spaced points
        ax.loglog(t, np.maximum(row.curves[other][t], FLOOR), color="0.7", lw=1.0,
                  label=METRICS[other])  # fmt: skip
        ax.loglog(t, np.maximum(err[t], FLOOR), lw=1.6, label=METRICS[metric])
        _claim_line(ax, row, err)
        ax.set_title(f"{row.case.label}\n{'holds' if row.holds else 'DOES NOT HOLD'}: "
                     f"{row.measured}", fontsize=8)  # fmt: skip
        ax.set_ylim(FLOOR / 3, max(1.0, float(np.nanmax(err))) * 3)
        ax.set_xlabel("iteration t", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=6, loc="lower left", frameon=False)
    for ax in list(axes.flat)[len(rows) :]:
        ax.axis("off")
    fig.suptitle(f"{title}: error against iteration, with the claimed rate (dashed)")
    # fixed margins: tight_layout would spend seconds measuring every log-scale tick label
    fig.subplots_adjust(left=0.04, right=0.99, bottom=0.05, top=0.93, hspace=0.6, wspace=0.22)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    return Path(path)


def plot_noise(curves: dict[str, dict[int, np.ndarray]], path: str | Path) -> Path:
    """KL(π*‖π_t) with a sampled oracle, one panel per method, one curve per m."""
    fig = Figure(figsize=(3.6 * len(curves), 3.2))
    axes = fig.subplots(1, len(curves), squeeze=False)[0]
    for ax, (label, by_m) in zip(axes, curves.items(), strict=True):
        for m, kl in by_m.items():
            ax.semilogy(np.maximum(kl, FLOOR), lw=1.0, label=f"m = {m}")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("iteration t", fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("KL(π*‖π_t)")
    axes[0].legend(fontsize=7, frameon=False)
    fig.suptitle("sampled oracle: m duels per action and query")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    return Path(path)
