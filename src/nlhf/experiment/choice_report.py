"""``report.md`` and ``results.png`` of ``nlhf experiment decoy`` and ``cycle``, from the files
the stages wrote (``predictions.json`` first, then each cell's ``measurement.json``, the
judges' ``metrics.json`` and the trainers' ``metrics.jsonl``).

The prediction comes before the numbers: the report states what theory expects, then every
cell's exact prediction (written before training), then the measurement beside it with
"matched" (within :data:`nlhf.experiment.choice_measure.TOLERANCE`) or "not matched, because
…" with the measured cause: the learned judges' own prediction when it differs (judge error;
the prediction of the labels' own frequencies beside it says whether the error was already in
the labels or came with the learning), else the route that ended far from the target of the
judge it trained on (optimizer or budget, which one run does not separate), else the sampling
error of the measurement.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from nlhf.eval.report import escape_markdown, format_interval, markdown_table
from nlhf.experiment.choice_config import (
    RLHF_ROUTES,
    ROUTE_TITLES,
    ChoiceConfig,
    ChoiceLayout,
    CycleConfig,
)
from nlhf.experiment.choice_measure import (
    TOLERANCE,
    estimate,
    label_preferences,
    matched,
    shares,
    total_variation,
    worst,
)
from nlhf.experiment.choice_stages import (
    cell_name,
    label_wins,
    measurement,
    question,
    reference,
    seed_suffix,
    trained_in,
)
from nlhf.reporting import Report, draw_lines, figure, read_metrics, save_png, training_table
from nlhf.resumable import RunFolder
from nlhf.tabular.lottery import head_to_head
from nlhf.tabular.rlhf import fit_bradley_terry, rlhf_policy
from nlhf.tabular.solver import solve_regularized_nash

OFF_TARGET = 0.1
"""A route whose type distribution lies farther than this (total variation) from the target of
the judge it trained on did not reach it."""

PAIRS = (("nash-md", "ppo"), ("online-ipo", "ppo"), ("nash-md-exact", "ppo-exact"))
"""The head-to-heads of a cell: each Nash route against the RLHF route of the same judges."""


def symbol(config: ChoiceConfig) -> str:
    """The dial's symbol: λ for the cycle, ρ for the decoy."""
    return "λ" if isinstance(config, CycleConfig) else "ρ"


def over(config: ChoiceConfig) -> str:
    """What the intervals resample: the samples, and the seeds' runs where there are several."""
    if config.seeds == 1:
        return "resamples of their samples (one seed: not the variance between training runs)"
    return f"the {config.seeds} seeds' runs and their samples (a bootstrap over both)"


def runs_of(config: ChoiceConfig) -> list[tuple[int, str]]:
    """(k, label) of every seed's run: the label names the seed where there are several."""
    if config.seeds == 1:
        return [(0, "")]
    return [(k, f" (seed {config.seed + k})") for k in range(config.seeds)]


def type_names(config: ChoiceConfig) -> list[str]:
    return [*config.options, "other"]


def expectation(config: ChoiceConfig) -> list[str]:
    """What theory expects, written before any number."""
    a, b, c = config.options
    if isinstance(config, CycleConfig):
        return [
            f"Three voter types rank the rotations of {a} ≻ {b} ≻ {c}; a share λ of voters "
            f"ranks by a transitive quality {a} ≻ {b} ≻ {c}. The majority cycles while λ < ¼. "
            "The Bradley–Terry fit on pairs drawn evenly ignores the cycle (its rows sum to "
            "zero), so RLHF takes the quality's pick; the Nash equilibrium mixes while the "
            "majority cycles. **Expected: P(Nash ≻ RLHF) = ½ head to head in every cell; "
            "RLHF's worst-case win rate falls below ½ as the cycle grows, Nash's stays near "
            "½.**"
        ]
    w = config.w
    return [
        f"A share w = {w:g} of the voters ranks {a} ≻ {c} ≻ {b}, the rest {b} ≻ {a} ≻ {c}: "
        f"{b} is the Condorcet winner (it beats each other option {1 - w:g} to {w:g}) and the "
        f"decoy {c} loses to both. The Bradley–Terry fit counts Borda points weighted by how "
        f"often each answer appears in the judges' pairs, so RLHF takes {a} once the decoy's "
        f"share ρ exceeds 1 − 2w = {1 - 2 * w:g}; the Nash equilibrium stays on {b}. "
        f"**Expected: P(Nash ≻ RLHF) steps from ½ to about 1 − w = {1 - w:g} (less the "
        f"noise ε = {config.noise:g}) as ρ crosses {1 - 2 * w:g}.**"
    ]


