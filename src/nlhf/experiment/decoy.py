"""``nlhf experiment decoy``: the experiment theory says decides when NLHF beats RLHF.

    nlhf experiment decoy                       # ρ = 0.05, 0.15, 0.3, 0.45 at w = 0.4
    nlhf experiment decoy --quick               # every stage at toy sizes
    nlhf experiment decoy --seeds 3             # every cell from 3 seeds: intervals over runs
    nlhf experiment decoy --out runs/x          # resume an interrupted run (Ctrl-C is safe)

A forced choice among three colours (:mod:`nlhf.experiment.choice`) labelled by Jackpot's
voters: a share w ranks A ≻ C ≻ B, the rest B ≻ A ≻ C.  The dial ρ is the decoy C's share
among the answers the judges' training pairs are drawn from: the Bradley–Terry reward (and so
RLHF) takes A once ρ > 1 − 2w, while the Nash equilibrium stays on the Condorcet winner B.
The exact predictions are written before training; each cell trains both judges, PPO against
the reward model, Nash-MD-PG and online IPO against the preference model and the
exact-population controls, counts each policy's answers and reports prediction beside
measurement (:mod:`nlhf.experiment.choice_stages`, :mod:`nlhf.experiment.choice_report`).
"""

from __future__ import annotations

from nlhf.experiment.choice_config import ChoiceLayout, DecoyConfig
from nlhf.experiment.choice_report import report
from nlhf.experiment.choice_stages import stages
from nlhf.resumable import Run

Config = DecoyConfig

RUN = Run(("nlhf", "experiment", "decoy"), Config, ChoiceLayout, stages, report)


def run(config: Config) -> int:
    return RUN.run(config)
