"""``report.md`` and ``results.png`` of a population run, built from the files the stages wrote
(``stages.json``, ``judges/evaluation.json``, ``prediction.json``, the trainers'
``metrics.jsonl``, ``tournament/tournament.json``): :func:`report` is the verdicts and the
sections, :mod:`nlhf.reporting` writes them.

Every verdict is decided by a 95% interval alone: a policy *beats* another only when the whole
interval of P(policy ≻ other) under the population lies above ½.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from nlhf.config import load_yaml
from nlhf.eval.report import completion_tables, escape_markdown, format_interval, markdown_table
from nlhf.eval.stats import mean_interval
from nlhf.experiment.analysis import restricted_game
from nlhf.experiment.config import POLICIES, ROUTE_TITLES, TIMED, Config, Layout
from nlhf.experiment.exact_population import exact_matrix, load_population
from nlhf.experiment.stages import reference_completions
from nlhf.experiment.theory import agreement, worst_cases
from nlhf.models.judges.population import CRITERIA
from nlhf.reporting import (
    Report,
    compare,
    curve,
    draw_lines,
    figure,
    read_metrics,
    save_png,
    tournament_tables,
    training_table,
    verdict,
)
from nlhf.tabular import worst_case

INDEPENDENT_CYCLES = 12 / 216
"""Share of cyclic triples when three criteria rank three items independently at random."""


# --------------------------------------------------------------------------- verdicts


def equilibrium_check(tournament: dict[str, Any], judge: str = "population") -> list[str]:
    """Per policy: is it at or above ½ against every other (point estimates), and is any of
    its losses decided by the interval?"""
    names = [p["name"] for p in tournament["policies"]]
    j = tournament["judges"][judge]
    lines = []
    for a, name in enumerate(names):
        others = [b for b in range(len(names)) if b != a]
        worst = min(others, key=lambda b: j["win_rate"][a][b])
        lost = [names[b] for b in others if j["high"][a][b] is not None and j["high"][a][b] < 0.5]
        unbeaten = all(j["win_rate"][a][b] >= 0.5 for b in others)
        est = format_interval(compare(tournament, judge, name, names[worst]))
        status = (
            "at or above ½ against every other" if unbeaten else f"below ½ against {names[worst]}"
        )
        decided = f"; loses decidedly to {', '.join(lost)}" if lost else ""
        lines.append(f"- **{name}**: {status} (worst: {est} vs {names[worst]}){decided}")
    return lines


def accuracy_verdict(rows: dict[str, Any], key: str) -> str:
    """Whether the preference model's accuracy on ``key`` pairs beats the reward model's
    (their Wilson intervals apart), tied, or cannot be told."""
    pm, rm = rows["preference-model"][key], rows["reward-model"][key]
    if not pm["n"]:
        return "no held-out pairs of this kind"
    if pm["low"] > rm["high"]:
        return "**the preference model is more accurate**"
    if rm["low"] > pm["high"]:
        return "**the reward model is more accurate**"
    return "no significant difference (the intervals overlap)"


def predicted_winner(p: dict[str, Any]) -> str:
    if p["low"] is not None and p["low"] > 0.5:
        return "the theory expects NLHF to win."
    if p["high"] is not None and p["high"] < 0.5:
        return "the theory expects RLHF to win at this τ."
    return "the theory does not decide a winner on these completions."


def verdict_lines(config: Config, layout: Layout, tournament: dict[str, Any]) -> list[str]:
    prediction = json.loads(layout.prediction.read_text())
    evaluation = json.loads(layout.judge_evaluation.read_text())
    p = prediction["nash_vs_rlhf"]

    def population(row: str, col: str) -> str:
        return verdict(compare(tournament, "population", row, col), row, col)

    return [
        "- Under the population (the ground truth): " + population("nash-md", "ppo"),
        f"- At equal wall-clock time ({TIMED}: Nash-MD-PG for as many steps as fit in PPO's "
        "training time), under the population: " + population(TIMED, "ppo"),
        "- The controls, under the population: " + population("nash-md-exact", "ppo-exact"),
        f"- The restricted-game prediction: P(π* ≻ π_RLHF) = {format_interval(p, 3)} over "
        f"{prediction['prompts']} held-out prompts (K = {prediction['K']}, τ = {config.tau:g}), "
        f"{format_interval(prediction['nash_vs_rlhf_equal_kl'], 3)} at equal KL to μ: "
        + predicted_winner(p),
        "- Learned judges on held-out pairs in cyclic triples (against the exact majority): "
        + accuracy_verdict(evaluation["judges"], "cyclic_majority"),
    ]


# --------------------------------------------------------------------------- plot


def plot(
    curves: dict[str, list[dict[str, float]]],
    batch_size: int,
    tournament: dict[str, Any],
    predicted: dict[str, Any],
    path: Path,
) -> Path:
    """KL and training signal against judged comparisons; population win rates with the
    restricted game's prediction."""
    fig, axes = figure(3, (15, 4))
    for ax, key, title in (
        (axes[0], "kl", "KL(π‖μ) of sampled completions (nats)"),
        (axes[1], None, "training signal: reward (PPO), P(y ≻ y′) (Nash)"),
    ):
        lines = {}
        for name, rows in curves.items():
            x, y = curve(rows, key or ("reward" if name.startswith("ppo") else "win_rate"), "step")
            lines[name] = (x * batch_size, y)
        draw_lines(ax, lines, title, "judged comparisons", marker=".")
    bars = [(r, "reference") for r in POLICIES] + [
        ("nash-md", "ppo"),
        ("nash-md-exact", "ppo-exact"),
        (TIMED, "ppo"),
    ]
    means, errors = [], [[], []]
    for row, col in bars:
        e = compare(tournament, "population", row, col)
        means.append(e["mean"])
        errors[0].append(e["mean"] - (e["low"] if e["low"] is not None else e["mean"]))
        errors[1].append((e["high"] if e["high"] is not None else e["mean"]) - e["mean"])
    ax = axes[2]
    ax.bar(range(len(bars)), means, yerr=errors, capsize=4, color="tab:blue", alpha=0.7)
    ax.axhline(0.5, color="black", lw=0.8)
    if predicted.get("mean") is not None:
        ax.axhline(predicted["mean"], color="tab:red", ls="--", label="predicted P(π* ≻ π_RLHF)")
        ax.legend(fontsize=8)
    ax.set_xticks(range(len(bars)), [f"{a}\nvs {b}" for a, b in bars], fontsize=7)
    ax.set_title("P(row ≻ column) under the population, 95% intervals", fontsize=10)
    return save_png(fig, path)


