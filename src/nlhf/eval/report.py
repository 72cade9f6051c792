"""Tournament output: ``tournament.json``, ``tournament.md`` and ``heatmap.png`` (atomic writes).

    from nlhf.eval.report import write_report, markdown_report, escape_markdown
    write_report(result, "runs/tournament")     # result from nlhf.eval.run_tournament

Markdown cells escape the text they show (specials, line breaks, control characters), so
completions cannot break a table.  The heat map has one panel per judge.
"""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path

import numpy as np

from nlhf.eval.stats import Estimate
from nlhf.files import atomic_path, atomic_write_json, atomic_write_text

_SPECIAL = "\\`*_{}[]<>#|!"


def escape_markdown(text: str, limit: int | None = None) -> str:
    """Text safe inside a markdown table cell: specials escaped, line breaks as ``<br>``."""
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    out = "".join(
        "\\" + ch
        if ch in _SPECIAL
        else f"\\x{ord(ch):02x}"
        if ch not in "\n\r\t" and unicodedata.category(ch) == "Cc"
        else ch
        for ch in text
    )
    out = out.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "<br>")
    return out if out.strip() else "*(empty)*"


def _num(x: float | None, digits: int = 2) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def fmt_estimate(e: Estimate | None, digits: int = 2) -> str:
    """``mean [low, high]``; just the mean when the interval is undefined."""
    if e is None:
        return "n/a"
    if not (math.isfinite(e.low) and math.isfinite(e.high)):
        return _num(e.mean, digits)
    return f"{_num(e.mean, digits)} [{_num(e.low, digits)}, {_num(e.high, digits)}]"


def table_row(cells: list[str]) -> str:
    """One row of a markdown table."""
    return "| " + " | ".join(cells) + " |"


def matrix_table(
    names: list[str],
    mean: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    corner: str,
    extra: tuple[str, list[str]] | None = None,
    digits: int = 2,
) -> str:
    """A k × k markdown table, each cell ``mean [low, high]``; optional last column."""
    heads = [escape_markdown(n) for n in names]
    lines = [
        table_row([corner, *heads] + ([extra[0]] if extra else [])),
        table_row(["---"] + ["---:"] * (len(names) + (1 if extra else 0))),
    ]
    for a in range(len(names)):
        cells = []
        for b in range(len(names)):
            if a == b:
                cells.append("—")
            else:
                cells.append(fmt_estimate(Estimate(mean[a, b], low[a, b], high[a, b], 0), digits))
        lines.append(table_row([f"**{heads[a]}**", *cells] + ([extra[1][a]] if extra else [])))
    return "\n".join(lines)


def completions_section(tournament: dict, heading: str) -> list[str]:
    """Markdown: under ``heading``, each shown prompt of ``tournament.json`` with every
    policy's completion of it, one table per prompt."""
    policies = tournament["policies"]
    lines = [heading, ""]
    for i, sample in enumerate(policies[0]["samples"]):
        lines += [
            f"**Prompt {i + 1}:** {escape_markdown(sample['prompt'], 300)}",
            "",
            table_row(["policy", "completion"]),
            table_row(["---", "---"]),
        ]
        for p in policies:
            text = escape_markdown(p["samples"][i]["completion"], 300)
            lines.append(table_row([f"**{escape_markdown(p['name'])}**", text]))
        lines.append("")
    return lines


