"""How often does a population's majority cycle on real completions?  A table over criteria.

    .venv/bin/python scripts/population_cycles.py [--out runs/population-cycles] [--prompts 320]

1. Samples the reference completions of ``nlhf experiment population``'s default preset (its
   training prompts, 4 completions each; reused when the folder has them).
2. Scores them with every built-in criterion of ``nlhf.models.judges.population``.
3. For every three criteria and each shared temperature, builds each prompt's exact P (equal
   weights) and counts the triples of completions whose majority goes round in a circle.
Prints a markdown table (best first) and writes ``cycles.json`` in the folder.  This is how
the built-in populations were chosen; the figures are in the README.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import numpy as np

from nlhf.experiment.analysis import antisymmetric, cyclic_triples, population_matrix
from nlhf.experiment.config import Config, Layout
from nlhf.experiment.exact_population import criterion_scores
from nlhf.experiment.stages import reference_completions, stages
from nlhf.models.judges.population import (
    CRITERIA,
    AnnotatorGroup,
    PopulationJudge,
    _per_text,
    _words,
)
from nlhf.resumable import resolved

TEMPERATURES = (0.1, 0.03, 0.01)

CANDIDATES = {  # criteria measured beside the built-ins (per text, like theirs)
    "long_words": lambda t: float(np.mean([len(w) for w in _words(t)] or [0.0])) / 2,
    "first_person": lambda t: sum(w in {"i", "me", "my", "i'm", "i've"} for w in _words(t)) / 2,
    "questions": lambda t: t.count("?") / 2,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/population-cycles")
    parser.add_argument("--prompts", type=int, default=320, help="training prompts to sample")
    args = parser.parse_args()
    config = replace(resolved(Config(out=args.out)), train_prompts=args.prompts, progress=True)
    layout = Layout(Path(args.out))
    (layout.root / "data").mkdir(parents=True, exist_ok=True)
    if not layout.completions.is_file():
        first = stages(config, layout)
        first["prompts"]()
        first["reference completions"]()
    completions = reference_completions(layout)["train"]

    groups = [AnnotatorGroup(name, CRITERIA[name][0]()) for name in CRITERIA]
    groups += [AnnotatorGroup(name, _per_text(fn)) for name, fn in CANDIDATES.items()]
    everyone = PopulationJudge(groups)  # one group per criterion, to score them all at once
    names = [g.name for g in groups]
    per_prompt = [  # (G, K) scores of each prompt's completions
        criterion_scores(everyone, [prompt] * len(texts), texts)
        for prompt, texts in completions.items()
    ]

    results = []
    for trio in combinations(range(len(names)), 3):
        for t in TEMPERATURES:
            cyclic = total = 0
            for scores in per_prompt:
                P = antisymmetric(population_matrix(scores[list(trio)], np.ones(3), np.full(3, t)))
                c, n = cyclic_triples(P)
                cyclic, total = cyclic + c, total + n
            trio_names = [names[i] for i in trio]
            results.append(
                dict(criteria=trio_names, temperature=t, cyclic=cyclic, triples=total)
                | {"share": cyclic / total}
            )
    results.sort(key=lambda r: -r["share"])
    (layout.root / "cycles.json").write_text(json.dumps(results, indent=2))
    print("| criteria | T | cyclic triples | share |\n|---|---:|---:|---:|")
    for r in results:
        counts = f"{r['cyclic']} / {r['triples']}"
        print(f"| {', '.join(r['criteria'])} | {r['temperature']} | {counts} | {r['share']:.3f} |")


if __name__ == "__main__":
    main()
