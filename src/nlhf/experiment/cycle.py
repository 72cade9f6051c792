"""``nlhf experiment cycle``: the negative control of ``nlhf experiment decoy``.

    nlhf experiment cycle                       # λ = 0.1 (the majority cycles) and 0.4 (not)
    nlhf experiment cycle --quick               # every stage at toy sizes
    nlhf experiment cycle --out runs/x          # resume an interrupted run (Ctrl-C is safe)

The same forced choice, labelled by three voter types that rank the three rotations of
0 ≻ 1 ≻ 2 (a majority cycle) mixed with voters of share λ who rank by a transitive quality
0 ≻ 1 ≻ 2; the cycle is overturned at λ = ¼.  Pairs draw the three options equally, so the
Bradley–Terry reward ignores the cycle and RLHF takes 0, while the Nash equilibrium mixes.
Theory: P(Nash ≻ RLHF) = ½ head to head in every cell; only the worst-case win rate tells
them apart.  Stages and report as for the decoy (:mod:`nlhf.experiment.choice_stages`,
:mod:`nlhf.experiment.choice_report`); the predictions are written before training.
"""

from __future__ import annotations

from nlhf.experiment.choice_config import ChoiceLayout, CycleConfig
from nlhf.experiment.choice_report import report
from nlhf.experiment.choice_stages import stages
from nlhf.resumable import Run

Config = CycleConfig

RUN = Run(("nlhf", "experiment", "cycle"), Config, ChoiceLayout, stages, report)


def run(config: Config) -> int:
    return RUN.run(config)