# --------------------------------------------------------------------------- the cells


def learned_targets(
    cell: dict[str, Any], read: dict[str, Any], mu: np.ndarray, tau: float
) -> dict[str, np.ndarray]:
    """Each route's target under the judge it trained on: the learned judges' readings per
    type for the learned routes, the exact prediction for the controls."""
    p = cell["prediction"]
    targets = {"ppo-exact": np.array(p["rlhf"]), "nash-md-exact": np.array(p["nash"])}
    if "reward" in read:
        targets["ppo"] = rlhf_policy(np.array(read["reward"]), mu, p["beta"])
    if "preference" in read:
        P = np.clip(np.array(read["preference"]), 1e-6, 1 - 1e-6)
        np.fill_diagonal(P, 0.5)
        targets["nash-md"] = targets["online-ipo"] = solve_regularized_nash(P, mu, tau)
    return targets


def label_fit(wins: np.ndarray) -> dict[str, np.ndarray] | None:
    """What a cell's labels themselves say, before any judge learns them: their frequencies
    P̂, how often each pair of types was compared (n) and the Bradley–Terry fit of P̂ with
    those weights.  None when the fit is infinite (a type never compared)."""
    P_hat, n = label_preferences(wins)
    try:
        reward = fit_bradley_terry(P_hat, pair_weights=n)
    except ValueError:
        return None
    return {"reward": reward, "P": P_hat, "n": n}


def label_targets(
    cell: dict[str, Any], wins: np.ndarray, mu: np.ndarray, tau: float
) -> dict[str, np.ndarray] | None:
    """The targets of :func:`label_fit`: RLHF's for the labels' Bradley–Terry fit at the
    cell's β, and the regularized Nash equilibrium of their frequencies."""
    fit = label_fit(wins)
    if fit is None:
        return None
    return {
        "rlhf": rlhf_policy(fit["reward"], mu, cell["prediction"]["beta"]),
        "nash": solve_regularized_nash(fit["P"], mu, tau),
    }


def compare(
    config: ChoiceConfig, layout: ChoiceLayout, value: float, mu: np.ndarray
) -> dict[str, Any]:
    """The measured head-to-heads, worst cases and distances from target of one cell over its
    seeds' runs, each head-to-head with its verdict and each seed's own value."""
    cell = json.loads(layout.predictions.read_text())["cells"][f"{value:g}"]
    P = np.array(cell["P"])
    runs = [measurement(layout, value, k) for k in range(config.seeds)]
    counts = [{name: p["counts"] for name, p in m["policies"].items()} for m in runs]
    targets = [learned_targets(cell, m["judges"], mu, config.tau) for m in runs]
    labels = [label_targets(cell, label_wins(config, layout, value, k), mu, config.tau)
              for k in range(config.seeds)]  # fmt: skip
    said = [head_to_head(P, t["nash"], t["rlhf"]) for t in labels if t is not None]
    labelled = float(np.mean(said)) if len(said) == len(labels) else None  # the same for each pair
    names = list(counts[0])
    distances = [  # from the target of each seed's own judges
        {n: total_variation(shares(c[n]), t[n]) for n in names}
        for c, t in zip(counts, targets, strict=True)
    ]
    worsts = [{n: estimate(worst(P), [[c[n]]], config.seed) for n in names} for c in counts]
    out: dict[str, Any] = {
        "worst": worsts[0]
        if config.seeds == 1
        else {n: estimate(worst(P), [[c[n]] for c in counts], config.seed) for n in names},
        "worsts": worsts,  # each seed's own, over its samples
        "distance": {n: float(np.mean([d[n] for d in distances])) for n in names},
        "distances": distances,
        "pairs": {},
    }

    def head(a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ P @ b)

    for n, r in PAIRS:
        if n in names and r in names:
            est = estimate(head, [[c[n], c[r]] for c in counts], config.seed)
            judged = float(np.mean([head_to_head(P, t[n], t[r]) for t in targets]))
            text = verdict(est, cell, judged, labelled, out["distance"], (n, r), config.steps)
            seeds = [head(shares(c[n]), shares(c[r])) for c in counts]
            out["pairs"][(n, r)] = {"estimate": est, "verdict": text, "seeds": seeds}
    return out