# --------------------------------------------------------------------------- sections


def population_section(config: Config, layout: Layout) -> list[str]:
    groups = []
    for g in load_yaml(layout.config)["population_definition"]["groups"]:
        name = str(g["criterion"])
        described = f"{name}: {CRITERIA[name][1]}" if name in CRITERIA else name
        weight, temperature = float(g.get("weight", 1.0)), float(g.get("temperature", 1.0))
        groups.append(
            [
                escape_markdown(str(g.get("name", name))),
                escape_markdown(described),
                f"{weight:g}",
                f"{temperature:g}",
            ]
        )
    cycles = json.loads(layout.prediction.read_text())["cycles"]
    counts = []
    for part, k in (("train", config.samples), ("eval", config.eval_samples)):
        c = cycles[part]
        share = c["cyclic"] / c["triples"] if c["triples"] else math.nan
        where = "training" if part == "train" else "held-out"
        counts.append(
            [
                f"{where} (K = {k})",
                str(c["prompts"]),
                f"{c['cyclic']} of {c['triples']}",
                f"{share:.1%}",
                str(c["prompts_with_a_cycle"]),
            ]
        )
    heads = ["completions", "prompts", "cyclic triples", "share", "prompts with a cycle"]
    return [
        f"`population:{config.population}`: each group prefers y to y′ with probability "
        "σ((s(y) − s(y′))/T); the population's P is the weighted mean over groups, and each "
        "label comes from one annotator drawn by weight.",
        "",
        *markdown_table(["group", "criterion", "weight", "temperature T"], groups, "llrr"),
        "",
        "Cyclic (intransitive) triples of reference completions under the population's exact "
        "majority, over all triples of each prompt's completions:",
        "",
        *markdown_table(heads, counts),
        "",
        f"(Three criteria that rank independently at random make {INDEPENDENT_CYCLES:.1%} of "
        "triples cyclic.)",
    ]


