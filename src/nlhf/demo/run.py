"""``nlhf demo``: the command (see :mod:`nlhf.demo` for what it does).

    nlhf demo [--quick] [--all-methods] [--out DIR] [key=value ...]

Starting writes the resolved options to ``DIR/config.yaml``; running again with the same
``--out`` resumes (finished stages are skipped, trainers continue from their checkpoints) and
refuses options that differ from the ones the run started with.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from nlhf import resumable
from nlhf.config import to_dict
from nlhf.demo.config import Config, resolved
from nlhf.demo.plan import Layout
from nlhf.models.policy import resolve_dtype

__all__ = ["Config", "run"]


def default_out() -> str:
    return time.strftime("runs/demo-%Y%m%d-%H%M%S")


def start_or_resume(config: Config, layout: Layout) -> None:
    """Write ``config.yaml`` for a new run; check it against the saved one for a resumed run."""
    resumable.start_or_resume(to_dict(config), layout.config, "demo")


def command_line(config: Config) -> str:
    """The shortest command that runs (or resumes) this resolved config."""
    defaults = dataclasses.replace(Config(), dtype=resolve_dtype("auto"))  # as resolved
    return resumable.command_line(["nlhf", "demo"], config, defaults)


def run(config: Config) -> int:
    from nlhf.demo.report import write_report
    from nlhf.demo.stages import run_all

    config = resolved(dataclasses.replace(config, out=config.out or default_out()))
    layout = Layout(Path(config.out))
    resumable.check_models(config)  # before the judges train, not when the policy loads
    start_or_resume(config, layout)
    resume = command_line(config)
    try:
        run_all(config, layout)
    except KeyboardInterrupt:
        print(f"\n[demo] interrupted; continue where it stopped with:\n  {resume}")
        return 130
    report = write_report(config, layout, resume)
    print(f"[demo] report: {report}")
    return 0
