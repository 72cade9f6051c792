"""``report.md`` and ``results.png`` of a population run, built from the files the stages wrote.

Everything here reads the run folder (``stages.json``, ``judges/evaluation.json``,
``prediction.json``, the trainers' ``metrics.jsonl``, ``tournament/tournament.json``), so a
report can be rebuilt from a finished run:

    python -m nlhf.experiment.report runs/population-20261130-101500

Every verdict is decided by a 95% interval alone: a policy *beats* another only when the whole
interval of P(policy ≻ other) under the population lies above ½.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from nlhf.eval.report import completions_section, escape_markdown, matrix_table, table_row
from nlhf.experiment.config import POLICIES, ROUTE_TITLES, TIMED, Config, Layout
from nlhf.files import atomic_path, atomic_write_text

INDEPENDENT_CYCLES = 12 / 216
"""Share of cyclic triples when three criteria rank three items independently at random."""


def read_metrics(path: Path) -> list[dict[str, float]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def interval(entry: dict[str, Any] | None, digits: int = 2) -> str:
    """``mean [low, high]`` of an estimate or accuracy dict; n/a when there is none."""
    if not entry:
        return "n/a"
    mean = entry.get("mean", entry.get("accuracy"))
    if mean is None:
        return "n/a"
    low, high = entry.get("low"), entry.get("high")
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
    low, high = estimate.get("low"), estimate.get("high")
    text = f"P({row} ≻ {col}) = {interval(estimate)}"
    if low is not None and low > 0.5:
        return f"{text}: **{row} beats {col}**"
    if high is not None and high < 0.5:
        return f"{text}: **{col} beats {row}**"
    return f"{text}: no significant difference (the interval contains ½)"


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
        est = compare(tournament, judge, name, names[worst])
        status = (
            "at or above ½ against every other" if unbeaten else f"below ½ against {names[worst]}"
        )
        decided = f"; loses decidedly to {', '.join(lost)}" if lost else ""
        lines.append(f"- **{name}**: {status} (worst: {interval(est)} vs {names[worst]}){decided}")
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
    return [
        "- Under the population (the ground truth): "
        + verdict(compare(tournament, "population", "nash-md", "ppo"), "nash-md", "ppo"),
        f"- At equal wall-clock time ({TIMED}: Nash-MD-PG for as many steps as fit in PPO's "
        "training time), under the population: "
        + verdict(compare(tournament, "population", TIMED, "ppo"), TIMED, "ppo"),
        "- The controls, under the population: "
        + verdict(
            compare(tournament, "population", "nash-md-exact", "ppo-exact"),
            "nash-md-exact",
            "ppo-exact",
        ),
        f"- The restricted-game prediction: P(π* ≻ π_RLHF) = {interval(p, 3)} over "
        f"{prediction['prompts']} held-out prompts (K = {prediction['K']}, τ = {config.tau:g}), "
        f"{interval(prediction['nash_vs_rlhf_equal_kl'], 3)} at equal KL to μ: "
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
    from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

    fig = Figure(figsize=(15, 4), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, key, title in (
        (axes[0], "kl", "KL(π‖μ) of sampled completions (nats)"),
        (axes[1], None, "training signal: reward (PPO), P(y ≻ y′) (Nash)"),
    ):
        for name, rows in curves.items():
            k = key or ("reward" if name.startswith("ppo") else "win_rate")
            rows = [r for r in rows if k in r]
            if rows:
                x = np.array([r["step"] for r in rows]) * batch_size
                ax.plot(x, [r[k] for r in rows], marker=".", label=name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("judged comparisons")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
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
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    return path


# --------------------------------------------------------------------------- sections


def population_section(config: Config, layout: Layout) -> list[str]:
    from nlhf.models.judges.population import CRITERIA

    saved = json.loads(json.dumps(_saved_yaml(layout)["population_definition"]))
    cycles = json.loads(layout.prediction.read_text())["cycles"]
    lines = [
        "## 1. The population",
        "",
        f"`population:{config.population}`: each group prefers y to y′ with probability "
        "σ((s(y) − s(y′))/T); the population's P is the weighted mean over groups, and each "
        "label comes from one annotator drawn by weight.",
        "",
        table_row(["group", "criterion", "weight", "temperature T"]),
        table_row(["---", "---", "---:", "---:"]),
    ]
    for g in saved["groups"]:
        name = str(g["criterion"])
        described = f"{name}: {CRITERIA[name][1]}" if name in CRITERIA else name
        lines.append(
            table_row(
                [
                    escape_markdown(str(g.get("name", name))),
                    escape_markdown(described),
                    f"{float(g.get('weight', 1.0)):g}",
                    f"{float(g.get('temperature', 1.0)):g}",
                ]
            )
        )
    lines += [
        "",
        "Cyclic (intransitive) triples of reference completions under the population's exact "
        "majority, over all triples of each prompt's completions:",
        "",
        table_row(["completions", "prompts", "cyclic triples", "share", "prompts with a cycle"]),
        table_row(["---", "---:", "---:", "---:", "---:"]),
    ]
    for part, k in (("train", config.samples), ("eval", config.eval_samples)):
        c = cycles[part]
        share = c["cyclic"] / c["triples"] if c["triples"] else math.nan
        lines.append(
            table_row(
                [
                    f"{'training' if part == 'train' else 'held-out'} (K = {k})",
                    str(c["prompts"]),
                    f"{c['cyclic']} of {c['triples']}",
                    f"{share:.1%}",
                    str(c["prompts_with_a_cycle"]),
                ]
            )
        )
    lines += [
        "",
        f"(Three criteria that rank independently at random make {INDEPENDENT_CYCLES:.1%} of "
        "triples cyclic.)",
    ]
    return lines


def judges_section(layout: Layout) -> list[str]:
    e = json.loads(layout.judge_evaluation.read_text())
    lines = [
        "## 2. Judges trained on the population's labels",
        "",
        f"Held-out pairs: {e['held_out_pairs']} from {e['held_out_prompts']} prompts (the "
        f"trainers' own 20% split by prompt); {e['pairs_in_cycles']} of them lie in a cyclic "
        f"triple ({e['cyclic_triples']} of {e['triples']} held-out triples are cyclic). One "
        f"annotator's label agrees with the exact majority in "
        f"{interval(e['label_agrees_with_majority'], 3)} of pairs. Accuracy with 95% Wilson "
        "intervals; the last two rows are not learned: the exact P, and the Bradley–Terry "
        "reward fitted to the exact P of each prompt's completions (the best any reward "
        "model can do). The learned judges are queried with the prompt as the policy trainers "
        'pass it; their trainers saw it rendered as a chat turn ("Human: …").',
        "",
        table_row(["judge", "vs held-out labels", "vs exact majority", "cyclic pairs vs majority"]),
        table_row(["---", "---:", "---:", "---:"]),
    ]
    titles = {"reward-model": "Bradley–Terry reward model", "preference-model": "preference model"}
    for name, row in e["judges"].items():
        lines.append(
            table_row(
                [
                    titles.get(name, name),
                    interval(row["labels"], 3),
                    interval(row["majority"], 3),
                    f"{interval(row['cyclic_majority'], 3)} (n = {row['cyclic_majority']['n']})",
                ]
            )
        )
    return lines


def prediction_section(config: Config, layout: Layout) -> list[str]:
    p = json.loads(layout.prediction.read_text())
    lines = [
        "## 3. The restricted-game prediction",
        "",
        f"For each of {p['prompts']} held-out prompts, the K = {p['K']} reference completions "
        "form a game with the population's exact P and the uniform reference μ; π* is its "
        f"τ-regularized Nash equilibrium (τ = {p['tau']:g}) and π_RLHF ∝ μ·exp(r/τ) for the "
        "Bradley–Terry reward r fitted to the same P. Means over prompts, 95% t intervals. The "
        "restricted game ignores what training can reach beyond the K completions, and its τ "
        "acts on K items rather than on sequences: it predicts a direction, not a number.",
        "",
        table_row(["quantity", "estimate"]),
        table_row(["---", "---:"]),
        table_row(["P(π* ≻ π_RLHF)", interval(p["nash_vs_rlhf"], 3)]),
        table_row(["P(π* ≻ μ)", interval(p["nash_vs_reference"], 3)]),
        table_row(["P(π_RLHF ≻ μ)", interval(p["rlhf_vs_reference"], 3)]),
        table_row(["KL(π*‖μ) (nats)", interval(p["nash_kl"], 3)]),
        table_row(["KL(π_RLHF‖μ) (nats)", interval(p["rlhf_kl"], 3)]),
        table_row(["P(π* ≻ π_RLHF at the KL of π*)", interval(p["nash_vs_rlhf_equal_kl"], 3)]),
        "",
        "The Bradley–Terry reward is in log-odds units and P(y ≻ π) − ½ in probability units, "
        "so at one τ the RLHF optimum is sharper (further from μ) than π*; the last row compares "
        "the two at equal KL to μ.",
        "",
        "Which criterion each policy favours: E_π[s] − mean over the K completions of s.",
        "",
        table_row(["criterion of group", "π*", "π_RLHF"]),
        table_row(["---", "---:", "---:"]),
    ]
    shift = p["criterion_shift"]
    for g in shift["nash"]:
        lines.append(
            table_row(
                [escape_markdown(g), interval(shift["nash"][g], 3), interval(shift["rlhf"][g], 3)]
            )
        )
    return lines


def tuning_section(layout: Layout) -> list[str]:
    """The tuning stage's candidates and what each route took."""
    heading = "## 4. Tuning: each route's settings, chosen the same way"
    if not layout.tuning.exists():
        return [heading, "", "Not run (no `--tune`): every route trained with the given options."]
    t = json.loads(layout.tuning.read_text())
    lines = [
        heading,
        "",
        f"Short runs of {t['steps']} steps against the learned judges, one change at a time from "
        f"the given options; each candidate's P(candidate ≻ reference) under the population on "
        f"{t['prompts']} validation prompts × {t['samples_per_prompt']} completions (apart "
        "from the training and held-out prompts), 95% intervals. The route and its "
        "exact-population control train with the best candidate's settings (**bold**).",
        "",
        table_row(["route", "candidate", "settings", "P(candidate ≻ reference)"]),
        table_row(["---", "---", "---", "---:"]),
    ]
    for route, entry in t["routes"].items():
        for label, c in entry["candidates"].items():
            changed = ", ".join(f"{k}={v:g}" for k, v in c["settings"].items()) or "as given"
            name = f"**{label}**" if label == entry["chosen"] else label
            lines.append(table_row([route, name, changed, interval(c["vs_reference"], 3)]))
    return lines


