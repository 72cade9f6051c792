"""Put a finished demo run's results into the docs and its verdicts into the README.

    python scripts/readme.py runs/demo-20261130-101500             # ./README.md and ./docs
    python scripts/readme.py runs/demo-20261130-101500 README.md

Fills the block between the ``<!-- demo:lm -->`` and ``<!-- /demo:lm -->`` markers (on
``docs/results/demo.md``) with the run's command line, wall time, verdicts, judge table,
training table and tournament tables (the sections of nlhf.demo.report, from the run's files),
the README's ``<!-- demo:headline -->`` block with the verdicts (at matched KL first) and the
frontier plot (the heat map where the run has no frontier), and copies the run's heat map,
training curves and frontier to ``docs/images/demo-heatmap.png``, ``demo-curves.png`` and
``demo-frontier.png``.  The run folder is what ``nlhf demo`` (``make demo``) wrote;
a run of ``nlhf demo --all-methods`` fills the ``<!-- demo:all -->`` block
(``docs/results/all-methods.md``) and its images are ``docs/images/demo-all-*.png``.

Repository tooling, not part of the installed package: it needs the package installed
(``pip install -e .``) and is run from a checkout.  ``update_readme(run, readme)`` is the
whole job, for callers that load this file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from functools import partial
from pathlib import Path

from nlhf.demo.plan import methods
from nlhf.demo.report import (
    CURVES,
    judges_section,
    pairs,
    tournament_section,
    training_section,
    verdicts,
)
from nlhf.demo.run import RUN
from nlhf.demo.stages import FRONTIER
from nlhf.files import atomic_write_text
from nlhf.reporting import read_metrics, verdict_lines
from nlhf.resumable import RunFolder


def markers(all_methods: bool) -> tuple[str, str]:
    tag = "all" if all_methods else "lm"
    return f"<!-- demo:{tag} -->", f"<!-- /demo:{tag} -->"


def training_rows(config, layout: RunFolder) -> list[str]:
    """The training section of the report without the curves image."""
    chosen = methods(config, layout)
    curves = {m.name: read_metrics(layout.policy(m.name) / "metrics.jsonl") for m in chosen}
    lines = training_section(chosen, curves, layout.finished(), config.minutes)
    return [line for line in lines if CURVES not in line]


def summary(layout: RunFolder, images: str, prefix: str = "demo") -> str:
    """The README's demo block: command, wall time, verdicts, judges, tournament tables."""
    config = RUN.saved_config(layout)
    stages = layout.finished()
    tournament = json.loads((layout.tournament / "tournament.json").read_text())
    names = [m.name for m in methods(config, layout)]
    minutes = sum(s["seconds"] for s in stages.values()) / 60.0
    command = RUN.command_line(config).replace(f" --out {config.out}", "")
    tables = tournament_section(tournament)
    link = "[tournament/tournament.md](tournament/tournament.md)"
    tables = [
        line.replace("tournament/heatmap.png", f"{images}/{prefix}-heatmap.png").replace(
            link, "`tournament/tournament.md` of the run"
        )
        for line in tables
    ]
    default = not (config.all_methods or config.frontier or config.seeds > 1)
    same = " (`make demo` runs the same command)" if default else ""
    return "\n".join(
        [
            f"Latest run: `{command}` on {stages['prompts'].get('cpus', '?')} CPU cores, "
            f"{minutes:.1f} minutes in all{same}. Verdicts "
            "(decided by the 95% interval alone"
            + (
                "; each method against the reference, the rest in the tables):"
                if config.all_methods
                else "):"
            ),
            "",
            *(
                verdict_lines(tournament, pairs(names, each_other=False))
                if config.all_methods
                else verdicts(config, layout)
            ),
            "",
            *judges_section(layout),
            "",
            *training_rows(config, layout),
            "",
            *tables,
            "",
            f"![training curves]({images}/{prefix}-curves.png)",
        ]
    )


def headline(layout: RunFolder, images: str) -> str:
    """The README's block: the latest demo's verdicts (at matched KL first), heat map."""
    said = verdicts(RUN.saved_config(layout), layout)
    if (layout.root / FRONTIER / "frontier.png").exists():
        return "\n".join([*said, "", f"![win rate against KL]({images}/demo-frontier.png)"])
    return "\n".join([*said, "", f"![win-rate heat map]({images}/demo-heatmap.png)"])


def update_readme(run: Path, readme: Path) -> None:
    """Fill this run's blocks wherever their markers are: ``readme`` and the pages of ``docs/``
    beside it (the full block on a results page; ``demo:headline``, the verdicts, on the
    README), with image links relative to each file."""
    layout = RunFolder(run)
    all_methods = RUN.saved_config(layout).all_methods
    prefix = "demo-all" if all_methods else "demo"
    blocks = {markers(all_methods): lambda images: summary(layout, images, prefix)}
    if not all_methods:
        blocks["<!-- demo:headline -->", "<!-- /demo:headline -->"] = partial(headline, layout)
    root = readme.parent
    images = root / "docs" / "images"
    images.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(layout.tournament / "heatmap.png", images / f"{prefix}-heatmap.png")
    shutil.copyfile(layout.root / CURVES, images / f"{prefix}-curves.png")
    if (layout.root / FRONTIER / "frontier.png").exists():
        shutil.copyfile(layout.root / FRONTIER / "frontier.png", images / f"{prefix}-frontier.png")
    filled = 0
    for page in [readme, *sorted((root / "docs").rglob("*.md"))]:
        text = new = page.read_text()
        for (begin, end), block in blocks.items():
            if begin in new and end in new:
                content = block(Path(os.path.relpath(images, page.parent)).as_posix())
                pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
                new = pattern.sub(lambda _, b=begin, e=end, c=content: f"{b}\n{c}\n{e}", new)
                filled += 1
        if new != text:
            atomic_write_text(page, new)
    if not filled:
        begin, end = markers(all_methods)
        raise ValueError(f"{readme}: no {begin} … {end} block to fill, nor in docs/")


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print("usage: python scripts/readme.py RUN_FOLDER [README.md]", file=sys.stderr)
        return 2
    update_readme(Path(argv[0]), Path(argv[1] if len(argv) > 1 else "README.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