def judges_section(layout: Layout) -> list[str]:
    e = json.loads(layout.judge_evaluation.read_text())
    titles = {"reward-model": "Bradley–Terry reward model", "preference-model": "preference model"}
    rows = [
        [
            titles.get(name, name),
            format_interval(row["labels"], 3),
            format_interval(row["majority"], 3),
            f"{format_interval(row['cyclic_majority'], 3)} (n = {row['cyclic_majority']['n']})",
        ]
        for name, row in e["judges"].items()
    ]
    heads = ["judge", "vs held-out labels", "vs exact majority", "cyclic pairs vs majority"]
    return [
        f"Held-out pairs: {e['held_out_pairs']} from {e['held_out_prompts']} prompts (the "
        f"trainers' own 20% split by prompt); {e['pairs_in_cycles']} of them lie in a cyclic "
        f"triple ({e['cyclic_triples']} of {e['triples']} held-out triples are cyclic). One "
        f"annotator's label agrees with the exact majority in "
        f"{format_interval(e['label_agrees_with_majority'], 3)} of pairs. Accuracy with 95% "
        "Wilson intervals; the last two rows are not learned: the exact P, and the "
        "Bradley–Terry reward fitted to the exact P of each prompt's completions (the best any "
        "reward model can do). The learned judges are queried with the prompt as the policy "
        'trainers pass it; their trainers saw it rendered as a chat turn ("Human: …").',
        "",
        *markdown_table(heads, rows),
    ]


def prediction_section(layout: Layout) -> list[str]:
    p = json.loads(layout.prediction.read_text())
    quantities = [
        ("P(π* ≻ π_RLHF)", "nash_vs_rlhf"),
        ("P(π* ≻ μ)", "nash_vs_reference"),
        ("P(π_RLHF ≻ μ)", "rlhf_vs_reference"),
        ("KL(π*‖μ) (nats)", "nash_kl"),
        ("KL(π_RLHF‖μ) (nats)", "rlhf_kl"),
        ("P(π* ≻ π_RLHF at the KL of π*)", "nash_vs_rlhf_equal_kl"),
    ]
    shift = p["criterion_shift"]
    shifts = [
        [escape_markdown(g), *(format_interval(shift[who][g], 3) for who in ("nash", "rlhf"))]
        for g in shift["nash"]
    ]
    return [
        f"For each of {p['prompts']} held-out prompts, the K = {p['K']} reference completions "
        "form a game with the population's exact P and the uniform reference μ; π* is its "
        f"τ-regularized Nash equilibrium (τ = {p['tau']:g}) and π_RLHF ∝ μ·exp(r/τ) for the "
        "Bradley–Terry reward r fitted to the same P. Means over prompts, 95% t intervals. The "
        "restricted game ignores what training can reach beyond the K completions, and its τ "
        "acts on K items rather than on sequences: it predicts a direction, not a number.",
        "",
        *markdown_table(
            ["quantity", "estimate"], [[q, format_interval(p[key], 3)] for q, key in quantities]
        ),
        "",
        "The Bradley–Terry reward is in log-odds units and P(y ≻ π) − ½ in probability units, "
        "so at one τ the RLHF optimum is sharper (further from μ) than π*; the last row compares "
        "the two at equal KL to μ.",
        "",
        "Which criterion each policy favours: E_π[s] − mean over the K completions of s.",
        "",
        *markdown_table(["criterion of group", "π*", "π_RLHF"], shifts),
    ]


