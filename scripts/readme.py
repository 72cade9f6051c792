"""Put a finished demo run's headline results into the README and copy its images.

    python scripts/readme.py runs/demo-20261130-101500             # updates ./README.md
    python scripts/readme.py runs/demo-20261130-101500 README.md

Fills the block between the ``<!-- demo:lm -->`` and ``<!-- /demo:lm -->`` markers with the
run's command line, wall time, verdicts, judge table, training table and tournament tables
(all built by nlhf.demo.report from the run's files), and copies the run's heat map and
training curves to ``docs/images/demo-heatmap.png`` and ``docs/images/demo-curves.png``
beside the README.  The run folder is what ``nlhf demo`` (``make demo``) wrote.

Repository tooling, not part of the installed package: it needs the package installed
(``pip install -e .``) and is run from a checkout.  ``update_readme(run, readme)`` is the
whole job, for callers that load this file.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from nlhf.demo.plan import Layout, methods
from nlhf.demo.report import (
    judges_section,
    read_metrics,
    saved_config,
    tournament_section,
    training_section,
    verdict_lines,
)
from nlhf.demo.run import command_line
from nlhf.files import atomic_write_text

BEGIN, END = "<!-- demo:lm -->", "<!-- /demo:lm -->"


def training_rows(config, layout: Layout) -> list[str]:
    """The training table of the report (without its heading and the curves image)."""
    chosen = methods(config, layout)
    curves = {m.name: read_metrics(layout.policy(m.name) / "metrics.jsonl") for m in chosen}
    lines = training_section(chosen, curves, config.minutes)
    return [line for line in lines[2:] if "curves.png" not in line]


def summary(layout: Layout, images: str) -> str:
    """The README's demo block: command, wall time, verdicts, judges, tournament tables."""
    config = saved_config(layout)
    stages = json.loads(layout.stages.read_text())
    tournament = json.loads((layout.tournament / "tournament.json").read_text())
    names = [m.name for m in methods(config, layout)]
    minutes = sum(s["seconds"] for s in stages.values()) / 60.0
    command = command_line(config).replace(f" --out {config.out}", "")
    tables = tournament_section(tournament)[2:]  # without the section's own heading
    link = "[tournament/tournament.md](tournament/tournament.md)"
    tables = [
        line.replace("tournament/heatmap.png", f"{images}/demo-heatmap.png").replace(
            link, "`tournament/tournament.md` of the run"
        )
        for line in tables
    ]
    return "\n".join(
        [
            f"Latest run: `{command}` on {stages['prompts'].get('cpus', '?')} CPU cores, "
            f"{minutes:.1f} minutes in all (`make demo` runs the same command). Verdicts "
            "(decided by the 95% interval alone):",
            "",
            *verdict_lines(tournament, names),
            "",
            *judges_section(layout)[2:],
            "",
            *training_rows(config, layout),
            "",
            *tables,
            "",
            f"![training curves]({images}/demo-curves.png)",
        ]
    )


def update_readme(run: Path, readme: Path) -> None:
    layout = Layout(run)
    images = readme.parent / "docs" / "images"
    images.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(layout.tournament / "heatmap.png", images / "demo-heatmap.png")
    shutil.copyfile(layout.curves, images / "demo-curves.png")
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{readme}: no {BEGIN} … {END} block to fill")
    block = summary(layout, "docs/images")
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    atomic_write_text(readme, pattern.sub(lambda _: f"{BEGIN}\n{block}\n{END}", text))


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print("usage: python scripts/readme.py RUN_FOLDER [README.md]", file=sys.stderr)
        return 2
    update_readme(Path(argv[0]), Path(argv[1] if len(argv) > 1 else "README.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
