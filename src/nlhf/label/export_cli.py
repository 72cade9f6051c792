"""``nlhf label export``: write the collected labels as a preference dataset (JSONL).

    nlhf label export --db labels.sqlite --out prefs.jsonl
    nlhf label export --db labels.sqlite --out prefs.jsonl --ties half --min-votes 2
    nlhf label export --db labels.sqlite --out votes.jsonl.gz --aggregate votes

The rows follow the project's schema (``prompt``, ``chosen``, ``rejected``, ``weight``,
``margin``, ``source`` plus labeling metadata) and load with ``nlhf.data.load_pairs``; see
:mod:`nlhf.label.export` for how votes, ties and skips become pairs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nlhf.config import Checked, option
from nlhf.label.export import ExportOptions, write_export
from nlhf.label.serve_cli import DB_HELP
from nlhf.label.store import LabelStore


@dataclass
class Config(Checked):
    """Export labels as preference pairs (prompt, chosen, rejected, weight, …), one JSON
    object per line; skips and can't-tell answers are never exported."""

    db: str = option("labels.sqlite", DB_HELP)
    out: str = option("preferences.jsonl", "output file (.jsonl, or .jsonl.gz for gzip)")
    format: Literal["jsonl"] = option("jsonl", "output format: jsonl (the project's schema)")
    aggregate: Literal["majority", "votes"] = option(
        "majority", "majority: one pair per task (plurality of A/B/tie); votes: one per vote"
    )
    ties: Literal["drop", "half"] = option(
        "drop", "ties: drop them, or half: write both orders with weight 0.5"
    )
    min_votes: int = option(1, "export only tasks with at least this many A/B/tie votes")

    def check(self) -> None:
        self.at_least(1, "min_votes")
        out = Path(self.out)
        if out.is_dir():
            raise ValueError(f"out: {out} is a folder; give a file name")
        if not out.parent.is_dir():
            raise ValueError(f"out: no folder {out.parent} to write {out.name} in")


def run(config: Config) -> int:
    store = LabelStore(config.db, create=False)
    try:
        options = ExportOptions(config.aggregate, config.ties, config.min_votes)
        rows = write_export(store, config.out, options)
    finally:
        store.close()
    print(f"nlhf label export: {rows} pairs written to {config.out}")
    if rows == 0:
        print("  (no task has enough votes yet)", file=sys.stderr)
    return 0
