"""``nlhf judge eval``'s output: ``metrics.json`` and ``report.md`` (both written atomically).

    from nlhf.judge.eval_report import write_report
    write_report(result, "runs/judge-eval")    # result: the dict that becomes metrics.json

``result`` holds ``data``, ``pairs``, ``seconds``, ``labels_longer`` (the labels' agreement
with "the longer response wins"), ``judges`` (a list of :func:`judge_metrics` dicts, each
with its ``spec``) and ``agreement`` (None with one judge, else ``share``, ``kappa`` and the
``disagreements`` shown).  The markdown has one column per judge, then the two judges'
agreement and the pairs where they disagree most; cells are escaped and cut short (a prompt
to its end, responses to their start).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from nlhf.eval.report import escape_markdown, table_row
from nlhf.files import atomic_write_json, atomic_write_text

CELL = 120
"""Characters of a prompt or response shown in a table cell."""

ROWS = (
    ("accuracy: P(chosen ≻ rejected) > ½, ties ½ [95% Wilson]", "accuracy"),
    ("mean P(chosen ≻ rejected)", "mean_p_chosen"),
    ("log loss: mean −log P(chosen ≻ rejected)", "log_loss"),
    ("calibration: ECE, 10 bins, both orders", "ece"),
    ("position bias: mean ½(P_A(c, r) + P_A(r, c)) − ½ [95% t]", "position_bias"),
    ("picks the longer response (ties ½)", "picks_longer"),
    ("seconds", "seconds"),
)


def _num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def cell(metrics: dict[str, Any], key: str) -> str:
    """One judge's value of ``key`` as the report shows it."""
    value = metrics[key]
    if key == "accuracy":
        low, high = metrics["accuracy_ci95"]
        return f"{_num(value)} [{_num(low)}, {_num(high)}]"
    if key == "position_bias":
        if value is None:
            return "n/a (antisymmetric by construction)"
        return f"{value['mean']:+.3f} [{_num(value['low'])}, {_num(value['high'])}]"
    return _num(value, 1 if key == "seconds" else 3)


def markdown_report(result: dict[str, Any]) -> str:
    judges = result["judges"]
    names = [escape_markdown(j["spec"]) for j in judges]
    lines = [
        f"# Judge check on {escape_markdown(result['data'])}",
        "",
        f"{result['pairs']} preference pairs of `{result['data']}` (seed {result['seed']}), "
        f"{len(judges)} judge{'s' if len(judges) > 1 else ''}, {result['seconds']:.1f} s.",
        "",
        table_row(["", *names]),
        table_row(["---", *["---:"] * len(judges)]),
        *(table_row([label, *(cell(j, key) for j in judges)]) for label, key in ROWS),
        "",
        f'Length baseline: "the longer response wins" (characters) agrees with the labels '
        f"in {result['labels_longer']:.3f} of the pairs (ties ½).  A judge that picks the "
        "longer response far more often than that leans on length.",
    ]
    both = result["agreement"]
    if both is not None:
        lines += [
            "",
            f"## Agreement between {names[0]} and {names[1]}",
            "",
            f"Same pick in {both['share']:.3f} of the pairs (a tie against a pick counts ½), "
            f"Cohen's κ {_num(both['kappa'])}.",
            "",
        ]
        shown = both["disagreements"]
        if not shown:
            lines.append("They pick the same response in every pair.")
        else:
            lines += [
                f"The {len(shown)} pairs where they pick differently and their "
                "probabilities differ most:",
                "",
                table_row(["pair", "prompt", "chosen", "rejected", *(f"P ({n})" for n in names)]),
                table_row(["---:", "---", "---", "---", "---:", "---:"]),
            ]
            for row in shown:
                prompt = row["prompt"]  # its end: the turn being answered
                prompt = "…" + prompt[-CELL:] if len(prompt) > CELL else prompt
                texts = [escape_markdown(prompt)]
                texts += [escape_markdown(row[k], CELL) for k in ("chosen", "rejected")]
                lines.append(table_row([str(row["pair"]), *texts, *(_num(x) for x in row["p"])]))
    lines += [
        "",
        "P(chosen ≻ rejected) is the judge's probability that the labelled winner wins.  "
        "ECE is over both orders of each pair (P → outcome 1, 1 − P → outcome 0).  "
        "P_A(x, y) is a pairwise judge's probability that x, shown first, wins; position "
        "bias > 0 means it favours the first position.  A score judge compares scores, so "
        "the order cannot matter.",
    ]
    return "\n".join(lines) + "\n"


def write_report(result: dict[str, Any], folder: str | Path) -> dict[str, Path]:
    folder = Path(folder)
    return {
        "metrics": atomic_write_json(folder / "metrics.json", result),
        "report": atomic_write_text(folder / "report.md", markdown_report(result)),
    }