def verdict(
    est: dict[str, float],
    cell: dict[str, Any],
    judged: float,
    labelled: float | None,
    distance: dict[str, float],
    pair: tuple[str, str],
    steps: int,
) -> str:
    """ "matched", or "not matched, because …" with the measured cause.  ``judged``: the
    head-to-head of the targets of the judges the routes trained on, under the exact P;
    ``labelled``: the same for the targets of the labels themselves (None: not computable),
    which says whether a judge error was already in the labels or came with the learning."""
    predicted = cell["prediction"]["nash_vs_rlhf"]
    n = pair[0]
    far = max(pair, key=lambda x: distance[x])
    if matched(est, predicted):
        if distance[far] > OFF_TARGET:
            return (
                f"matched, but {far} ended {distance[far]:.2f} in total variation from its "
                "target: the match is no evidence for the prediction"
            )
        return "matched"
    if not n.endswith("exact"):
        if abs(judged - predicted) > TOLERANCE:
            source = ""
            if labelled is not None:
                far_too = abs(labelled - predicted) > TOLERANCE
                where = "already in the labels" if far_too else "the judges' learning"
                source = f" (the labels' own frequencies give {labelled:.3f}: {where})"
            return (
                f"not matched, because of judge error: the targets of the learned judges give "
                f"{judged:.3f} where the exact population gives {predicted:.3f}{source}"
            )
    if distance[far] > OFF_TARGET:
        return (
            f"not matched, because of the optimizer or the budget ({steps} steps; one run does "
            f"not separate them): {far} ended {distance[far]:.2f} in total variation from the "
            "target of the judge it trained on"
        )
    return (
        "not matched, because of neither judge nor optimizer by these measures (both routes "
        f"lie within {OFF_TARGET:g} of their targets): the sampling error of the type counts"
    )


def cells_section(
    config: ChoiceConfig, comparisons: dict[float, dict[str, Any]], layout: ChoiceLayout
) -> tuple[list[str], list[str]]:
    """(the cell-by-cell table, the verdict lines)."""
    predictions = json.loads(layout.predictions.read_text())["cells"]
    heads = [symbol(config), "predicted P(Nash ≻ RLHF)", "τ, β → 0", "pair", "measured", "verdict"]
    rows, verdicts = [], []
    for value, comparison in comparisons.items():
        p = predictions[f"{value:g}"]
        for (n, r), entry in comparison["pairs"].items():
            text = entry["verdict"]
            rows.append(
                [
                    f"{value:g}",
                    f"{p['prediction']['nash_vs_rlhf']:.3f}",
                    f"{p['limit']['nash_vs_rlhf']:.3f}",
                    f"{n} vs {r}",
                    format_interval(entry["estimate"], 3),
                    text,
                ]
            )
            verdicts.append(
                f"- {symbol(config)} = {value:g}, {n} vs {r}: predicted "
                f"{p['prediction']['nash_vs_rlhf']:.3f}, measured "
                f"{format_interval(entry['estimate'], 3)}: **{text}**"
            )
        verdicts.append(worst_line(config, value, p["prediction"], comparison["worst"]))
    table = [
        "Prediction beside measurement, cell by cell. *Predicted*: π*_τᵀ P π_RL at the run's τ "
        "and each cell's paired β; *τ, β → 0*: the same at τ = β = 0.005. *Measured*: π̂_Nashᵀ "
        "P π̂_RLHF from the type counts of the two trained policies, with a 95% interval over "
        f"{over(config)}. *Matched*: within {TOLERANCE:g} of the prediction.",
        "",
        *markdown_table(heads, rows, "rrrlrl"),
    ]
    return table, verdicts


