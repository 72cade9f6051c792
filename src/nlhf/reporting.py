"""What a run's ``report.md`` is made of, shared by ``nlhf demo``, ``nlhf experiment`` and
``nlhf control demo``.

    Report(title, verdicts, [(heading, lines), ...]).markdown(command, layout)
    verdict(compare(tournament, "vader", "nash-md", "reference"), "nash-md", "reference")
    training_table(curves, titles, per_step, stages)   # steps, judged, minutes, KL, signal
    fig, axes = figure(2, (14, 4)); draw_lines(axes[0], {name: curve(rows, "kl")}, …)

A report is the command that ran it, its wall time, ``## Verdict``, numbered sections and the
saved options, all read from the run folder (``stages.json``, the trainers' ``metrics.jsonl``,
``tournament/tournament.json``), so running a finished run's command again rebuilds it.  Every
verdict is decided by its 95% interval alone: a policy *beats* another only when the whole
interval of P(policy ≻ other) lies above ½.  Intervals are written by
:func:`nlhf.eval.report.format_interval`, tables by :func:`nlhf.eval.report.markdown_table`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from nlhf.eval.report import (
    escape_markdown,
    format_interval,
    markdown_table,
    matrix_table,
    worst_case_columns,
)
from nlhf.files import atomic_path
from nlhf.machine import speed_line

Section = tuple[str, list[str]]
"""A report section: its heading (numbered in order) and its markdown lines."""


def read_metrics(path: Path) -> list[dict[str, float]]:
    """The lines of a trainer's ``metrics.jsonl`` (empty when it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class Report:
    """``report.md``: title, command, wall time, verdicts, numbered sections, saved options."""

    title: str
    verdicts: list[str]
    sections: list[Section]

    def markdown(self, command: str, layout: Any) -> str:
        """The report of the run in ``layout`` (a :class:`nlhf.resumable.RunFolder`)."""
        stages = layout.finished()
        total = sum(s["seconds"] for s in stages.values()) / 60.0
        per_stage = ", ".join(f"{name} {s['seconds'] / 60:.1f}" for name, s in stages.items())
        lines = [
            f"# {self.title}",
            "",
            f"Command: `{command}`",
            "",
            f"Wall time {total:.1f} minutes ({per_stage} minutes) {speed_line(stages)}.",
            "",
            "## Verdict",
            "",
            "Each line is decided by its 95% interval alone: a policy *beats* another only when "
            "the whole interval of P(policy ≻ other) lies above ½.",
            "",
            *self.verdicts,
        ]
        saved = ["```yaml", layout.config.read_text().rstrip(), "```"]
        for number, (heading, body) in enumerate([*self.sections, ("Configuration", saved)], 1):
            lines += ["", f"## {number}. {heading}", "", *body]
        return "\n".join([*lines, ""])


# --------------------------------------------------------------------------- verdicts


def compare(tournament: dict[str, Any], judge: str, row: str, col: str) -> dict[str, float]:
    """P(row ≻ col) under ``judge`` with its interval, from ``tournament.json``."""
    names = [p["name"] for p in tournament["policies"]]
    a, b = names.index(row), names.index(col)
    j = tournament["judges"][judge]
    return {"mean": j["win_rate"][a][b], "low": j["low"][a][b], "high": j["high"][a][b]}


def verdict(estimate: dict[str, Any], row: str, col: str, digits: int = 2) -> str:
    """``P(row ≻ col) = mean [low, high]`` and who won: decided only when the interval
    excludes ½."""
    low, high = estimate.get("low"), estimate.get("high")
    text = f"P({row} ≻ {col}) = {format_interval(estimate, digits)}"
    if low is not None and low > 0.5:
        return f"{text}: **{row} beats {col}**"
    if high is not None and high < 0.5:
        return f"{text}: **{col} beats {row}**"
    return f"{text}: no significant difference (the interval contains ½)"


def verdict_lines(tournament: dict[str, Any], pairs: list[tuple[str, str]]) -> list[str]:
    """One line per judge of the tournament and (row, column) of ``pairs``."""
    return [
        f"- `{judge}`: " + verdict(compare(tournament, judge, row, col), row, col)
        for judge in tournament["judges"]
        for row, col in pairs
    ]


# --------------------------------------------------------------------------- training