def markdown_report(result) -> str:
    """The tournament as markdown: win-rate matrices, policy stats, disagreements, samples."""
    s = result.settings
    names = result.names
    level = round(100 * s["level"])
    how = "Student t" if s["interval"] == "t" else "percentile bootstrap"
    lines = [
        "# Tournament",
        "",
        f"{len(names)} policies, {len(result.prompts)} prompts × {s['samples_per_prompt']} "
        f"completions each ({s['max_new_tokens']} new tokens at most, temperature "
        f"{s['temperature']}, seed {s['seed']}); judges: "
        + ", ".join(f"`{v.name}`" for v in result.verdicts)
        + ".",
        "",
        f"Each cell is P(row ≻ column): the judge's preference probability averaged over the "
        f"{s['comparisons_per_prompt_and_pair']} comparisons of each prompt ({s['pairing']} "
        f"sample pairs), then over prompts, with its {level}% interval over prompts "
        f"({how}; the prompt is the unit of independence). *vs rest* is the row's mean over "
        "all other columns.",
        "",
        "![win-rate heat map](heatmap.png)",
    ]
    for name, rates in result.win_rates.items():
        rest = [fmt_estimate(e) for e in rates.versus_rest]
        lines += [
            "",
            f"## Win rates — judge `{name}`",
            "",
            matrix_table(
                names, rates.mean, rates.low, rates.high, "P(row ≻ col)", ("vs rest", rest)
            ),
        ]
        lc = getattr(result, "length_controlled", {}).get(name)
        if lc is not None:
            lines += [
                "",
                f"Length-controlled (judge `{name}`): P(row ≻ col) had both completions been "
                "equally long — a logistic fit of the judge's P on the tanh-squashed length gap, "
                f"read at gap 0, {level}% bootstrap interval over prompts; *length weight* > 0 "
                "means the judge favoured the longer completion of that row's pairs on average.",
                "",
                matrix_table(
                    names,
                    lc.mean,
                    lc.low,
                    lc.high,
                    "LC P(row ≻ col)",
                    (
                        "length weight",
                        [f"{np.mean(np.delete(lc.slope[a], a)):+.2f}" for a in range(len(names))],
                    ),
                ),
            ]

    score_judges = [v.name for v in result.verdicts if v.scores is not None]
    lines += [
        "",
        "## Policies",
        "",
        f"Means over all completions with {level}% intervals over prompts. KL: "
        "Σ log π − log μ of the policy's own completions (a sample estimate of "
        "KL(π‖μ)). Length: completion tokens, EOS included.",
        "",
    ]
    heads = [
        "policy",
        "kind",
        *[f"score `{j}`" for j in score_judges],
        "KL to reference",
        "length (tokens)",
        "characters",
    ]
    lines += [table_row(heads), table_row(["---", "---"] + ["---:"] * (len(heads) - 2))]
    for p in result.policies:
        lines.append(
            table_row(
                [
                    f"**{escape_markdown(p.name)}**",
                    p.kind,
                    *[fmt_estimate(p.scores[j], 3) for j in score_judges],
                    fmt_estimate(p.kl),
                    fmt_estimate(p.length, 1),
                    f"{p.characters:.1f}",
                ]
            )
        )
    lines += [
        "",
        "Sources: "
        + "; ".join(f"**{escape_markdown(p.name)}** = `{p.spec}`" for p in result.policies)
        + ".",
    ]

    for (first, second), d in result.disagreements.items():
        k = len(names)
        winners = [
            ["—" if a == b else _num(d.different_winner[a, b]) for b in range(k)] for a in range(k)
        ]
        lines += [
            "",
            f"## Where `{first}` and `{second}` disagree",
            "",
            f"Different winners in {fmt_estimate(d.overall)} of all comparisons (a tie under "
            "one judge and a win under the other counts as different). Large differences "
            "flag a policy that pleases one judge but not the other (reward hacking).",
            "",
            f"P_{first}(row ≻ col) − P_{second}(row ≻ col):",
            "",
            matrix_table(names, d.difference, d.difference_low, d.difference_high, "difference"),
            "",
            "Fraction of comparisons with different winners:",
            "",
            table_row(["pair", *[escape_markdown(n) for n in names]]),
            table_row(["---"] + ["---:"] * k),
            *[table_row([f"**{escape_markdown(names[a])}**", *winners[a]]) for a in range(k)],
        ]

    shown = len(result.policies[0].samples) if result.policies else 0
    if shown:
        lines += [
            "",
            "## Sample completions",
            "",
            "The first completion of each policy for the first prompts.",
        ]
        for i in range(shown):
            prompt = result.policies[0].samples[i]["prompt"]
            lines += [
                "",
                f"**Prompt {i + 1}:** {escape_markdown(prompt, 500)}",
                "",
                table_row(["policy", "completion"]),
                table_row(["---", "---"]),
            ]
            for p in result.policies:
                lines.append(
                    table_row(
                        [
                            f"**{escape_markdown(p.name)}**",
                            escape_markdown(p.samples[i]["completion"], 500),
                        ]
                    )
                )
    sec = result.seconds
    lines += [
        "",
        f"Sampling took {sec.get('sampling', 0):.1f} s, judging {sec.get('judging', 0):.1f} s.",
        "",
    ]
    return "\n".join(lines)


def plot_heatmap(result, path: str | Path) -> Path:
    """One panel per judge: P(row ≻ column) in colour, with the value and interval in cells."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

    names = result.names
    k, panels = len(names), len(result.win_rates)
    side = max(3.2, 1.1 * k + 1.6)
    fig = Figure(figsize=(side * panels + 1.0, side), layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)
    image = None
    for m, (ax, (judge, rates)) in enumerate(zip(axes[0], result.win_rates.items(), strict=True)):
        image = ax.imshow(rates.mean, cmap="RdBu", vmin=0.0, vmax=1.0)
        for a in range(k):
            for b in range(k):
                value = rates.mean[a, b]
                text = "½" if a == b else f"{value:.2f}"
                if a != b and math.isfinite(rates.low[a, b]):
                    text += f"\n{rates.low[a, b]:.2f}–{rates.high[a, b]:.2f}"
                color = "white" if abs(value - 0.5) > 0.3 else "black"
                ax.text(b, a, text, ha="center", va="center", fontsize=9, color=color)
        ax.set_xticks(range(k), names, rotation=30, ha="right")
        ax.set_yticks(range(k), names)
        ax.set_xlabel("column policy")
        if m == 0:
            ax.set_ylabel("row policy")
        ax.set_title(f"P(row ≻ column), judge {judge}", fontsize=10)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="P(row ≻ column)")
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return path


def write_report(result, folder: str | Path) -> dict[str, Path]:
    """Write ``tournament.json``, ``tournament.md`` and ``heatmap.png`` into ``folder``."""
    folder = Path(folder)
    paths = {
        "json": atomic_write_json(folder / "tournament.json", result.as_dict()),
        "markdown": atomic_write_text(folder / "tournament.md", markdown_report(result)),
        "heatmap": plot_heatmap(result, folder / "heatmap.png"),
    }
    return paths
