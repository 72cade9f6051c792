"""``nlhf experiment population``: the command (see :mod:`nlhf.experiment` for what it does).

    nlhf experiment population [--quick] [--out DIR] [key=value ...]

Starting writes the resolved options and the population's definition to ``DIR/config.yaml``;
running again with the same ``--out`` resumes (finished stages are skipped, trainers continue
from their checkpoints), or only rebuilds ``report.md`` when every stage is done, and refuses
options that differ from the ones the run started with (:class:`nlhf.resumable.Run`).
"""

from __future__ import annotations

from typing import Any

from nlhf.config import to_dict
from nlhf.experiment.config import Config, Layout
from nlhf.experiment.exact_population import load_population
from nlhf.experiment.report import report
from nlhf.experiment.stages import stages
from nlhf.resumable import Run

__all__ = ["Config", "run"]


def saved_options(config: Config) -> dict[str, Any]:
    """What ``config.yaml`` holds: the options, and the population they name spelled out."""
    return {**to_dict(config), "population_definition": load_population(config).definition}


RUN = Run(("nlhf", "experiment", "population"), Config, Layout, stages, report, saved_options)


def run(config: Config) -> int:
    return RUN.run(config)