def held_out_games(config: Config, layout: Layout) -> list[np.ndarray]:
    """The population's exact P on each held-out prompt's K reference completions."""
    population = load_population(config)
    return [
        exact_matrix(population, prompt, texts)
        for prompt, texts in reference_completions(layout)["eval"].items()
    ]


def theory_line(games: list[np.ndarray]) -> str:
    found = agreement(games)
    return (
        f"- Theory: on {found['coincide']} of {found['prompts']} held-out prompts the Borda "
        "winner (RLHF's pick) is the Condorcet winner, and on "
        f"{found['borda_in_support']} it lies in the maximal lottery's support, where "
        "P(Nash ≻ RLHF) = ½ is the prediction however strong the cycle (section 4)"
    )


def theory_section(
    config: Config, games: list[np.ndarray], tournament: dict[str, Any]
) -> list[str]:
    """Why a null is the prediction here: each held-out prompt's Borda and Condorcet winners,
    the restricted game's worst cases, and each policy's worst case in the tournament."""
    found = agreement(games)
    unit = (0.0, 1.0)
    worst = {"nash": [], "rlhf": []}
    for P in games:
        game = restricted_game(P, config.tau)
        worst["nash"].append(worst_case(P, game.nash)[0])
        worst["rlhf"].append(worst_case(P, game.rlhf)[0])
    rows = [
        ["held-out prompts", str(found["prompts"])],
        ["with a Condorcet winner among their K completions", str(found["condorcet"])],
        ["whose Borda (Bradley–Terry) winner is the Condorcet winner", str(found["coincide"])],
        [
            "whose Borda winner lies in the maximal lottery's support",
            str(found["borda_in_support"]),
        ],
        [
            "worst-case win rate of π*_τ in the restricted game",
            format_interval(mean_interval(np.array(worst["nash"]), bounds=unit).as_dict(), 3),
        ],
        [
            "worst-case win rate of π_RLHF in the restricted game",
            format_interval(mean_interval(np.array(worst["rlhf"]), bounds=unit).as_dict(), 3),
        ],
    ]
    tournament_rows = [
        [escape_markdown(name), format_interval(w), escape_markdown(w["against"])]
        for name, w in worst_cases(tournament).items()
    ]
    return [
        "The Bradley–Terry fit ranks by a Borda count, so RLHF plays the Borda winner; the "
        "Nash equilibrium (the maximal lottery as τ → 0) plays the Condorcet winner where one "
        "exists and mixes over the top cycle otherwise. Where the Borda winner lies in the "
        "lottery's support, P(Nash ≻ RLHF) = ½ however strong the cycle (an equilibrium is "
        "indifferent among its support), and a cycle shows only in the worst-case win rate, "
        "min_j Σ_i π(i)·P(i ≻ j). **A null head to head is therefore what theory predicts for "
        "a population whose Borda and Condorcet winners coincide**; a head-to-head win needs "
        "them to part, which needs no cycle (`nlhf experiment decoy` dials exactly that).",
        "",
        *markdown_table(
            ["on each held-out prompt's K completions (exact P)", "count or mean"], rows, "lr"
        ),
        "",
        "Each policy's worst case in the tournament: its lowest P(policy ≻ other) against any "
        "other entrant under the population (a best response restricted to the entrants):",
        "",
        *markdown_table(["policy", "worst case", "against"], tournament_rows, "lrl"),
    ]