def training_section(
    config: Config, stages: dict[str, Any], curves: dict[str, list[dict[str, float]]]
) -> list[str]:
    lines = [
        "## 5. Training: same reference, same number of judged comparisons",
        "",
        f"Every route trains a LoRA adapter (r = {config.lora_r}) on the same prompts for "
        f"{config.steps} steps of {config.batch_size} prompts: {config.steps * config.batch_size} "
        "judged comparisons (PPO: one score per completion; Nash-MD-PG: one pairwise judgement "
        "per prompt). *Training*: the steps' own seconds; *stage*: with loading and saving. "
        "Values at the end: the mean over the last 10% of steps.",
        "",
        table_row(
            ["route", "steps", "judged", "training min", "stage min", "KL at the end", "signal"]
        ),
        table_row(["---", "---:", "---:", "---:", "---:", "---:", "---"]),
    ]
    for route in POLICIES:
        rows = curves[route]
        stage = stages.get(f"train {route}", {})
        if not rows:
            lines.append(table_row([ROUTE_TITLES[route], "0", "0", "–", "–", "–", "–"]))
            continue
        tail = rows[-max(1, len(rows) // 10) :]

        def mean(key: str, tail=tail) -> float:
            return float(np.mean([r[key] for r in tail if key in r] or [math.nan]))

        signal = (
            f"reward {mean('reward'):.3f}"
            if "reward" in rows[-1]
            else f"P(y ≻ y′) {mean('win_rate'):.3f}"
        )
        lines.append(
            table_row(
                [
                    ROUTE_TITLES[route],
                    str(int(rows[-1]["step"])),
                    f"{len(rows) * config.batch_size:,}",
                    f"{sum(r.get('step_seconds', 0.0) for r in rows) / 60:.1f}",
                    f"{stage.get('seconds', math.nan) / 60:.1f}",
                    f"{mean('kl'):.2f}",
                    signal,
                ]
            )
        )
    lines += [
        "",
        "The first four rows are at equal judged comparisons, not equal time: the minutes say "
        f"what each route cost. The last ({TIMED}) is the equal-time comparison: Nash-MD-PG "
        "against the learned preference model for as many steps as fit in PPO's training "
        "minutes at the Nash-MD-PG route's measured seconds per step, so its step count "
        "depends on the machine.",
        "",
        "![results](results.png)",
    ]
    return lines


def tournament_section(tournament: dict[str, Any]) -> list[str]:
    names = [p["name"] for p in tournament["policies"]]
    s = tournament["settings"]
    lines = [
        "## 6. Tournament on held-out prompts",
        "",
        f"{tournament['n_prompts']} held-out openings × {s['samples_per_prompt']} completions "
        "per policy; each cell P(row ≻ column) with its 95% interval over prompts. `population` "
        "is the ground truth; `only <group>` is one group's criterion alone. Details: "
        "[tournament/tournament.md](tournament/tournament.md).",
    ]
    for judge, j in tournament["judges"].items():
        mean, low, high = (
            np.array([[math.nan if v is None else v for v in row] for row in j[key]])
            for key in ("win_rate", "low", "high")
        )
        rest = [interval(e) for e in j["versus_rest"]]
        lines += [
            "",
            f"**Judge `{judge}`**",
            "",
            matrix_table(names, mean, low, high, "P(row ≻ col)", ("vs rest", rest)),
        ]
    criteria = [n for n, j in tournament["judges"].items() if j["kind"] == "score"]
    reference = tournament["policies"][0]["scores"]
    lines += [
        "",
        "Mean criterion score of each policy's completions (its change from the reference in "
        "parentheses), KL to the reference and length:",
        "",
        table_row(["policy", *[f"`{c}`" for c in criteria], "KL to reference", "length (tokens)"]),
        table_row(["---"] + ["---:"] * (len(criteria) + 2)),
    ]
    for p in tournament["policies"]:
        cells = []
        for c in criteria:
            gain = p["scores"][c]["mean"] - reference[c]["mean"]
            cells.append(f"{interval(p['scores'][c], 3)} ({gain:+.3f})")
        lines.append(
            table_row(
                [
                    f"**{escape_markdown(p['name'])}**",
                    *cells,
                    interval(p["kl"]) if p["kl"] else "n/a",
                    interval(p["length"], 1),
                ]
            )
        )
    lines += [
        "",
        "**Equilibrium check.** A policy at the Nash equilibrium of the population's game is "
        "at or above ½ against every other policy under the population:",
        "",
        *equilibrium_check(tournament),
    ]
    return lines


def _saved_yaml(layout: Layout) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(layout.config.read_text())


def build_report(config: Config, layout: Layout, command: str) -> str:
    """The markdown of ``report.md`` from the run folder of the (resolved) ``config``."""
    stages = json.loads(layout.stages.read_text()) if layout.stages.exists() else {}
    tournament = json.loads((layout.tournament / "tournament.json").read_text())
    curves = {r: read_metrics(layout.policy(r) / "metrics.jsonl") for r in POLICIES}
    predicted = json.loads(layout.prediction.read_text())["nash_vs_rlhf"]
    plot(curves, config.batch_size, tournament, predicted, layout.plot)
    total = sum(s["seconds"] for s in stages.values()) / 60.0
    per_stage = ", ".join(f"{name} {s['seconds'] / 60:.1f}" for name, s in stages.items())
    lines = [
        "# When does NLHF beat RLHF? A population of annotators whose majority cycles",
        "",
        f"Command: `{command}`",
        "",
        f"Wall time {total:.1f} minutes ({per_stage} minutes) on "
        f"{stages.get('prompts', {}).get('cpus', '?')} CPUs.",
        "",
        "## Verdict",
        "",
        "Each line is decided by its 95% interval alone.",
        "",
        *verdict_lines(config, layout, tournament),
        "",
        *population_section(config, layout),
        "",
        *judges_section(layout),
        "",
        *prediction_section(config, layout),
        "",
        *tuning_section(layout),
        "",
        *training_section(config, stages, curves),
        "",
        *tournament_section(tournament),
        "",
        *completions_section(tournament, "## 7. Completions"),
        "## 8. Configuration",
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
    saved = _saved_yaml(layout)
    saved.pop("population_definition", None)
    return Config(**saved)


if __name__ == "__main__":
    layout = Layout(Path(sys.argv[1]))
    config = saved_config(layout)
    print(write_report(config, layout, f"nlhf experiment population --out {layout.root}"))