def worst_line(
    config: ChoiceConfig, value: float, prediction: dict[str, Any], measured: dict[str, Any]
) -> str:
    """One cell's worst-case win rates, measured beside predicted, matched or not."""
    parts = []
    for name, est in measured.items():
        predicted = prediction["worst_case_rlhf" if name in RLHF_ROUTES else "worst_case_nash"]
        said = "matched" if matched(est, predicted) else "not matched"
        parts.append(f"{name} {format_interval(est, 3)} ({predicted:.3f}, {said})")
    return (
        f"- {symbol(config)} = {value:g}, worst-case win rates, measured (predicted): "
        + "; ".join(parts)
    )


def policies_section(
    config: ChoiceConfig, comparisons: dict[float, dict[str, Any]], layout: ChoiceLayout
) -> list[str]:
    names = type_names(config)
    predictions = json.loads(layout.predictions.read_text())["cells"]
    heads = [symbol(config), "policy", *names, "TV from target", "worst case", "predicted worst"]
    rows = []
    for value, comparison in comparisons.items():
        p = predictions[f"{value:g}"]["prediction"]
        for target_name, pi in (("RLHF target π_RL", p["rlhf"]), ("Nash target π*_τ", p["nash"])):
            worst_pi = p["worst_case_rlhf"] if "RLHF" in target_name else p["worst_case_nash"]
            rows.append(
                [
                    f"{value:g}",
                    f"*{target_name}*",
                    *[f"{x:.2f}" for x in pi],
                    "",
                    "",
                    f"{worst_pi:.3f}",
                ]
            )
        for k, label in runs_of(config):
            for name, entry in measurement(layout, value, k)["policies"].items():
                pi = shares(entry["counts"])
                kind = "rlhf" if name in RLHF_ROUTES else "nash"
                rows.append(
                    [
                        f"{value:g}",
                        escape_markdown(name) + label,
                        *[f"{x:.2f}" for x in pi],
                        f"{comparison['distances'][k][name]:.2f}",
                        format_interval(comparison["worsts"][k][name], 3),
                        f"{p['worst_case_' + kind]:.3f}",
                    ]
                )
    return [
        f"Each trained policy's type shares over {config.measure_samples} completions, beside "
        "the two exact targets. *TV from target*: total variation from the target of the "
        "judge the route trained on (the learned judges' readings below for the learned "
        "routes, the exact targets for the controls). *Worst case*: min_j Σ_i π̂(i)·P(i ≻ j) "
        "under the exact population, its lowest win rate against any answer.",
        "",
        *markdown_table(heads, rows),
    ]


def centred(reward: Any) -> str:
    """The three options' rewards, centred over them."""
    r = np.asarray(reward[:3], dtype=np.float64)
    return " / ".join(f"{x:+.2f}" for x in r - r.mean())


def judges_section(config: ChoiceConfig, layout: ChoiceLayout) -> list[str]:
    names = type_names(config)
    predictions = json.loads(layout.predictions.read_text())["cells"]
    rows = []
    for value, (k, label) in ((v, run) for v in config.cells for run in runs_of(config)):
        folder = RunFolder(layout.cell(value, k))
        read = measurement(layout, value, k)["judges"]
        p = predictions[f"{value:g}"]
        accuracy = []
        for kind in ("reward-model", "preference-model"):
            path = folder.judge(kind) / "metrics.json"
            if path.exists():
                held = json.loads(path.read_text())["held_out"]
                accuracy.append(f"{kind} {held['accuracy']:.3f}")
        exact = np.array(p["prediction"]["reward"])
        learned = read.get("reward")
        said = label_fit(label_wins(config, layout, value, k))
        rows.append(
            [
                f"{value:g}{label}",
                ", ".join(accuracy) or "–",
                centred(exact),
                centred(said["reward"]) if said else "–",
                centred(learned) if learned else "–",
                f"{p['P'][1][0]:.3f}",
                f"{said['P'][1][0]:.3f} ({said['n'][1][0]:.0f})" if said else "–",
                f"{read['preference'][1][0]:.3f}" if "preference" in read else "–",
            ]
        )
    a, b, _ = config.options
    heads = [
        symbol(config),
        "held-out accuracy",
        f"exact BT reward ({' / '.join(names[:3])})",
        "labels' BT reward",
        "reward model's reading",
        f"exact P({b} ≻ {a})",
        f"labels' P({b} ≻ {a}) (pairs)",
        f"preference model's P({b} ≻ {a})",
    ]
    return [
        "The learned judges read per type: the reward model's mean score of up to six "
        "reference completions of each type (centred over the three options), the preference "
        "model's mean P over their pairs. Beside them, the Bradley–Terry fit of the exact "
        "population on the pairs as drawn and the exact P, and what the cell's labels "
        "themselves say: their frequencies P̂ (half a count added to each side) and the "
        "Bradley–Terry fit of P̂, each pair of types weighted by how often it was compared. "
        "The labels' columns separate the error of a finite sample of noisy labels from the "
        "judges' learning. Held-out accuracy is against the held-out labels (one noisy "
        "annotator each), not against the population's majority.",
        "",
        *markdown_table(heads, rows),
    ]