def tuning_section(layout: Layout) -> list[str]:
    """The tuning stage's candidates and what each route took."""
    if not layout.tuning.exists():
        return ["Not run (no `--tune`): every route trained with the given options."]
    t = json.loads(layout.tuning.read_text())
    rows = []
    for route, entry in t["routes"].items():
        for label, c in entry["candidates"].items():
            changed = ", ".join(f"{k}={v:g}" for k, v in c["settings"].items()) or "as given"
            name = f"**{label}**" if label == entry["chosen"] else label
            rows.append([route, name, changed, format_interval(c["vs_reference"], 3)])
    heads = ["route", "candidate", "settings", "P(candidate ≻ reference)"]
    return [
        f"Short runs of {t['steps']} steps against the learned judges, one change at a time from "
        f"the given options; each candidate's P(candidate ≻ reference) under the population on "
        f"{t['prompts']} validation prompts × {t['samples_per_prompt']} completions (apart "
        "from the training and held-out prompts), 95% intervals. The route and its "
        "exact-population control train with the best candidate's settings (**bold**).",
        "",
        *markdown_table(heads, rows, "lllr"),
    ]


def training_section(
    config: Config, stages: dict[str, Any], curves: dict[str, list[dict[str, float]]]
) -> list[str]:
    per_step = dict.fromkeys(curves, config.batch_size)
    return [
        f"Every route trains a LoRA adapter (r = {config.lora_r}) on the same prompts for "
        f"{config.steps} steps of {config.batch_size} prompts: {config.steps * config.batch_size} "
        "judged comparisons (PPO: one score per completion; Nash-MD-PG: one pairwise judgement "
        "per prompt).",
        "",
        *training_table(curves, ROUTE_TITLES, per_step, stages),
        "",
        "The first four rows are at equal judged comparisons, not equal time: the minutes say "
        f"what each route cost. The last ({TIMED}) is the equal-time comparison: Nash-MD-PG "
        "against the learned preference model for as many steps as fit in PPO's training "
        "minutes at the Nash-MD-PG route's measured seconds per step, so its step count "
        "depends on the machine.",
        "",
        "![results](results.png)",
    ]


def tournament_section(tournament: dict[str, Any]) -> list[str]:
    s = tournament["settings"]
    return [
        f"{tournament['n_prompts']} held-out openings × {s['samples_per_prompt']} completions "
        "per policy; each cell P(row ≻ column) with its 95% interval over prompts. `population` "
        "is the ground truth; `only <group>` is one group's criterion alone. Details: "
        "[tournament/tournament.md](tournament/tournament.md).",
        *tournament_tables(tournament),
        "",
        "**Equilibrium check.** A policy at the Nash equilibrium of the population's game is "
        "at or above ½ against every other policy under the population:",
        "",
        *equilibrium_check(tournament),
    ]


def report(config: Config, layout: Layout) -> Report:
    """The verdicts and sections of ``report.md`` (and ``results.png``) of a finished run."""
    stages = layout.finished()
    tournament = json.loads((layout.tournament / "tournament.json").read_text())
    curves = {r: read_metrics(layout.policy(r) / "metrics.jsonl") for r in POLICIES}
    predicted = json.loads(layout.prediction.read_text())["nash_vs_rlhf"]
    plot(curves, config.batch_size, tournament, predicted, layout.plot)
    completions = [(p["name"], p["samples"]) for p in tournament["policies"]]
    games = held_out_games(config, layout)
    return Report(
        "When does NLHF beat RLHF? A population of annotators whose majority cycles",
        [*verdict_lines(config, layout, tournament), theory_line(games)],
        [
            ("The population", population_section(config, layout)),
            ("Judges trained on the population's labels", judges_section(layout)),
            ("The restricted-game prediction", prediction_section(layout)),
            (
                "What theory predicts for this population",
                theory_section(config, games, tournament),
            ),
            ("Tuning: each route's settings, chosen the same way", tuning_section(layout)),
            (
                "Training: same reference, same number of judged comparisons",
                training_section(config, stages, curves),
            ),
            ("Tournament on held-out prompts", tournament_section(tournament)),
            ("Completions", completion_tables(completions, 300)),
        ],
    )
