"""``nlhf experiment population``: the command (see :mod:`nlhf.experiment` for what it does).

    nlhf experiment population [--quick] [--out DIR] [key=value ...]

Starting writes the resolved options and the population's definition to ``DIR/config.yaml``;
running again with the same ``--out`` resumes (finished stages are skipped, trainers continue
from their checkpoints) and refuses options that differ from the ones the run started with.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from nlhf import resumable
from nlhf.config import to_dict
from nlhf.experiment.config import Config, Layout, resolved
from nlhf.models.policy import resolve_dtype

__all__ = ["Config", "run"]


def default_out() -> str:
    return time.strftime("runs/population-%Y%m%d-%H%M%S")


def saved_options(config: Config) -> dict[str, Any]:
    """What ``config.yaml`` holds: the options, and the population they name spelled out."""
    from nlhf.experiment.stages import load_population

    return {**to_dict(config), "population_definition": load_population(config).definition}


def start_or_resume(config: Config, layout: Layout) -> None:
    """Write ``config.yaml`` for a new run; check it against the saved one for a resumed run."""
    resumable.start_or_resume(saved_options(config), layout.config, "experiment")


def command_line(config: Config) -> str:
    """The shortest command that runs (or resumes) this resolved config."""
    defaults = dataclasses.replace(Config(), dtype=resolve_dtype("auto"))
    return resumable.command_line(["nlhf", "experiment", "population"], config, defaults)


def run(config: Config) -> int:
    import torch

    from nlhf.experiment.report import write_report
    from nlhf.experiment.stages import run_all

    config = resolved(dataclasses.replace(config, out=config.out or default_out()))
    layout = Layout(Path(config.out))
    resumable.check_models(config)
    start_or_resume(config, layout)
    resume = command_line(config)
    torch.manual_seed(config.seed)
    try:
        run_all(config, layout)
    except KeyboardInterrupt:
        print(f"\n[experiment] interrupted; continue where it stopped with:\n  {resume}")
        return 130
    print(f"[experiment] report: {write_report(config, layout, resume)}")
    return 0