def reference_section(config: ChoiceConfig, layout: ChoiceLayout) -> list[str]:
    saved = reference(layout)
    counts, n = saved["counts"], sum(saved["counts"])
    names = type_names(config)
    missing = [names[k] for k, c in enumerate(counts[:3]) if c == 0]
    said = (
        "The reference produced every type."
        if not missing
        else f"**The reference never produced {', '.join(missing)}**: its judges' pairs use "
        "one written answer for it, and its share of μ is half a count."
    )
    mu = json.loads(layout.predictions.read_text())["mu"]
    examples = [f"`{escape_markdown(t.strip()) or '(empty)'}`" for t in saved["completions"][:8]]
    return [
        "The question as the policy reads it (chat template, answer begun):",
        "",
        "```text",
        question(layout)["text"],
        "```",
        "",
        f"{n} reference completions of {config.max_new_tokens} tokens at temperature 1: "
        + ", ".join(f"{names[k]} {c} ({c / max(n, 1):.0%})" for k, c in enumerate(counts))
        + f". {said} μ (half a count added to each type): "
        + ", ".join(f"{names[k]} {x:.3f}" for k, x in enumerate(mu))
        + ". First completions: "
        + ", ".join(examples)
        + ".",
    ]


def prediction_section(config: ChoiceConfig, layout: ChoiceLayout) -> list[str]:
    saved = json.loads(layout.predictions.read_text())
    names = type_names(config)
    rows = []
    for key, cell in saved["cells"].items():
        p, lim = cell["prediction"], cell["limit"]
        rows.append(
            [
                key,
                " / ".join(f"{x:.2f}" for x in cell["pairs"]),
                f"{p['beta']:.4g}",
                " / ".join(f"{x:.2f}" for x in p["rlhf"]),
                " / ".join(f"{x:.2f}" for x in p["nash"]),
                f"{p['kl_nash']:.2f}",
                f"{p['nash_vs_rlhf']:.3f}",
                f"{lim['nash_vs_rlhf']:.3f}",
                f"{p['worst_case_rlhf']:.3f} / {p['worst_case_nash']:.3f}",
            ]
        )
    heads = [
        symbol(config),
        f"pair types ({' / '.join(names)})",
        "β",
        "π_RL",
        "π*_τ",
        "KL (nats)",
        "P(Nash ≻ RLHF)",
        "τ, β → 0",
        "worst case RLHF / Nash",
    ]
    return [
        *expectation(config),
        "",
        f"Computed exactly in the tabular lab (`nlhf.tabular.lottery`) and written to "
        f"`predictions.json` before any route trained: the population's P over the types "
        f"(annotator noise ε = {config.noise:g}), μ the reference's type shares, the "
        "Bradley–Terry fit r on the judges' pairs as drawn, π_RL ∝ μ·exp(r/β), the "
        f"regularized Nash equilibrium π*_τ (τ = {config.tau:g}), β paired to τ by equal KL "
        "of the type distribution (clamped at 1e-4 where RLHF's pick lies closer to μ than "
        "π*). Because every judge here depends on the type alone, the sequence-level optima "
        "of both routes have exactly these type distributions.",
        "",
        *markdown_table(heads, rows),
    ]


