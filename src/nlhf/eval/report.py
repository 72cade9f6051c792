"""Tournament output: ``tournament.json``, ``tournament.md`` and ``heatmap.png`` (atomic writes).

    from nlhf.eval.report import write_report, markdown_report, escape_markdown
    write_report(result, "runs/tournament")     # result from nlhf.eval.run_tournament

Markdown cells escape the text they show (specials, line breaks, control characters), so
completions cannot break a table.  The heat map has one panel per judge.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it is

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


def format_interval(e: Estimate | Mapping[str, Any] | None, digits: int = 2) -> str:
    """``mean [low, high]`` of an :class:`Estimate` or its dict (an accuracy's mean is its
    ``accuracy``): the mean alone where the interval is undefined, n/a without an estimate."""
    if isinstance(e, Estimate):
        e = vars(e)
    mean = (e or {}).get("mean", (e or {}).get("accuracy"))
    if mean is None:
        return "n/a"
    low, high = e.get("low"), e.get("high")
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return _num(mean, digits)
    return f"{_num(mean, digits)} [{_num(low, digits)}, {_num(high, digits)}]"


def table_row(cells: list[str]) -> str:
    """One row of a markdown table."""
    return "| " + " | ".join(cells) + " |"


def markdown_table(heads: list[str], rows: Iterable[list[str]], align: str = "") -> list[str]:
    """A markdown table's lines; ``align`` has an ``l`` or ``r`` per column (default: the
    first column left, the others right)."""
    align = align or "l" + "r" * (len(heads) - 1)
    rule = ["---" if side == "l" else "---:" for side in align]
    return [table_row(heads), table_row(rule), *map(table_row, rows)]


def matrix_table(
    names: list[str],
    mean: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    corner: str,
    extra: tuple[str, list[str]] | list[tuple[str, list[str]]] | None = None,
    digits: int = 2,
) -> str:
    """A k × k markdown table, each cell ``mean [low, high]``; optional last columns
    (``extra``: one (heading, cells) pair or a list of them)."""
    heads = [escape_markdown(n) for n in names]
    extras = [] if extra is None else [extra] if isinstance(extra, tuple) else list(extra)

    def cell(a: int, b: int) -> str:
        estimate = Estimate(mean[a, b], low[a, b], high[a, b], 0)
        return "—" if a == b else format_interval(estimate, digits)

    rows = [
        [
            f"**{heads[a]}**",
            *[cell(a, b) for b in range(len(names))],
            *[cells[a] for _, cells in extras],
        ]
        for a in range(len(names))
    ]
    return "\n".join(markdown_table([corner, *heads, *[h for h, _ in extras]], rows))


def worst_case_columns(
    names: list[str],
    worst: list[Any],
    opponent: list[int],
    response: list[Any],
) -> list[tuple[str, list[str]]]:
    """The "worst case" (lowest P against one other entrant, and which) and "vs best
    response" (the opponent that picks, per prompt, the entrant that beats the row most)
    columns of a win-rate table; ``worst`` and ``response`` are Estimates or their dicts."""
    worst_cells = [
        f"{format_interval(w)} vs {escape_markdown(names[b])}"
        for w, b in zip(worst, opponent, strict=True)
    ]
    return [
        ("worst case", worst_cells),
        ("vs best response", [format_interval(r) for r in response]),
    ]


def completion_tables(policies: list[tuple[str, list[dict[str, str]]]], limit: int) -> list[str]:
    """Each shown prompt with every policy's completion of it, one table per prompt
    (``policies``: each policy's name and samples, texts cut at ``limit`` characters)."""
    lines: list[str] = []
    for i, sample in enumerate(policies[0][1] if policies else []):
        rows = [
            [f"**{escape_markdown(name)}**", escape_markdown(samples[i]["completion"], limit)]
            for name, samples in policies
        ]
        lines += [
            *([""] if lines else []),
            f"**Prompt {i + 1}:** {escape_markdown(sample['prompt'], limit)}",
            "",
            *markdown_table(["policy", "completion"], rows, "ll"),
        ]
    return lines


def markdown_report(result) -> str:
    """The tournament as markdown: win-rate matrices, policy stats, disagreements, samples."""
    lines = _introduction(result)
    for name, rates in result.win_rates.items():
        lines += _win_rates(result, name, rates)
    lines += _policies(result)
    for judges, d in result.disagreements.items():
        lines += _disagreement(result.names, judges, d)
    if result.policies and result.policies[0].samples:
        lines += [
            "",
            "## Sample completions",
            "",
            "The first completion of each policy for the first prompts.",
            "",
            *completion_tables([(p.name, p.samples) for p in result.policies], 500),
        ]
    sec = result.seconds
    lines += [
        "",
        f"Sampling took {sec.get('sampling', 0):.1f} s, judging {sec.get('judging', 0):.1f} s.",
        "",
    ]
    return "\n".join(lines)


def _introduction(result) -> list[str]:
    s = result.settings
    how = "Student t" if s["interval"] == "t" else "percentile bootstrap"
    return [
        "# Tournament",
        "",
        f"{len(result.names)} policies, {len(result.prompts)} prompts × "
        f"{s['samples_per_prompt']} completions each ({s['max_new_tokens']} new tokens at most, "
        f"temperature {s['temperature']}, seed {s['seed']}); judges: "
        + ", ".join(f"`{v.name}`" for v in result.verdicts)
        + ".",
        "",
        f"Each cell is P(row ≻ column): the judge's preference probability averaged over the "
        f"{s['comparisons_per_prompt_and_pair']} comparisons of each prompt ({s['pairing']} "
        f"sample pairs), then over prompts, with its {_level(result)}% interval over prompts "
        f"({how}; the prompt is the unit of independence). *vs rest* is the row's mean over "
        "all other columns; *worst case* its lowest cell (the entrant that beats it most; "
        "against one fixed policy the best mixture of entrants is that one entrant), with a "
        "bootstrap interval over prompts that re-picks the entrant; *vs best response* its "
        "win rate against an opponent that plays, on each prompt, the entrant that beats it "
        "most there (read from few comparisons per prompt, it leans low). Where head to head "
        "reads ½, the worst case shows how exploitable a policy is.",
        "",
        "![win-rate heat map](heatmap.png)",
    ]


def _level(result) -> int:
    return round(100 * result.settings["level"])


def _win_rates(result, name: str, rates) -> list[str]:
    """One judge's matrix and, where it was fitted, its length-controlled matrix."""
    names = result.names
    rest = [
        ("vs rest", [format_interval(e) for e in rates.versus_rest]),
        *worst_case_columns(names, rates.worst_case, rates.worst_opponent, rates.best_response),
    ]
    lines = [
        "",
        f"## Win rates — judge `{name}`",
        "",
        matrix_table(names, rates.mean, rates.low, rates.high, "P(row ≻ col)", rest),
    ]
    lc = getattr(result, "length_controlled", {}).get(name)
    if lc is None:
        return lines
    weights = [f"{np.mean(np.delete(lc.slope[a], a)):+.2f}" for a in range(len(names))]
    return [
        *lines,
        "",
        f"Length-controlled (judge `{name}`): P(row ≻ col) had both completions been "
        "equally long — a logistic fit of the judge's P on the tanh-squashed length gap, "
        f"read at gap 0, {_level(result)}% bootstrap interval over prompts; *length "
        "weight* > 0 means the judge favoured the longer completion of that row's pairs on "
        "average.",
        "",
        matrix_table(
            names, lc.mean, lc.low, lc.high, "LC P(row ≻ col)", ("length weight", weights)
        ),
    ]


def _policies(result) -> list[str]:
    score_judges = [v.name for v in result.verdicts if v.scores is not None]
    heads = ["policy", "kind", *[f"score `{j}`" for j in score_judges]]
    heads += ["KL to reference", "sampled KL", "length (tokens)", "characters"]
    rows = [
        [
            f"**{escape_markdown(p.name)}**",
            p.kind,
            *[format_interval(p.scores[j], 3) for j in score_judges],
            format_interval(p.kl),
            format_interval(getattr(p, "kl_sampled", None)),
            format_interval(p.length, 1),
            f"{p.characters:.1f}",
        ]
        for p in result.policies
    ]
    sources = "; ".join(f"**{escape_markdown(p.name)}** = `{p.spec}`" for p in result.policies)
    return [
        "",
        "## Policies",
        "",
        f"Means over all completions with {_level(result)}% intervals over prompts. KL: "
        "KL(π‖μ) of the policy's own completions, exact over the vocabulary at every "
        "position and summed along the completion; sampled KL: Σ log π − log μ of the same "
        "completions' tokens (the same quantity in expectation, noisier). Length: "
        "completion tokens, EOS included.",
        "",
        *markdown_table(heads, rows, "ll" + "r" * (len(heads) - 2)),
        "",
        f"Sources: {sources}.",
    ]


def _disagreement(names: list[str], judges: tuple[str, str], d) -> list[str]:
    first, second = judges
    k = len(names)
    winners = [
        [f"**{escape_markdown(names[a])}**"]
        + ["—" if a == b else _num(d.different_winner[a, b]) for b in range(k)]
        for a in range(k)
    ]
    return [
        "",
        f"## Where `{first}` and `{second}` disagree",
        "",
        f"Different winners in {format_interval(d.overall)} of all comparisons (a tie under "
        "one judge and a win under the other counts as different). Large differences "
        "flag a policy that pleases one judge but not the other (reward hacking).",
        "",
        f"P_{first}(row ≻ col) − P_{second}(row ≻ col):",
        "",
        matrix_table(names, d.difference, d.difference_low, d.difference_high, "difference"),
        "",
        "Fraction of comparisons with different winners:",
        "",
        *markdown_table(["pair", *[escape_markdown(n) for n in names]], winners),
    ]


def plot_heatmap(result, path: str | Path) -> Path:
    """One panel per judge: P(row ≻ column) in colour, with the value and interval in cells."""
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