def tail_mean(rows: list[dict[str, float]], key: str) -> float:
    """The mean of ``key`` over the last 10% of a trainer's logged steps (at least one)."""
    tail = rows[-max(1, len(rows) // 10) :]
    return float(np.mean([r[key] for r in tail if key in r] or [math.nan]))


def signal(rows: list[dict[str, float]]) -> str:
    """A trainer's own signal at the end: the reward (PPO), P(y ≻ y′) (Nash), P(y_w ≻ y_l)
    (online DPO/IPO), else its loss (SPPO, DNO)."""
    for key, label in (("reward", "reward"), ("win_rate", "P(y ≻ y′)")):
        if key in rows[-1]:
            return f"{label} {tail_mean(rows, key):.3f}"
    if "judge_chosen_prob" in rows[-1]:
        return f"P(y_w ≻ y_l) {tail_mean(rows, 'judge_chosen_prob'):.3f}"
    return f"loss {tail_mean(rows, 'loss'):.3f}"


def training_table(
    curves: dict[str, list[dict[str, float]]],
    titles: dict[str, str],
    per_step: dict[str, int],
    stages: dict[str, Any],
) -> list[str]:
    """One row per trained policy (``curves``: its logged steps by name): steps, judged
    comparisons (``per_step`` per step), training and stage minutes, KL and signal at the end."""
    heads = ["policy", "steps", "judged", "training min", "stage min", "KL at the end", "signal"]
    rows = []
    for name, logged in curves.items():
        if not logged:
            rows.append([titles[name], "0", "0", "–", "–", "–", "–"])
            continue
        steps = int(logged[-1]["step"])
        stage = stages.get(f"train {name}", {}).get("seconds", math.nan)
        rows.append(
            [
                titles[name],
                str(steps),
                f"{steps * per_step[name]:,}",
                f"{sum(r.get('step_seconds', 0.0) for r in logged) / 60:.1f}",
                f"{stage / 60:.1f}",
                f"{tail_mean(logged, 'kl'):.2f}",
                signal(logged),
            ]
        )
    return [
        *markdown_table(heads, rows, "lrrrrrl"),
        "",
        "*Judged*: the judge calls of the run (scores for PPO, pairwise comparisons for the "
        "rest). *Training min*: the steps' own time; *stage min*: with loading and saving. KL: "
        "the mean exact KL(π‖μ) of a step's samples (over the whole vocabulary at every "
        "position, summed along each completion). Values at the end: the mean over the last "
        "10% of steps.",
    ]


# --------------------------------------------------------------------------- tournament


def tournament_tables(tournament: dict[str, Any]) -> list[str]:
    """Each judge's matrix of P(row ≻ column), then each policy's mean score under every
    score judge (its change from the reference), KL to the reference and length."""
    names = [p["name"] for p in tournament["policies"]]
    lines = []
    for judge, j in tournament["judges"].items():
        mean, low, high = (
            np.array([[math.nan if v is None else v for v in row] for row in j[key]])
            for key in ("win_rate", "low", "high")
        )
        rest = [("vs rest", [format_interval(e) for e in j["versus_rest"]])]
        if "worst_case" in j:  # tournaments written before worst cases were measured lack it
            rest += worst_case_columns(
                names, j["worst_case"], j["worst_opponent"], j["best_response"]
            )
        table = matrix_table(names, mean, low, high, "P(row ≻ col)", rest)
        lines += ["", f"**Judge `{judge}`**", "", table]
    scored = [n for n, j in tournament["judges"].items() if j["kind"] == "score"]
    reference = tournament["policies"][0]["scores"]

    def score(p: dict[str, Any], judge: str) -> str:
        gain = p["scores"][judge]["mean"] - reference[judge]["mean"]
        return f"{format_interval(p['scores'][judge], 3)} ({gain:+.3f})"

    rows = [
        [
            f"**{escape_markdown(p['name'])}**",
            *[score(p, judge) for judge in scored],
            format_interval(p["kl"]),
            format_interval(p["length"], 1),
        ]
        for p in tournament["policies"]
    ]
    heads = ["policy", *[f"`{judge}`" for judge in scored], "KL to reference", "length (tokens)"]
    return [
        *lines,
        "",
        "Mean score of each policy's completions under each score judge (its change from the "
        "reference in parentheses), KL to the reference and length:",
        "",
        *markdown_table(heads, rows),
    ]


# --------------------------------------------------------------------------- plots


def curve(rows: list[dict[str, float]], key: str, x: str = "minutes") -> tuple[Any, Any]:
    """(x, ``key``) at every logged step that has ``key``; ``x`` is the training minutes so far
    (the steps' own seconds) or a logged field such as ``step``."""
    minutes = np.cumsum([r.get("step_seconds", 0.0) for r in rows]) / 60.0
    kept = [i for i, r in enumerate(rows) if key in r]
    xs = minutes[kept] if x == "minutes" else np.array([rows[i][x] for i in kept], dtype=float)
    return xs, np.array([rows[i][key] for i in kept], dtype=np.float64)


def smooth(values: np.ndarray, width: int) -> np.ndarray:
    """Trailing moving average (the first points average what exists so far)."""
    if width <= 1 or len(values) == 0:
        return values
    c = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - width)
    return (c[idx] - c[lo]) / (idx - lo)


def figure(panels: int, size: tuple[float, float]) -> tuple[Any, list[Any]]:
    """A figure of ``panels`` axes side by side (no pyplot: the caller's backend stays)."""
    fig = Figure(figsize=size, layout="constrained")
    return fig, list(fig.subplots(1, panels, squeeze=False)[0])


def draw_lines(
    ax: Any, lines: dict[str, tuple[Any, Any]], title: str, xlabel: str, **style: Any
) -> None:
    """One line per name (those with points), titled, with a grid and a legend."""
    for name, (x, y) in lines.items():
        if len(x):
            ax.plot(x, y, label=name, **style)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)


def save_png(fig: Any, path: Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    return path