def training_section(config: ChoiceConfig, layout: ChoiceLayout) -> list[str]:
    curves, titles = {}, {}
    for (k, label), value in ((run, v) for run in runs_of(config) for v in config.cells):
        for route in config.routes:
            name = f"{route} {cell_name(config, value)}{seed_suffix(k)}"
            if trained_in(config, value, route) != value:
                continue  # the same run as an earlier cell's
            folder = RunFolder(layout.cell(value, k))
            curves[name] = read_metrics(folder.policy(route) / "metrics.jsonl")
            titles[name] = f"{ROUTE_TITLES[route]} ({symbol(config)} = {value:g}{label})"
    per_step = dict.fromkeys(curves, config.batch_size)
    dial = symbol(config)
    shared = [
        f"{route} at {dial} = {v:g} is the run of {dial} = {trained_in(config, v, route):g}"
        for v in config.cells
        for route in config.routes
        if trained_in(config, v, route) != v
    ]
    note = (
        " The exact Nash control's judge is the population's P, the same in cells whose P is "
        "the same, so one run serves them: " + "; ".join(shared) + "."
        if shared
        else ""
    )
    seeds = f", from each of {config.seeds} seeds" if config.seeds > 1 else ""
    return [
        f"Every route trains a LoRA adapter (r = {config.lora_r}) on the one question for "
        f"{config.steps} steps of {config.batch_size} completions{seeds}.{note}",
        "",
        *training_table(curves, titles, per_step, layout.finished()),
    ]


def plot(config: ChoiceConfig, layout: ChoiceLayout, comparisons: dict[float, Any]) -> None:
    saved = json.loads(layout.predictions.read_text())["cells"]
    values = list(comparisons)
    fig, axes = figure(2, (12, 4))
    ax = axes[0]
    ax.plot(values, [saved[f"{v:g}"]["prediction"]["nash_vs_rlhf"] for v in values], "k--",
            label="predicted")  # fmt: skip
    for n, r in PAIRS:
        pts = [
            (v, c["pairs"][(n, r)]["estimate"])
            for v, c in comparisons.items()
            if (n, r) in c["pairs"]
        ]
        if pts:
            x = [v for v, _ in pts]
            y = [e["mean"] for _, e in pts]
            err = [[e["mean"] - e["low"] for _, e in pts], [e["high"] - e["mean"] for _, e in pts]]
            bars = ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=f"{n} vs {r}")
            if config.seeds > 1:  # each seed's own point
                each = [(v, s) for v, c in comparisons.items() for s in c["pairs"][(n, r)]["seeds"]]
                ax.plot(*zip(*each, strict=True), ".", color=bars[0].get_color(), alpha=0.5)
    draw_lines(ax, {}, "P(Nash ≻ RLHF): prediction and measurement", symbol(config))
    lines = {}
    for route in config.routes:
        lines[route] = (values, [comparisons[v]["worst"][route]["mean"] for v in values])
    draw_lines(axes[1], lines, "worst-case win rate (measured)", symbol(config), marker="o")
    for ax in axes:
        ax.axhline(0.5, color="black", lw=0.6)
    save_png(fig, layout.plot)


def report(config: ChoiceConfig, layout: ChoiceLayout) -> Report:
    mu = np.array(json.loads(layout.predictions.read_text())["mu"])
    comparisons = {v: compare(config, layout, v, mu) for v in config.cells}
    table, verdicts = cells_section(config, comparisons, layout)
    plot(config, layout, comparisons)
    title = "cycle" if isinstance(config, CycleConfig) else "decoy"
    return Report(
        f"When does NLHF beat RLHF? The {title} experiment on a forced choice",
        verdicts,
        [
            ("The prediction, written before training", prediction_section(config, layout)),
            ("The reference's answers", reference_section(config, layout)),
            ("Cells: prediction beside measurement", [*table, "", "![results](results.png)"]),
            ("Each policy's answers", policies_section(config, comparisons, layout)),
            ("Judges learned from the labels", judges_section(config, layout)),
            ("Training: one comparison budget", training_section(config, layout)),
        ],
    )
